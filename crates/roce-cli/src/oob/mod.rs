//! The out-of-band channel every tool shares: the TCP side channel over
//! which `roce perf` (perftest's exchange) and `roce ping`
//! (ibv_rc_pingpong's) tell each other where their QPs are, before and
//! around the RDMA traffic.
//!
//! * [`error`]: the typed error of both tools;
//! * [`tcp`]: the dual-stack listener, connect with retries until a
//!   deadline, reads and writes bounded by a deadline;
//! * [`encryption`]: `--encrypt`/`--psk` and the X25519 key agreement;
//! * here: the ports, GIDs as the 16 bytes the messages carry, `-m`.
//!
//! Each tool keeps its own message formats (`perf/exchange.rs`,
//! `ping/exchange.rs`); neither imports from the other.

use std::net::{IpAddr, Ipv6Addr};

use roce::PathMtu;

pub mod encryption;
pub mod error;
pub mod tcp;
#[cfg(test)]
pub mod test_support;

pub use encryption::Encryption;
pub use error::{Context, Error, Result, Tool};

/// The default TCP port of the exchange: perftest's and ibv_rc_pingpong's.
pub const DEFAULT_PORT: u16 = 18515;
/// The RoCEv2 UDP port (IBTA Annex A17.2.3).
pub const ROCE_UDP_PORT: u16 = 4791;

/// The 16 bytes of a RoCEv2 GID: IPv4 addresses are IPv4-mapped
/// (IBTA Annex A17.8, RFC 4291 §2.5.5.2).
pub fn gid_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address a GID denotes.
pub fn gid_ip(gid: [u8; 16]) -> IpAddr {
    Ipv6Addr::from(gid).to_canonical()
}

/// `-m`: a path MTU, 256 .. 4096 and a power of two (decimal, or hex
/// with `0x`).
pub fn parse_mtu(s: &str) -> std::result::Result<PathMtu, String> {
    let t = s.trim();
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        t.parse()
    };
    let v = v.map_err(|_| format!("'{s}' is not a valid MTU"))?;
    usize::try_from(v)
        .ok()
        .and_then(PathMtu::from_bytes)
        .ok_or_else(|| format!("MTU {v} is not a path MTU: use 256, 512, 1024, 2048 or 4096"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_and_mtus() {
        let v4: IpAddr = "10.47.0.2".parse().unwrap();
        assert_eq!(gid_bytes(v4)[10..], [0xff, 0xff, 10, 47, 0, 2]);
        assert_eq!(gid_ip(gid_bytes(v4)), v4);
        assert_eq!(parse_mtu("0x400"), Ok(PathMtu::Mtu1024));
        assert_eq!(parse_mtu("4096"), Ok(PathMtu::Mtu4096));
        assert!(parse_mtu("1000").unwrap_err().contains("not a path MTU"));
        assert!(parse_mtu("x").unwrap_err().contains("not a valid MTU"));
    }
}
