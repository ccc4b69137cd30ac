//! Addresses and devices: which roce device owns an IP address (there is
//! no subnet manager: a device's GID is its IP address, IPv4 ones mapped
//! as `::ffff:a.b.c.d`, RoCEv2's rule), `sockaddr` conversions, and the
//! path a RoCE route has (`cma_resolve_iboe_route` in the kernel: GIDs
//! from the IPs, P_Key 0xFFFF, hop limit 64).
//!
//! As rdma-core's librdmacm does, the library opens every device once and
//! keeps its context (and one shared PD per device) for the process.

use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::OnceLock;

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, AF_INET, AF_INET6};

use crate::abi::*;
use crate::verbs::vfn;

type R<T> = Result<T, c_int>;

/// An open device.
pub struct Device {
    /// `struct ibv_context *`, open for the process.
    pub ctx: usize,
    pub ip: IpAddr,
    /// The shared PD (`ibv_pd *`), made on first use.
    pub pd: OnceLock<usize>,
    pub max_responder_resources: u8,
    pub max_initiator_depth: u8,
}

impl Device {
    pub fn ctx(&self) -> *mut ibv_context {
        self.ctx as *mut ibv_context
    }

    /// The device's PD for ids given none (librdmacm's `cma_dev->pd`).
    pub fn pd(&self) -> R<*mut ibv_pd> {
        if let Some(p) = self.pd.get() {
            return Ok(*p as *mut ibv_pd);
        }
        // SAFETY: an open context of the library.
        let pd = unsafe { vfn!(ibv_alloc_pd)?(self.ctx()) };
        if pd.is_null() {
            return Err(crate::sys::errno());
        }
        // Two threads racing make two PDs; the loser's stays allocated
        // (as rdma-core's would until exit), never used.
        Ok(*self.pd.get_or_init(|| pd as usize) as *mut ibv_pd)
    }
}

static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();

/// The devices of roce's libibverbs, opened on first use.
pub fn devices() -> &'static [Device] {
    DEVICES.get_or_init(|| open_all().unwrap_or_default())
}

fn open_all() -> R<Vec<Device>> {
    let mut n: c_int = 0;
    // SAFETY: `n` is writable.
    let list = unsafe { vfn!(ibv_get_device_list)?(&mut n) };
    if list.is_null() {
        return Err(crate::sys::errno());
    }
    let mut out = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a device of the list.
        let ctx = unsafe { vfn!(ibv_open_device)?(dev) };
        if ctx.is_null() {
            continue;
        }
        let mut gid = ibv_gid::default();
        // SAFETY: an open context; `gid` is writable.
        if unsafe { vfn!(ibv_query_gid)?(ctx, 1, 0, &mut gid) } != 0 {
            continue;
        }
        let mut attr = [0u8; IBV_DEVICE_ATTR_SIZE];
        // SAFETY: a buffer of `struct ibv_device_attr`'s size.
        let ok = unsafe { vfn!(ibv_query_device)?(ctx, attr.as_mut_ptr().cast()) } == 0;
        let int_at = |o: usize| i32::from_ne_bytes(attr[o..o + 4].try_into().expect("4 bytes"));
        let clamp = |v: i32| u8::try_from(v.clamp(0, 255)).unwrap_or(0);
        let (resp, init) = if ok {
            (
                clamp(int_at(IBV_DEVICE_ATTR_MAX_QP_RD_ATOM)),
                clamp(int_at(IBV_DEVICE_ATTR_MAX_QP_INIT_RD_ATOM)),
            )
        } else {
            (0, 0)
        };
        out.push(Device {
            ctx: ctx as usize,
            ip: gid_to_ip(&gid.raw),
            pd: OnceLock::new(),
            max_responder_resources: resp,
            max_initiator_depth: init,
        });
    }
    // The device list may go; the contexts stay open.
    if let Ok(free) = vfn!(ibv_free_device_list) {
        // SAFETY: the list from `ibv_get_device_list`, freed once.
        unsafe { free(list) };
    }
    Ok(out)
}

/// The IP address of a GID (IPv4-mapped GIDs give IPv4).
pub fn gid_to_ip(g: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*g);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The GID of an IP address.
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// An address as RDMA CM's IP header carries it: 16 bytes, IPv4 in the
/// last 4 (the rest zero), with its version (4 or 6).
pub fn ip_to_wire(ip: IpAddr) -> (u8, [u8; 16]) {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            (4, b)
        }
        IpAddr::V6(v6) => (6, v6.octets()),
    }
}

pub fn wire_to_ip(family: u8, b: &[u8; 16]) -> IpAddr {
    if family == 4 {
        IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*b))
    }
}

/// The device owning `ip`.
pub fn device_by_ip(ip: IpAddr) -> Option<(usize, &'static Device)> {
    devices().iter().enumerate().find(|(_, d)| d.ip == ip)
}

/// The device a packet to `dst` leaves from, with the source address:
/// the device owning the source address the kernel's routing table picks
/// for `dst` (a connected UDP socket's local address), else the device
/// owning `dst` itself (loopback to one's own address), else the only
/// device of `dst`'s family. No device: `EADDRNOTAVAIL`, as the kernel's
/// `rdma_resolve_addr` without a device for the route.
pub fn route(dst: IpAddr) -> R<(usize, &'static Device)> {
    let unspec: IpAddr =
        if dst.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    let routed = UdpSocket::bind(SocketAddr::new(unspec, 0))
        .and_then(|s| s.connect(SocketAddr::new(dst, 9)).map(|_| s))
        .and_then(|s| s.local_addr())
        .ok()
        .and_then(|a| device_by_ip(a.ip()));
    if let Some(d) = routed.or_else(|| device_by_ip(dst)) {
        return Ok(d);
    }
    let mut same = devices().iter().enumerate().filter(|(_, d)| d.ip.is_ipv4() == dst.is_ipv4());
    match (same.next(), same.next()) {
        (Some(d), None) => Ok(d),
        _ => Err(libc::EADDRNOTAVAIL),
    }
}

/// A `sockaddr` the program passed: an IP socket address, or `EINVAL`
/// (`EAFNOSUPPORT` for AF_IB and other families: no AF_IB support).
///
/// # Safety
/// `sa` is NULL or points to a `sockaddr` of its family's size.
pub unsafe fn from_sockaddr(sa: *const sockaddr) -> R<SocketAddr> {
    // SAFETY: the caller's promise.
    let fam = c_int::from(unsafe { sa.as_ref() }.ok_or(libc::EINVAL)?.sa_family);
    match fam {
        AF_INET => {
            // SAFETY: an AF_INET address is a `sockaddr_in`.
            let s = unsafe { &*(sa as *const sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Ok(SocketAddr::new(ip.into(), u16::from_be(s.sin_port)))
        }
        AF_INET6 => {
            // SAFETY: an AF_INET6 address is a `sockaddr_in6`.
            let s = unsafe { &*(sa as *const sockaddr_in6) };
            Ok(SocketAddr::new(Ipv6Addr::from(s.sin6_addr.s6_addr).into(), u16::from_be(s.sin6_port)))
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// The `sockaddr_storage` of an address (and its length).
pub fn to_storage(a: SocketAddr) -> (sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid `sockaddr_storage`.
    let mut st: sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            // SAFETY: `sockaddr_storage` is larger than and aligned for `sockaddr_in`.
            let s = unsafe { &mut *(&mut st as *mut sockaddr_storage as *mut sockaddr_in) };
            s.sin_family = AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            std::mem::size_of::<sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for `sockaddr_in6`.
            let s = unsafe { &mut *(&mut st as *mut sockaddr_storage as *mut sockaddr_in6) };
            s.sin6_family = AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<sockaddr_in6>()
        }
    };
    (st, len as libc::socklen_t)
}

/// The address in a `sockaddr_storage` this library wrote (None: unset).
pub fn from_storage(st: &sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: a `sockaddr_storage` starts with a valid `sockaddr`, and
    // holds an address of the family it names.
    unsafe { from_sockaddr(st as *const sockaddr_storage as *const sockaddr) }.ok()
}

/// A path record for a RoCE route from `src` to `dst`: the kernel's
/// `cma_resolve_iboe_route` values (flow label from the UDP ports as
/// `cma_get_roce_udp_flow_label`; path MTU 1024, RoCE's on a
/// 1500-byte link; packet life time 18 as Debian 12's kernel).
pub fn path_record(src: SocketAddr, dst: SocketAddr, tos: u8) -> ibv_sa_path_rec {
    let fl = (u32::from(src.port()).wrapping_mul(31).wrapping_add(u32::from(dst.port()))) & 0xFFFFF;
    ibv_sa_path_rec {
        dgid: ibv_gid { raw: ip_to_gid(dst.ip()) },
        sgid: ibv_gid { raw: ip_to_gid(src.ip()) },
        dlid: 0xFFFF_u16.to_be(),
        slid: 0xFFFF_u16.to_be(),
        raw_traffic: 0,
        flow_label: fl.to_be(),
        hop_limit: 64,
        traffic_class: tos,
        reversible: 1,
        numb_path: 1,
        pkey: 0xFFFF_u16.to_be(),
        sl: 0,
        mtu_selector: 2,
        mtu: IBV_MTU_1024 as u8,
        rate_selector: 2,
        rate: 0,
        packet_life_time_selector: 2,
        packet_life_time: 18,
        preference: 0,
    }
}

/// An ephemeral RDMA CM port (the kernel's `cma_alloc_any_port` draws from
/// the local port range likewise).
pub fn ephemeral_port() -> u16 {
    let mut b = [0u8; 2];
    crate::sys::random(&mut b);
    32768 + (u16::from_ne_bytes(b) % 28232)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        for a in ["10.1.2.3:7174", "[fd00::7]:4420"] {
            let a: SocketAddr = a.parse().unwrap();
            let (st, len) = to_storage(a);
            assert!(len as usize <= std::mem::size_of::<sockaddr_storage>());
            assert_eq!(from_storage(&st), Some(a));
        }
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(gid_to_ip(&ip_to_gid(ip)), ip);
        let (fam, w) = ip_to_wire(ip);
        assert_eq!((fam, &w[..12]), (4, &[0u8; 12][..]));
        assert_eq!(wire_to_ip(fam, &w), ip);
        let p = path_record("10.0.0.1:59544".parse().unwrap(), "10.0.0.2:7174".parse().unwrap(), 0);
        // The flow label the notes observed for 59544 -> 7174.
        assert_eq!(u32::from_be(p.flow_label), 0xC466E);
        assert!((32768..61000).contains(&ephemeral_port()));
    }
}
