//! `roce nvmf target`.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use roce::{Device, DeviceConfig};
use roce_nvmf::namespace::{Backend, DeviceMem, FileBackend};
use roce_nvmf::server::{self, Log};
use roce_nvmf::target::{Namespace, SubsystemConfig, Target, TargetConfig};

use crate::coll::args::parse_bytes;

#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The subsystem's NQN.
    #[arg(long, default_value = "nqn.2026-11.io.roce:disk")]
    pub nqn: String,
    /// Namespaces 1, 2, ... in order: a file or block device (used in
    /// place, its size is the namespace's), or `mem:SIZE` (e.g. mem:64M,
    /// zeroes in the device's registered memory, moved by RDMA with no
    /// copy, lost at exit). Comma-separated or repeated.
    #[arg(long = "namespace", value_delimiter = ',', required = true)]
    pub namespaces: Vec<String>,
    /// The address to serve on (the device's IP; it binds UDP 4791 there).
    #[arg(long, default_value = "127.0.0.1")]
    pub addr: IpAddr,
    /// The RDMA CM port (NVMe/RDMA's is 4420).
    #[arg(long, default_value_t = 4420)]
    pub port: u16,
    /// The device's UDP port (4791 is RoCEv2's; the kernel's CM sends there).
    #[arg(long, default_value_t = roce::cm::ROCE_PORT)]
    pub udp_port: u16,
    /// Logical block size in bytes (512 or 4096 ...).
    #[arg(long, default_value = "4096", value_parser = parse_bytes)]
    pub block_size: u64,
    /// Only these host NQNs may connect (repeat; default: any host).
    #[arg(long = "allow-host")]
    pub allow_hosts: Vec<String>,
    /// Largest transfer of one command (MDTS), e.g. 128K.
    #[arg(long, default_value = "128K", value_parser = parse_bytes)]
    pub max_transfer: u64,
    /// In-capsule data an I/O command may carry (0 = none).
    #[arg(long, default_value = "4096", value_parser = parse_bytes)]
    pub in_capsule: u64,
    /// I/O queues a controller may have.
    #[arg(long, default_value_t = 64)]
    pub io_queues: u16,
    /// Answer with plain SENDs, never SEND WITH INVALIDATE.
    #[arg(long)]
    pub no_invalidate: bool,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Write every packet to this pcap file.
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
}

/// A namespace from its `--namespace` spec. `mem:SIZE` lives in `dev`'s
/// registered memory, so reads and writes move by RDMA with no copy.
fn namespace(spec: &str, block: u32, dev: &Device) -> Result<Namespace, String> {
    let backend: Arc<dyn Backend> = if let Some(size) = spec.strip_prefix("mem:") {
        let len = parse_bytes(size)?;
        Arc::new(DeviceMem::new(dev, len).map_err(|e| format!("namespace {spec}: {e}"))?)
    } else {
        Arc::new(FileBackend::open(Path::new(spec)).map_err(|e| format!("namespace {spec}: {e}"))?)
    };
    Ok(Namespace::new(backend, block))
}

fn config(a: &TargetArgs, dev: &Device) -> Result<TargetConfig, String> {
    let block = u32::try_from(a.block_size)
        .ok()
        .filter(|b| b.is_power_of_two())
        .ok_or_else(|| format!("block size {}: must be a power of two from 512 B to 64 KiB", a.block_size))?;
    let namespaces = a.namespaces.iter().map(|s| namespace(s, block, dev)).collect::<Result<Vec<_>, _>>()?;
    let cfg = TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: a.nqn.clone(),
            allowed_hosts: a.allow_hosts.clone(),
            namespaces,
        }],
        traddr: a.addr.to_string(),
        trsvcid: a.port,
        max_transfer: u32::try_from(a.max_transfer).unwrap_or(u32::MAX),
        in_capsule: u32::try_from(a.in_capsule).unwrap_or(u32::MAX),
        max_io_queues: a.io_queues,
        send_with_invalidate: !a.no_invalidate,
        ..TargetConfig::default()
    };
    Ok(cfg)
}

pub fn main(a: &TargetArgs) -> ExitCode {
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(a: &TargetArgs) -> Result<(), String> {
    let mut dc = DeviceConfig::new(SocketAddr::new(a.addr, a.udp_port));
    dc.pcap = a.pcap.clone();
    let dev =
        Device::open(dc).map_err(|e| format!("cannot open a device on {}:{}: {e}", a.addr, a.udp_port))?;
    let cfg = config(a, &dev)?;
    let target = Arc::new(Target::new(cfg).map_err(|e| e.to_string())?);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }
    if let Some(secs) = a.duration {
        if !(secs.is_finite() && secs > 0.0) {
            return Err(format!("--duration {secs}: must be a positive number of seconds"));
        }
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(secs));
            stop.store(true, Ordering::Relaxed);
        });
    }
    let c = target.config();
    println!("NVMe-oF target: {} on {}:{} (RDMA, RoCEv2)", a.nqn, a.addr, a.port);
    for (i, ns) in c.subsystems[0].namespaces.iter().enumerate() {
        println!(
            "  namespace {}: {} ({} blocks of {} B, {} bytes)",
            i + 1,
            ns.backend.describe(),
            ns.blocks(),
            ns.block_size(),
            ns.backend.len()
        );
    }
    println!("  discovery: {} on the same port", roce_nvmf::wire::DISCOVERY_NQN);
    let log: Log = Arc::new(|m: &str| eprintln!("{m}"));
    let r = server::serve(&dev, target.clone(), a.port, &stop, log).map_err(|e| e.to_string());
    let s = target.stats();
    println!(
        "commands {} (reads {}, writes {}), bytes read {}, bytes written {}, errors {}, refused connects {}, malformed {}, keep-alive expiries {}",
        s.commands, s.reads, s.writes, s.bytes_read, s.bytes_written, s.errors, s.connects_refused, s.malformed, s.keep_alive_expired
    );
    r
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: TargetArgs,
    }

    /// Namespaces the machine cannot hold, and a block size that is not a
    /// power of two, are refused with a message, not an abort.
    #[test]
    fn a_namespace_too_large_or_a_bad_block_is_refused() {
        let dev = Device::open(DeviceConfig::new("127.0.0.46:4791".parse().unwrap())).unwrap();
        let args = |extra: &[&str]| {
            let mut v = vec!["target", "--namespace"];
            v.extend_from_slice(extra);
            Cli::try_parse_from(v).unwrap().a
        };
        let e = config(&args(&["mem:100000G"]), &dev).unwrap_err();
        assert!(e.contains("cannot allocate 107374182400000 bytes"), "{e}");
        let e = config(&args(&["mem:1M", "--block-size", "3000"]), &dev).unwrap_err();
        assert!(e.contains("must be a power of two"), "{e}");
        let c = config(&args(&["mem:1M"]), &dev).unwrap();
        assert_eq!(c.subsystems[0].namespaces[0].backend.len(), 1 << 20);
        assert!(c.subsystems[0].namespaces[0].backend.region().is_some());
    }
}
