//! The command line of `roce perf`: perftest's options (and ours), their
//! checks, and perftest's defaults and dependencies between them.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use roce::{CcAlgorithm, MrAddressing, PathMtu};

use super::{AtomicType, Kind, Test, Verb};
use crate::oob::{parse_mtu, Encryption, Error, Result, ROCE_UDP_PORT};

/// The tests, one subcommand each.
#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// RDMA WRITE bandwidth (ib_write_bw).
    WriteBw(PerfArgs),
    /// RDMA WRITE latency, a ping-pong of writes (ib_write_lat).
    WriteLat(PerfArgs),
    /// RDMA READ bandwidth (ib_read_bw).
    ReadBw(PerfArgs),
    /// RDMA READ latency, one read at a time (ib_read_lat).
    ReadLat(PerfArgs),
    /// SEND bandwidth (ib_send_bw).
    SendBw(PerfArgs),
    /// SEND latency, a ping-pong of sends (ib_send_lat).
    SendLat(PerfArgs),
    /// Atomic (fetch-and-add or compare-and-swap) bandwidth (ib_atomic_bw).
    AtomicBw(PerfArgs),
    /// Atomic latency, one atomic at a time (ib_atomic_lat).
    AtomicLat(PerfArgs),
}

impl PerfCommand {
    pub(super) fn split(&self) -> (Test, &PerfArgs) {
        use PerfCommand::*;
        let (verb, kind, a) = match self {
            WriteBw(a) => (Verb::Write, Kind::Bw, a),
            WriteLat(a) => (Verb::Write, Kind::Lat, a),
            ReadBw(a) => (Verb::Read, Kind::Bw, a),
            ReadLat(a) => (Verb::Read, Kind::Lat, a),
            SendBw(a) => (Verb::Send, Kind::Bw, a),
            SendLat(a) => (Verb::Send, Kind::Lat, a),
            AtomicBw(a) => (Verb::Atomic, Kind::Bw, a),
            AtomicLat(a) => (Verb::Atomic, Kind::Lat, a),
        };
        (Test { verb, kind }, a)
    }
}

/// perftest's options, and ours (from `--bind` on).
#[derive(Debug, Clone, clap::Args)]
pub struct PerfArgs {
    /// Server to connect to (client mode); without it, wait for a client.
    #[arg(value_name = "SERVER", conflicts_with = "loopback")]
    pub server: Option<String>,
    /// Message size in bytes [default: 65536 for BW, 2 for latency, 8 for atomics].
    #[arg(short = 's', long, value_name = "BYTES", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Number of exchanges, at least 5 [default: 5000 for write-bw, else 1000].
    #[arg(short = 'n', long, value_name = "N", value_parser = parse_iters)]
    pub iters: Option<u64>,
    /// Run sizes 2 .. 2^23 bytes.
    #[arg(short = 'a', long, conflicts_with = "size")]
    pub all: bool,
    /// Number of QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", value_name = "N", default_value_t = 1, value_parser = parse_qps)]
    pub qps: usize,
    /// Run for this many seconds instead of a number of exchanges.
    #[arg(short = 'D', long, value_name = "SECS", conflicts_with_all = ["iters", "all"], value_parser = parse_duration)]
    pub duration: Option<u64>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: 4096 on loopback, else 1024].
    #[arg(short = 'm', long, value_name = "BYTES", value_parser = parse_mtu)]
    pub mtu: Option<PathMtu>,
    /// TCP port of the out-of-band exchange [default: 18515; any free port with --loopback].
    #[arg(short = 'p', long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Measure both directions at once (bandwidth tests).
    #[arg(short = 'b', long)]
    pub bidirectional: bool,
    /// Report bandwidth in Gb/sec instead of MB/sec.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Work requests outstanding per QP [default: 128 for BW, 1 for latency].
    #[arg(short = 't', long = "tx-depth", value_name = "N", value_parser = parse_tx_depth)]
    pub tx_depth: Option<u32>,
    /// Receives posted per QP in SEND tests [default: 512].
    #[arg(short = 'r', long = "rx-depth", value_name = "N", value_parser = parse_rx_depth)]
    pub rx_depth: Option<u32>,
    /// Request a completion every N work requests [default: 100].
    #[arg(short = 'Q', long = "cq-mod", value_name = "N", value_parser = parse_cq_mod)]
    pub cq_mod: Option<u32>,
    /// Outstanding RDMA READs/atomics per QP, 1..16 [default: 16].
    #[arg(short = 'o', long = "outs", value_name = "N", value_parser = parse_outs)]
    pub outs: Option<u8>,
    /// GID index; this device has one GID, 0 (the bound address).
    #[arg(short = 'x', long = "gid-index", value_name = "INDEX", value_parser = parse_gid_index)]
    pub gid_index: Option<u32>,
    /// Accepted for compatibility and ignored: the device is the UDP socket.
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Accepted for compatibility (wall-clock time is used, not CPU cycles).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Atomic operation of atomic tests [default: FETCH_AND_ADD].
    #[arg(short = 'A', long = "atomic_type", value_name = "TYPE", value_enum)]
    pub atomic_type: Option<AtomicType>,
    /// IP address of the device (its GID) [default: the address the TCP peer reaches].
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// UDP port of the device (0: any free port) [with --loopback: the server's].
    #[arg(long = "udp-port", value_name = "PORT", default_value_t = ROCE_UDP_PORT)]
    pub udp_port: u16,
    /// Spin on the socket instead of sleeping (lowest latency, burns a core).
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,
    /// Connect the QPs through RDMA CM (REQ/REP/RTU on QP 1; -p is the CM
    /// port) instead of with the exchanged QPNs; keys and results still go
    /// over TCP, so the peer is another `roce perf -R`, not perftest's -R.
    /// Each device must own UDP 4791 of its address.
    #[arg(short = 'R', long = "rdma-cm")]
    pub rdma_cm: bool,
    /// Write every packet this end sends and receives to a pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Run server and client in this process over real UDP on 127.0.0.1
    /// (or --bind), two devices on different UDP ports.
    #[arg(long)]
    pub loopback: bool,
    /// Print one JSON document instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Also check the data of latency tests (bandwidth tests always check
    /// it when both ends are `roce`).
    #[arg(long)]
    pub verify: bool,
    /// Seconds to wait for the server to answer, or for any progress (a
    /// completion, a packet, a word over TCP) once connected.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = parse_timeout)]
    pub timeout: u64,
    /// Print the device's counters at the end: packets, retries, NAKs,
    /// ICRC errors, drops by reason, datagrams the kernel refused.
    #[arg(long)]
    pub counters: bool,
    /// Send one datagram per message, without UDP GSO.
    #[arg(long = "no-gso")]
    pub no_gso: bool,
    /// Encrypt and authenticate every packet of the test's QPs
    /// (AES-128-GCM, keys agreed by X25519 in the exchange). Both ends must
    /// ask for it; only `roce` peers can.
    #[arg(long)]
    pub encrypt: bool,
    /// With --encrypt: a file whose bytes both ends mix into the keys (a
    /// pre-shared key), so that only a peer that knows it can take part.
    #[arg(long, value_name = "FILE", requires = "encrypt")]
    pub psk: Option<PathBuf>,
    /// Which address memory regions advertise to the peer: the buffer's
    /// own (pointer, as ibverbs), zero-based offsets, or a random base.
    #[arg(long = "mr-addressing", value_name = "MODE", default_value = "pointer", value_parser = parse_mr_addressing)]
    pub mr_addressing: MrAddressing,
    /// Drop packets that come from the peer's address but another UDP
    /// source port than its first packet's.
    #[arg(long = "pin-peer-port")]
    pub pin_peer_port: bool,
    /// Congestion control of the QPs' sends: none (line rate), dcqcn (the
    /// ConnectX firmware's parameters) or dcqcn:paper|nvidia|hpcc. The
    /// receiving end answers CE marks with CNPs either way.
    #[arg(long, value_name = "ALGORITHM", default_value = "none", value_parser = parse_cc)]
    pub cc: CcAlgorithm,
    /// Overrides one DCQCN parameter (repeatable), e.g. --cc-param
    /// rate_decrease_period=50us; an unknown name lists the known ones.
    #[arg(long = "cc-param", value_name = "KEY=VALUE", requires = "cc")]
    pub cc_param: Vec<String>,
    /// The line rate congestion control starts from and never exceeds,
    /// in Gb/s.
    #[arg(long = "line-rate", value_name = "GBPS", default_value_t = 100.0, value_parser = parse_line_rate)]
    pub line_rate: f64,
}

fn parse_cc(s: &str) -> std::result::Result<CcAlgorithm, String> {
    CcAlgorithm::parse(s).map_err(|e| e.to_string())
}

fn parse_line_rate(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.001..=1000.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a line rate in Gb/s between 0.001 and 1000")),
    }
}

/// `--mr-addressing`: pointer, zero or random.
pub fn parse_mr_addressing(s: &str) -> std::result::Result<MrAddressing, String> {
    match s {
        "pointer" => Ok(MrAddressing::Pointer),
        "zero" | "zero-based" => Ok(MrAddressing::ZeroBased),
        "random" => Ok(MrAddressing::Random),
        _ => Err(format!("{s:?} is not a region addressing: choose pointer, zero or random")),
    }
}

fn parse_num(s: &str, what: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse()
    };
    v.map_err(|_| format!("'{s}' is not a valid {what}"))
}

fn in_range(s: &str, what: &str, lo: u64, hi: u64) -> std::result::Result<u64, String> {
    let v = parse_num(s, what)?;
    if v < lo || v > hi {
        return Err(format!("{what} must be between {lo} and {hi}, not {v}"));
    }
    Ok(v)
}

/// Largest message: 1 GiB (the buffer holds two per QP).
const MAX_MSG: u64 = 1 << 30;
/// Most memory the buffers of a test may take (two messages per QP).
const MAX_MEMORY: u64 = 4 << 30;
/// The largest size `-a` runs (perftest's MAX_SIZE).
const MAX_ALL_SIZE_LOG2: u32 = 23;

fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let v = parse_num(s, "message size")?;
    if v == 0 {
        return Err("the message size must be at least 1 byte".into());
    }
    if v > MAX_MSG {
        return Err(format!("the message size must be at most {MAX_MSG} bytes (1 GiB)"));
    }
    Ok(v)
}

fn parse_iters(s: &str) -> std::result::Result<u64, String> {
    in_range(s, "number of iterations", 5, 100_000_000)
}

fn parse_qps(s: &str) -> std::result::Result<usize, String> {
    in_range(s, "number of QPs", 1, 16384).map(|v| v as usize)
}

fn parse_duration(s: &str) -> std::result::Result<u64, String> {
    in_range(s, "duration in seconds", 1, 86_400)
}

fn parse_timeout(s: &str) -> std::result::Result<u64, String> {
    in_range(s, "timeout in seconds", 1, 86_400)
}

fn parse_tx_depth(s: &str) -> std::result::Result<u32, String> {
    in_range(s, "TX depth", 1, 15_000).map(|v| v as u32)
}

fn parse_rx_depth(s: &str) -> std::result::Result<u32, String> {
    in_range(s, "RX depth", 1, 16_384).map(|v| v as u32)
}

fn parse_cq_mod(s: &str) -> std::result::Result<u32, String> {
    in_range(s, "CQ moderation", 1, 1024).map(|v| v as u32)
}

fn parse_outs(s: &str) -> std::result::Result<u8, String> {
    in_range(s, "number of outstanding reads", 1, MAX_OUT_READS.into()).map(|v| v as u8)
}

/// The engine's limit on outstanding READs/atomics (`MAX_RD_ATOMIC`).
pub const MAX_OUT_READS: u8 = 16;

fn parse_gid_index(s: &str) -> std::result::Result<u32, String> {
    match parse_num(s, "GID index")? {
        0 => Ok(0),
        v => {
            Err(format!("GID index {v} does not exist: the device has one GID, index 0 (the bound address)"))
        }
    }
}

/// Everything a test run needs, checked and with perftest's defaults and
/// dependencies applied.
#[derive(Debug, Clone)]
pub struct Conf {
    pub test: Test,
    pub atomic: AtomicType,
    pub sizes: Vec<u64>,
    /// `None` with `-D`.
    pub iters: Option<u64>,
    pub duration: Option<Duration>,
    pub qps: usize,
    pub tx_depth: u32,
    pub rx_depth: u32,
    pub cq_mod: u32,
    pub out_reads: u8,
    pub mtu: Option<PathMtu>,
    pub tcp_port: Option<u16>,
    pub duplex: bool,
    pub gbits: bool,
    pub no_peak: bool,
    pub bind: Option<IpAddr>,
    pub udp_port: u16,
    pub busy_poll: bool,
    pub rdma_cm: bool,
    pub pcap: Option<PathBuf>,
    pub json: bool,
    pub verify: bool,
    pub timeout: Duration,
    pub counters: bool,
    pub gso: bool,
    pub encrypt: Option<Encryption>,
    pub mr_addressing: MrAddressing,
    pub pin_peer_port: bool,
    /// `--cc` with the `--cc-param` overrides applied.
    pub cc: CcAlgorithm,
    pub line_rate_bps: u64,
}

impl Conf {
    /// The configuration of a test, or [`Error::BadArgs`] (or
    /// [`Error::Psk`]) for options that do not go together.
    pub fn new(test: Test, a: &PerfArgs) -> Result<Conf> {
        let mut conf = Conf::checked(test, a).map_err(Error::BadArgs)?;
        conf.encrypt = Encryption::from_flags(a.encrypt, a.psk.as_deref())?;
        Ok(conf)
    }

    /// Checks the options and applies perftest's defaults (without the
    /// encryption, which reads a file).
    fn checked(test: Test, a: &PerfArgs) -> std::result::Result<Conf, String> {
        let (bw, atomic) = (test.kind == Kind::Bw, test.verb == Verb::Atomic);
        if atomic && a.size.is_some_and(|s| s != 8) {
            return Err("atomic operations move 8 bytes: -s/--size must be 8 for atomic tests".into());
        }
        if !atomic && a.atomic_type.is_some() {
            return Err("-A/--atomic_type applies to atomic tests only".into());
        }
        if !bw && a.qps > 1 {
            return Err("latency tests use one QP: -q/--qp must be 1".into());
        }
        if !bw && a.bidirectional {
            return Err("-b/--bidirectional applies to bandwidth tests only".into());
        }
        if a.rx_depth.is_some() && test.verb != Verb::Send {
            return Err("-r/--rx-depth applies to SEND tests only".into());
        }
        if a.outs.is_some() && !matches!(test.verb, Verb::Read | Verb::Atomic) {
            return Err("-o/--outs applies to READ and atomic tests only".into());
        }
        if a.loopback && a.bind.is_some_and(|ip| !ip.is_loopback()) {
            return Err(format!("--loopback needs a loopback address, not {}", a.bind.unwrap()));
        }
        if a.bind.is_some_and(|ip| ip.is_unspecified() || ip.is_multicast()) {
            return Err("--bind needs the device's own unicast address (it is the GID)".into());
        }
        let size = a.size.unwrap_or(if atomic {
            8
        } else if bw {
            65536
        } else {
            2
        });
        let biggest = if a.all { 1u64 << MAX_ALL_SIZE_LOG2 } else { size };
        let memory = 2 * biggest.max(4096) * a.qps as u64;
        if memory > MAX_MEMORY {
            return Err(format!(
                "{} QPs of {biggest}-byte messages need {} MiB of buffers; the limit is {} MiB",
                a.qps,
                memory >> 20,
                MAX_MEMORY >> 20
            ));
        }
        let sizes =
            if a.all && !atomic { (1..=MAX_ALL_SIZE_LOG2).map(|i| 1u64 << i).collect() } else { vec![size] };
        let duration = a.duration.map(Duration::from_secs);
        let iters = if duration.is_some() {
            None
        } else {
            Some(a.iters.unwrap_or(if bw && test.verb == Verb::Write { 5000 } else { 1000 }))
        };
        let mut tx_depth = a.tx_depth.unwrap_or(if bw { 128 } else { 1 });
        let mut rx_depth = a.rx_depth.unwrap_or(512);
        if let Some(n) = iters {
            tx_depth = tx_depth.min(n as u32);
            rx_depth = rx_depth.min(n as u32);
        }
        let mut cq_mod = a.cq_mod.unwrap_or(100);
        // perftest: no moderation for large messages unless asked for.
        if size > 8192 && !a.all && a.cq_mod.is_none() {
            cq_mod = 1;
        }
        cq_mod = cq_mod.min(tx_depth);
        if !bw {
            cq_mod = 1;
        }
        // perftest skips the peak for long and timed runs (and SEND receivers).
        let no_peak = duration.is_some() || iters.is_some_and(|n| n > 20_000);
        if let Some(d) = &a.ib_dev {
            eprintln!("note: -d/--ib-dev {d} is ignored: the device is the UDP socket of --bind/--udp-port");
        }
        Ok(Conf {
            test,
            atomic: a.atomic_type.unwrap_or(AtomicType::FetchAndAdd),
            sizes,
            iters,
            duration,
            qps: a.qps,
            tx_depth,
            rx_depth,
            cq_mod,
            out_reads: a.outs.unwrap_or(MAX_OUT_READS),
            mtu: a.mtu,
            tcp_port: a.port,
            duplex: a.bidirectional,
            gbits: a.report_gbits,
            no_peak,
            bind: a.bind,
            udp_port: a.udp_port,
            busy_poll: a.busy_poll,
            rdma_cm: a.rdma_cm,
            pcap: a.pcap.clone(),
            json: a.json,
            verify: a.verify,
            timeout: Duration::from_secs(a.timeout),
            counters: a.counters,
            gso: !a.no_gso,
            encrypt: None,
            mr_addressing: a.mr_addressing,
            pin_peer_port: a.pin_peer_port,
            cc: {
                let mut cc = a.cc.clone();
                match &mut cc {
                    CcAlgorithm::Dcqcn(p) => {
                        for kv in &a.cc_param {
                            p.set_kv(kv).map_err(|e| format!("--cc-param {kv}: {e}"))?;
                        }
                    }
                    _ if !a.cc_param.is_empty() => {
                        return Err("--cc-param needs --cc dcqcn".into());
                    }
                    _ => {}
                }
                cc
            },
            line_rate_bps: (a.line_rate * 1e9) as u64,
        })
    }

    /// The MTU this end proposes.
    pub(super) fn mtu_for(&self, ip: IpAddr) -> PathMtu {
        self.mtu.unwrap_or(if ip.is_loopback() { PathMtu::Mtu4096 } else { PathMtu::Mtu1024 })
    }
}
