//! `roce nvmf discover|connect|perf`: roce's NVMe/RDMA initiator.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use roce::{Device, DeviceConfig};
use roce_nvmf::initiator::{discover, pattern, sqe, Controller, Done, HostOptions};
use roce_nvmf::wire::{io, Sqe};

use crate::coll::args::parse_bytes;

/// Where the controller is and how to reach it.
#[derive(Debug, Args)]
pub struct Peer {
    /// The controller's address.
    pub addr: IpAddr,
    /// Its RDMA CM port.
    #[arg(long, default_value_t = 4420)]
    pub port: u16,
    /// Our address (default: the one that routes to ADDR); the device
    /// binds UDP 4791 there (the kernel's CM answers there).
    #[arg(long)]
    pub bind: Option<IpAddr>,
    #[arg(long, default_value_t = roce::cm::ROCE_PORT)]
    pub udp_port: u16,
    /// Our host NQN (default: one derived from the host name).
    #[arg(long)]
    pub hostnqn: Option<String>,
    /// Seconds to wait for each answer.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
}

#[derive(Debug, Args)]
pub struct DiscoverArgs {
    #[command(flatten)]
    pub peer: Peer,
}

#[derive(Debug, Args)]
pub struct ConnectArgs {
    #[command(flatten)]
    pub peer: Peer,
    /// The subsystem's NQN.
    #[arg(long)]
    pub nqn: String,
    /// Write this many bytes of a pseudo-random pattern at LBA 0 of
    /// namespace 1, read them back and compare.
    #[arg(long, value_parser = parse_bytes)]
    pub write_read_check: Option<u64>,
}

#[derive(Debug, Args)]
pub struct PerfArgs {
    #[command(flatten)]
    pub peer: Peer,
    #[arg(long)]
    pub nqn: String,
    /// randread, randwrite, read or write (as fio's rw=).
    #[arg(long, default_value = "randread")]
    pub rw: String,
    /// Block size of each I/O.
    #[arg(short = 'b', long = "bs", default_value = "4096", value_parser = parse_bytes)]
    pub bs: u64,
    /// I/Os in flight per queue.
    #[arg(short = 'q', long = "iodepth", default_value_t = 1)]
    pub iodepth: u16,
    /// I/O queues.
    #[arg(long, default_value_t = 1)]
    pub queues: u16,
    /// Entries of each I/O queue (at least the I/O depth; cut to the
    /// controller's CAP.MQES). More entries than I/Os in flight, as the
    /// Linux host's 128: a target frees an entry when the SEND of its
    /// response is acknowledged, which comes after the host has the
    /// response and may already send its next command.
    #[arg(long, default_value_t = 128)]
    pub queue_size: u16,
    /// Seconds to run.
    #[arg(short = 't', long = "time", default_value_t = 5.0)]
    pub time: f64,
    /// Bytes of the namespace to use (default: all of it).
    #[arg(long, value_parser = parse_bytes)]
    pub size: Option<u64>,
    /// The namespace.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
}

fn open(p: &Peer) -> Result<(Device, SocketAddr, Duration), String> {
    let ip = match p.bind {
        Some(ip) => ip,
        None => crate::ping::cm::route_to(p.addr).map_err(|e| e.to_string())?,
    };
    let dev = Device::open(DeviceConfig::new(SocketAddr::new(ip, p.udp_port)))
        .map_err(|e| format!("cannot open a device on {ip}:{}: {e}", p.udp_port))?;
    Ok((dev, SocketAddr::new(p.addr, p.port), Duration::from_secs(p.timeout.max(1))))
}

fn options(p: &Peer, nqn: &str, t: Duration) -> HostOptions {
    let mut o = HostOptions::new(nqn);
    if let Some(h) = &p.hostnqn {
        o.hostnqn = h.clone();
    }
    o.timeout = t;
    o
}

fn exit(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

pub fn discover_main(a: &DiscoverArgs) -> ExitCode {
    exit((|| {
        let (dev, addr, t) = open(&a.peer)?;
        let hostnqn = options(&a.peer, "", t).hostnqn;
        let entries = discover(&dev, addr, &hostnqn, t).map_err(|e| e.to_string())?;
        println!("Discovery Log Number of Records {}", entries.len());
        for (i, e) in entries.iter().enumerate() {
            println!("=====Discovery Log Entry {i}======");
            println!("trtype:  {}", if e.trtype == 1 { "rdma".into() } else { e.trtype.to_string() });
            println!(
                "adrfam:  {}",
                match e.adrfam {
                    1 => "ipv4",
                    2 => "ipv6",
                    _ => "other",
                }
            );
            println!("subtype: {}", if e.subtype == 2 { "nvme subsystem" } else { "discovery subsystem" });
            println!("portid:  {}", e.portid);
            println!("trsvcid: {}", e.trsvcid);
            println!("subnqn:  {}", e.subnqn);
            println!("traddr:  {}", e.traddr);
        }
        Ok(())
    })())
}

pub fn connect_main(a: &ConnectArgs) -> ExitCode {
    exit((|| {
        let (dev, addr, t) = open(&a.peer)?;
        let o = options(&a.peer, &a.nqn, t);
        let mut c = Controller::connect(&dev, addr, &o).map_err(|e| e.to_string())?;
        let i = c.info().clone();
        println!(
            "controller {}: {} (serial {}, firmware {}), NVMe {}.{}, MDTS {} ({} bytes per command), SGLS {:#x}",
            c.cntlid(),
            i.model,
            i.serial,
            i.firmware,
            i.version >> 16,
            (i.version >> 8) & 0xff,
            i.mdts,
            c.max_transfer(),
            i.sgls
        );
        let ns = c.namespaces().map_err(|e| e.to_string())?;
        for (id, n) in &ns {
            println!(
                "  namespace {id}: {} blocks of {} B ({} bytes)",
                n.blocks,
                n.block_size(),
                n.blocks * n.block_size()
            );
        }
        if let Some(bytes) = a.write_read_check {
            let (nsid, n) = ns.first().ok_or("the controller has no namespace")?;
            let nsid = *nsid;
            let bs = n.block_size();
            let len = bytes.div_ceil(bs) * bs;
            if len > n.blocks * bs {
                return Err(format!("--write-read-check {bytes}: the namespace holds {}", n.blocks * bs));
            }
            let data = pattern(len as usize, 0x9e37_79b9);
            let t0 = Instant::now();
            c.write(nsid, bs, 0, &data).map_err(|e| e.to_string())?;
            let mut back = vec![0u8; data.len()];
            c.read(nsid, bs, 0, &mut back).map_err(|e| e.to_string())?;
            if back != data {
                let at = back.iter().zip(&data).position(|(x, y)| x != y).unwrap_or(0);
                return Err(format!("read back differs from what was written, first at byte {at}"));
            }
            println!(
                "  wrote and read back {len} bytes at LBA 0 of namespace {nsid}: equal ({:.1} ms)",
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
        c.disconnect().map_err(|e| e.to_string())
    })())
}

pub fn perf_main(a: &PerfArgs) -> ExitCode {
    exit(perf(a))
}

fn perf(a: &PerfArgs) -> Result<(), String> {
    let (write, random) = match a.rw.as_str() {
        "randread" => (false, true),
        "randwrite" => (true, true),
        "read" => (false, false),
        "write" => (true, false),
        o => return Err(format!("--rw {o}: one of randread, randwrite, read, write")),
    };
    if !(a.time.is_finite() && a.time > 0.0) {
        return Err(format!("--time {}: must be a positive number of seconds", a.time));
    }
    if a.iodepth == 0 || a.queues == 0 {
        return Err("--iodepth and --queues must be at least 1".into());
    }
    let (dev, addr, t) = open(&a.peer)?;
    let mut o = options(&a.peer, &a.nqn, t);
    o.io_queues = a.queues;
    o.queue_depth = a.queue_size.max(a.iodepth).max(2);
    o.max_transfer = (a.bs as usize).max(4096);
    let mut c = Controller::connect(&dev, addr, &o).map_err(|e| e.to_string())?;
    let ns = c.namespaces().map_err(|e| e.to_string())?;
    let (_, n) = ns.iter().find(|(id, _)| *id == a.nsid).ok_or(format!("no namespace {}", a.nsid))?;
    let bs_ns = n.block_size();
    if a.bs % bs_ns != 0 || a.bs as usize > c.max_transfer() {
        return Err(format!(
            "--bs {}: must be whole {bs_ns} B blocks, at most the controller's {} bytes",
            a.bs,
            c.max_transfer()
        ));
    }
    let span = a.size.unwrap_or(n.blocks * bs_ns).min(n.blocks * bs_ns) / a.bs;
    if span == 0 {
        return Err("the namespace is smaller than one I/O".into());
    }
    let nlb = (a.bs / bs_ns - 1) as u32;
    let nsid = a.nsid;
    let queues = c.io_queues().len();
    if queues < usize::from(a.queues) {
        println!("note: the controller granted {queues} I/O queues of the {} asked for", a.queues);
    }
    let fill = pattern(a.bs as usize, 3);
    let mut lat: Vec<u32> = Vec::with_capacity(1 << 20);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut seq = 0u64;
    let mut next_lba = || {
        if random {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % span) * (a.bs / bs_ns)
        } else {
            let l = (seq % span) * (a.bs / bs_ns);
            seq += 1;
            l
        }
    };
    let qs = c.io_queues();
    let end = Instant::now() + Duration::from_secs_f64(a.time);
    let start = Instant::now();
    let mut done: Vec<Done> = Vec::new();
    let mut ios = 0u64;
    let submit = |q: &mut roce_nvmf::initiator::IoQueue, lba: u64| -> Result<(), String> {
        let slot = q.take_slot().ok_or("no free slot")?;
        if write {
            q.fill(slot, &fill).map_err(|e| e.to_string())?;
        }
        let mut b = sqe(if write { io::WRITE } else { io::READ }, nsid);
        let mut s = Sqe::new_checked(&mut b[..]).expect("64 bytes");
        s.set_qword_at(40, lba);
        s.set_cdw(2, nlb);
        s.set_dptr(&q.sgl(slot, a.bs as u32));
        q.submit(slot, b).map_err(|e| e.to_string())
    };
    for q in qs.iter_mut() {
        for _ in 0..a.iodepth {
            submit(q, next_lba())?;
        }
    }
    let wait = if qs.len() == 1 { Duration::from_millis(100) } else { Duration::ZERO };
    while qs.iter().any(|q| q.outstanding() > 0) {
        for q in qs.iter_mut() {
            done.clear();
            q.poll(wait, &mut done).map_err(|e| e.to_string())?;
            for d in &done {
                if !d.cqe.status.is_success() {
                    return Err(format!("I/O failed: {}", d.cqe.status));
                }
                ios += 1;
                lat.push(d.latency.as_nanos().min(u128::from(u32::MAX)) as u32);
                if Instant::now() < end {
                    submit(q, next_lba())?;
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    c.disconnect().map_err(|e| e.to_string())?;
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |&v| f64::from(v) / 1e3)
    };
    let iops = ios as f64 / secs;
    let mib = iops * a.bs as f64 / (1 << 20) as f64;
    println!("roce nvmf perf: rw={} bs={} iodepth={} queues={queues} time={secs:.1}s", a.rw, a.bs, a.iodepth);
    println!(
        "  {}: IOPS={iops:.0}, BW={mib:.1}MiB/s ({:.1}MB/s)",
        if write { "write" } else { "read" },
        iops * a.bs as f64 / 1e6
    );
    println!(
        "    clat (usec): p50={:.1}, p99={:.1}, p99.9={:.1}, max={:.1}",
        pct(0.5),
        pct(0.99),
        pct(0.999),
        lat.last().map_or(0.0, |&v| f64::from(v) / 1e3)
    );
    println!("result iops {iops:.0} bw_mib_s {mib:.2} p50_us {:.2} p99_us {:.2}", pct(0.5), pct(0.99));
    Ok(())
}
