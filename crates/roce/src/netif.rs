//! The network interface a device's address lives on, and its MTU: what
//! the kernel's RDMA CM reads from the netdev (`iboe_get_mtu(ndev->mtu)`)
//! to fill a connection's path MTU. Read from the files Linux publishes
//! (`/proc/net/if_inet6`, `/proc/net/route`, `/sys/class/net/*/mtu`), so no
//! netlink and no `unsafe`; anything unreadable or unmatched gives `None`
//! and the caller keeps its default.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The MTU of the interface that holds `ip`: the loopback's for a loopback
/// address, the interface listing it for IPv6, and for IPv4 the interface
/// of the most specific directly connected route (no gateway) covering it.
pub(crate) fn link_mtu(ip: IpAddr) -> Option<u32> {
    let iface = if ip.is_loopback() {
        "lo".to_string()
    } else {
        match ip {
            IpAddr::V4(v4) => iface_of_v4(&std::fs::read_to_string("/proc/net/route").ok()?, v4)?,
            IpAddr::V6(v6) => iface_of_v6(&std::fs::read_to_string("/proc/net/if_inet6").ok()?, v6)?,
        }
    };
    // An interface name never holds a path separator (the kernel refuses
    // '/' in one); refuse it anyway rather than read another file.
    if iface.is_empty() || iface.contains('/') || iface.starts_with('.') {
        return None;
    }
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu")).ok()?.trim().parse().ok()
}

/// `/proc/net/route`: a header line, then per route `Iface Destination
/// Gateway Flags RefCnt Use Metric Mask ...`, addresses as 8 hex digits in
/// the kernel's native byte order. The connected route with the
/// longest mask that covers `ip` names its interface.
fn iface_of_v4(table: &str, ip: Ipv4Addr) -> Option<String> {
    // The kernel prints each address's in-memory (network-order) word as
    // a native integer: its native bytes are the address's bytes.
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(|v| u32::from_be_bytes(v.to_ne_bytes()));
    let ip = u32::from(ip);
    let mut best: Option<(u32, &str)> = None;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [iface, dest, gateway, _flags, _refcnt, _use, _metric, mask, ..] = f[..] else { continue };
        let (Some(dest), Some(gateway), Some(mask)) = (word(dest), word(gateway), word(mask)) else {
            continue;
        };
        if gateway != 0 || mask == 0 || ip & mask != dest & mask {
            continue;
        }
        if best.is_none_or(|(m, _)| mask.count_ones() > m.count_ones()) {
            best = Some((mask, iface));
        }
    }
    best.map(|(_, i)| i.to_string())
}

/// `/proc/net/if_inet6`: per address `ADDR(32 hex) ifindex prefixlen scope
/// flags IFACE`.
fn iface_of_v6(table: &str, ip: Ipv6Addr) -> Option<String> {
    table.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [addr, _, _, _, _, iface] = f[..] else { return None };
        let addr = u128::from_str_radix(addr, 16).ok()?;
        (Ipv6Addr::from(addr) == ip).then(|| iface.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
tap0\t0000000A\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0
tap1\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
garbage line
";

    #[test]
    fn an_ipv4_address_finds_its_most_specific_connected_route() {
        assert_eq!(iface_of_v4(ROUTE, "192.0.2.7".parse().unwrap()).as_deref(), Some("eth0"));
        // 10.0.2.0/24 (tap1) is inside 10.0.0.0/8 (tap0) and wins.
        assert_eq!(iface_of_v4(ROUTE, "10.0.2.1".parse().unwrap()).as_deref(), Some("tap1"));
        assert_eq!(iface_of_v4(ROUTE, "10.9.9.9".parse().unwrap()).as_deref(), Some("tap0"));
        // Only the default route (through a gateway) covers it.
        assert_eq!(iface_of_v4(ROUTE, "198.51.100.1".parse().unwrap()), None);
        assert_eq!(iface_of_v4("", "192.0.2.7".parse().unwrap()), None);
    }

    #[test]
    fn an_ipv6_address_finds_the_interface_that_lists_it() {
        let t = "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n\
                 fd000000000000000000000000000002 04 40 00 82     eth1\n\
                 00000000000000000000000000000001 01 80 10 80       lo\n\
                 short line\n";
        assert_eq!(iface_of_v6(t, "fd00::2".parse().unwrap()).as_deref(), Some("eth1"));
        assert_eq!(iface_of_v6(t, "fd00::3".parse().unwrap()), None);
    }

    #[test]
    fn the_loopback_has_an_mtu() {
        // Every Linux network namespace has `lo`.
        let mtu = link_mtu("127.0.0.1".parse().unwrap()).expect("lo's MTU");
        assert!(mtu >= 68, "{mtu}");
        assert_eq!(link_mtu("0.0.0.0".parse().unwrap()), None);
    }
}
