//! The command line of `roce ping`: ibv_rc_pingpong's options (and
//! ours), and the checks no peer can make right.

use std::net::IpAddr;
use std::path::PathBuf;

use roce::PathMtu;

use crate::oob::{parse_mtu, Error, Result, DEFAULT_PORT, ROCE_UDP_PORT};

/// Arguments of `roce ping`.
#[derive(Debug, Clone, clap::Args)]
pub struct PingArgs {
    /// Server to connect to; without it, wait for a client.
    #[arg(value_name = "SERVER", conflicts_with = "loopback")]
    pub server: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Size of each message in bytes.
    #[arg(short = 's', long, value_name = "BYTES", default_value_t = 4096, value_parser = parse_size)]
    pub size: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1000, value_parser = parse_iters)]
    pub iters: u64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, value_name = "BYTES", default_value = "1024", value_parser = parse_mtu)]
    pub mtu: PathMtu,
    /// Receives to keep posted.
    #[arg(short = 'r', long = "rx-depth", value_name = "N", default_value_t = 500, value_parser = parse_rx_depth)]
    pub rx_depth: u32,
    /// Local GID index; this device has one GID, 0 (the bound address).
    #[arg(short = 'g', long = "gid-idx", value_name = "INDEX", value_parser = parse_gid_index)]
    pub gid_idx: Option<u32>,
    /// Accepted for compatibility and ignored.
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ibdev: Option<String>,
    /// IP address of the device (its GID) [default: the address the TCP peer reaches].
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// UDP port of the device (0: any free port).
    #[arg(long = "udp-port", value_name = "PORT", default_value_t = ROCE_UDP_PORT)]
    pub udp_port: u16,
    /// Spin on the socket instead of sleeping.
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,
    /// Write every packet this end sends and receives to a pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Run server and client in this process over 127.0.0.1 (or --bind).
    #[arg(long)]
    pub loopback: bool,
    /// Seconds to wait for the server, for the peer's part of the
    /// exchange, or for any progress.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Unreliable Datagram QPs, like ibv_ud_pingpong (the message must fit
    /// in one packet: -s at most the path MTU).
    #[arg(long)]
    pub ud: bool,
    /// Validate received buffers as the stock tools' --chk does: the sender
    /// writes a marker at the start of every page of the message, the
    /// receiver checks it (a mismatch fails the run).
    #[arg(short = 'c', long)]
    pub chk: bool,
    /// Print the device's counters at the end.
    #[arg(long)]
    pub counters: bool,
    /// Send one datagram per message, without UDP GSO.
    #[arg(long = "no-gso")]
    pub no_gso: bool,
    /// Encrypt and authenticate the QP's packets (AES-128-GCM, keys agreed
    /// by X25519 over TCP before the addresses). RC only; both ends must
    /// ask for it, and only `roce` peers can.
    #[arg(long, conflicts_with = "ud")]
    pub encrypt: bool,
    /// With --encrypt: a file whose bytes both ends mix into the keys.
    #[arg(long, value_name = "FILE", requires = "encrypt")]
    pub psk: Option<PathBuf>,
    /// Connect through RDMA CM (REQ/REP/RTU on QP 1, as rping and
    /// perftest -R do) instead of the TCP exchange: -p is the RDMA CM
    /// port, and the device must own UDP --udp-port (4791) of its address.
    /// The server needs --bind.
    #[arg(short = 'R', long = "rdma-cm", conflicts_with_all = ["ud", "encrypt"])]
    pub rdma_cm: bool,
    /// With -R: ucmatose's order instead of the ping-pong: the server sends
    /// its -n messages first, then receives as many; the client receives
    /// first, then sends (so either end can be a stock `ucmatose -C N -S
    /// SIZE`).
    #[arg(long, requires = "rdma_cm")]
    pub burst: bool,
}

fn parse_size(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("the message size must be at least 1 byte".into()),
        Ok(v) if v <= 1 << 30 => Ok(v as u32),
        Ok(_) => Err("the message size must be at most 1 GiB".into()),
        Err(_) => Err(format!("'{s}' is not a valid message size")),
    }
}

fn parse_iters(s: &str) -> std::result::Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("'{s}' is not a valid number of iterations (at least 1)")),
    }
}

fn parse_rx_depth(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(v) if (1..=16_384).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a valid RX depth (1 to 16384)")),
    }
}

fn parse_gid_index(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Ok(0),
        Ok(v) => {
            Err(format!("GID index {v} does not exist: the device has one GID, index 0 (the bound address)"))
        }
        Err(_) => Err(format!("'{s}' is not a valid GID index")),
    }
}

/// What no peer can make right: checked by each end, and before a
/// `--loopback` run starts either, so that the error is this one whichever
/// end would meet it first.
pub(super) fn check_args(a: &PingArgs) -> Result<()> {
    if a.ud && a.size as usize > a.mtu.bytes() {
        return Err(Error::BadArgs(format!(
            "a UD message must fit in one packet: -s {} is larger than the path MTU ({})",
            a.size,
            a.mtu.bytes()
        )));
    }
    Ok(())
}
