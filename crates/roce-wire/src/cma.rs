//! The RDMA CM's IP addressing layer on top of the IB CM (IBTA Annex A11
//! as Linux `drivers/infiniband/core/cma.c` implements it):
//!
//! * the service ID of an IP port: `port_space << 16 | port`
//!   (`rdma_get_service_id`), port spaces TCP 0x0106 (RC/UC connections)
//!   and UDP 0x0111 (UD, resolved with SIDR);
//! * the 36-byte header at the start of a REQ's or SIDR_REQ's private
//!   data (`struct cma_hdr`):
//!
//! ```text
//!  0 cma_version(8) = 0
//!  1 ip_version(4) = 4 or 6, reserved(4)
//!  2 source port(16)
//!  4 source IP (16 bytes; IPv4 in bytes 12..16, the rest zero)
//! 20 destination IP (same)
//! ```
//!
//! The receiver takes its local port from the service ID and the remote
//! port from the header (`cma_save_ip_info`); it rejects `cma_version != 0`.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Header, Result, WireError};
use crate::field::accessors;
use crate::view::header_view;

/// Bytes of the header.
pub const HEADER_LEN: usize = 36;

/// RDMA CM port space of RC/UC connections (`RDMA_PS_TCP`).
pub const PS_TCP: u16 = 0x0106;
/// RDMA CM port space of UD services (`RDMA_PS_UDP`).
pub const PS_UDP: u16 = 0x0111;
/// `RDMA_PS_IB`: native IB addressing (not used over IP).
pub const PS_IB: u16 = 0x013f;
/// `RDMA_PS_IPOIB`.
pub const PS_IPOIB: u16 = 0x0002;

/// Q_Key of RDMA CM's UD QPs (`RDMA_UDP_QKEY`).
pub const UDP_QKEY: u32 = 0x0123_4567;

mod field {
    pub const VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const PORT: usize = 2;
    pub const SRC: usize = 4;
    pub const DST: usize = 20;
}

/// The service ID of `port` in port space `ps` (`rdma_get_service_id`).
pub const fn service_id(ps: u16, port: u16) -> u64 {
    (ps as u64) << 16 | port as u64
}

/// The port space and port of an RDMA CM service ID (one of TCP, UDP,
/// IPoIB, IB), or `None` for another service ID.
pub fn split_service_id(sid: u64) -> Option<(PortSpaceName, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    let ps = match (sid >> 16) as u16 {
        PS_TCP => PortSpaceName::Tcp,
        PS_UDP => PortSpaceName::Udp,
        PS_IB => PortSpaceName::Ib,
        PS_IPOIB => PortSpaceName::Ipoib,
        _ => return None,
    };
    Some((ps, sid as u16))
}

/// An RDMA CM port space, by name (for display).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpaceName {
    Tcp,
    Udp,
    Ib,
    Ipoib,
}

impl fmt::Display for PortSpaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortSpaceName::Tcp => "TCP",
            PortSpaceName::Udp => "UDP",
            PortSpaceName::Ib => "IB",
            PortSpaceName::Ipoib => "IPoIB",
        })
    }
}

header_view!(
    /// Zero-copy view of the RDMA CM IP header.
    CmaHdr,
    HEADER_LEN,
    Header::CmaHdr
);

accessors!(CmaHdr {
    cma_version, set_cma_version: u8(field::VERSION);
    ip_version, set_ip_version: bits(field::IP_VERSION, 0, 4);
    port, set_port: u16(field::PORT);
    src_raw, set_src_raw: gid(field::SRC);
    dst_raw, set_dst_raw: gid(field::DST);
});

fn decode_ip(raw: [u8; 16], version: u8) -> IpAddr {
    if version == 4 {
        Ipv4Addr::new(raw[12], raw[13], raw[14], raw[15]).into()
    } else {
        Ipv6Addr::from(raw).into()
    }
}

fn encode_ip(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Parsed RDMA CM IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdrRepr {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    /// The sender's RDMA CM port (its `rdma_get_src_port`).
    pub src_port: u16,
}

impl CmaHdrRepr {
    /// Parses the header at the start of `private_data`. Errors: short,
    /// `cma_version` not 0, IP version not 4 or 6 (the kernel rejects
    /// such REQs).
    pub fn parse(private_data: &[u8]) -> Result<CmaHdrRepr> {
        let h = CmaHdr::new_checked(private_data)?;
        if h.cma_version() != 0 {
            return Err(WireError::Mad("RDMA CM header version is not 0"));
        }
        let v = h.ip_version();
        if v != 4 && v != 6 {
            return Err(WireError::Mad("RDMA CM header IP version is not 4 or 6"));
        }
        Ok(CmaHdrRepr {
            src_ip: decode_ip(h.src_raw(), v),
            dst_ip: decode_ip(h.dst_raw(), v),
            src_port: h.port(),
        })
    }

    /// Writes the header (36 bytes) at the start of `buf`. Errors: short
    /// buffer, source and destination of different families.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.src_ip.is_ipv4() != self.dst_ip.is_ipv4() {
            return Err(WireError::MixedIpFamilies { src: self.src_ip, dst: self.dst_ip });
        }
        let mut h =
            CmaHdr::new_checked(buf).map_err(|_| WireError::BufferTooSmall { need: HEADER_LEN, have: 0 })?;
        h.set_cma_version(0);
        h.buffer[field::IP_VERSION] = 0;
        h.set_ip_version(if self.src_ip.is_ipv4() { 4 } else { 6 });
        h.set_port(self.src_port);
        h.set_src_raw(encode_ip(self.src_ip));
        h.set_dst_raw(encode_ip(self.dst_ip));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rping_service_id() {
        // OBSERVED: rping on 7174 -> 0x1061C06; NVMe/RDMA 4420 -> 0x01061144.
        assert_eq!(service_id(PS_TCP, 7174), 0x0106_1c06);
        assert_eq!(service_id(PS_TCP, 4420), 0x0106_1144);
        assert_eq!(split_service_id(0x0111_1c06), Some((PortSpaceName::Udp, 7174)));
        assert_eq!(split_service_id(0x1_0106_1c06), None);
    }

    #[test]
    fn ipv4_goes_in_the_last_four_bytes() {
        let h = CmaHdrRepr {
            src_ip: "10.47.0.3".parse().unwrap(),
            dst_ip: "10.47.0.1".parse().unwrap(),
            src_port: 59544,
        };
        let mut b = [0xaau8; HEADER_LEN];
        h.emit(&mut b).unwrap();
        assert_eq!(&b[..4], &[0x00, 0x40, 0xe8, 0x98]);
        assert_eq!(&b[4..20], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 47, 0, 3]);
        assert_eq!(&b[32..36], &[10, 47, 0, 1]);
        assert_eq!(CmaHdrRepr::parse(&b).unwrap(), h);
        b[0] = 1;
        assert!(CmaHdrRepr::parse(&b).is_err());
        assert!(CmaHdrRepr::parse(&b[..35]).is_err());
    }

    proptest! {
        #[test]
        fn round_trips(v6 in any::<bool>(), a in any::<[u8; 16]>(), c in any::<[u8; 16]>(), port in any::<u16>()) {
            let (src_ip, dst_ip): (IpAddr, IpAddr) = if v6 {
                (Ipv6Addr::from(a).into(), Ipv6Addr::from(c).into())
            } else {
                (Ipv4Addr::new(a[0], a[1], a[2], a[3]).into(), Ipv4Addr::new(c[0], c[1], c[2], c[3]).into())
            };
            let h = CmaHdrRepr { src_ip, dst_ip, src_port: port };
            let mut b = [0u8; HEADER_LEN];
            h.emit(&mut b).unwrap();
            prop_assert_eq!(CmaHdrRepr::parse(&b).unwrap(), h);
        }
    }
}
