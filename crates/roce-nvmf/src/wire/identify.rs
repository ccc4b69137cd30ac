//! Identify data structures (NVMe Base 2.0, 5.17.2) and the discovery log
//! page (NVMe-oF 1.1, 5.3), as the fields a fabrics host reads.

use super::fabrics::tsas_rdma;
use super::{field_str, le16, le32, le64, put16, put32, put64, put_str};

/// Every Identify data structure is 4,096 bytes.
pub const IDENTIFY_LEN: usize = 4096;

/// CNS values (Fig. 273).
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    pub const NS_DESCRIPTORS: u8 = 0x03;
    /// I/O command set specific Identify Controller (CSI 0: NVM).
    pub const CS_CONTROLLER: u8 = 0x06;
}

/// Controller types (Identify Controller CNTRLTYPE).
pub mod cntrltype {
    pub const IO: u8 = 1;
    pub const DISCOVERY: u8 = 2;
}

/// What the Identify Controller data structure says about a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerInfo {
    pub serial: String,
    pub model: String,
    pub firmware: String,
    pub cntlid: u16,
    /// VS (same encoding as the property).
    pub version: u32,
    pub cntrltype: u8,
    /// Maximum data transfer size as a power of two of 4 KiB pages (0 = none).
    pub mdts: u8,
    /// Keep Alive Support granularity, in 100 ms units (0 = unsupported).
    pub kas: u16,
    /// Asynchronous Event Request Limit, 0's based.
    pub aerl: u8,
    pub maxcmd: u16,
    /// Number of namespaces (the highest NSID).
    pub nn: u32,
    /// Optional NVM command support (bit 2 DSM, bit 3 Write Zeroes).
    pub oncs: u16,
    /// Volatile write cache present.
    pub vwc: bool,
    /// SGL support: bits 1:0 = 01b, bit 2 keyed data block, bit 20 offset.
    pub sgls: u32,
    pub subnqn: String,
    /// I/O command capsule size in 16-byte units (4 = SQE alone).
    pub ioccsz: u32,
    /// I/O response capsule size in 16-byte units.
    pub iorcsz: u32,
    /// In-capsule data offset in 16-byte units (Linux requires 0).
    pub icdoff: u16,
    /// Maximum SGL data block descriptors per command.
    pub msdbd: u8,
}

mod ctrl {
    pub const SN: usize = 4;
    pub const MN: usize = 24;
    pub const FR: usize = 64;
    pub const MDTS: usize = 77;
    pub const CNTLID: usize = 78;
    pub const VER: usize = 80;
    pub const CNTRLTYPE: usize = 111;
    pub const AERL: usize = 259;
    pub const KAS: usize = 320;
    pub const SQES: usize = 512;
    pub const CQES: usize = 513;
    pub const MAXCMD: usize = 514;
    pub const NN: usize = 516;
    pub const ONCS: usize = 520;
    pub const VWC: usize = 525;
    pub const SGLS: usize = 536;
    pub const SUBNQN: usize = 768;
    pub const IOCCSZ: usize = 1792;
    pub const IORCSZ: usize = 1796;
    pub const ICDOFF: usize = 1800;
    pub const MSDBD: usize = 1803;
}

impl ControllerInfo {
    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_LEN];
        put_str(&mut b[ctrl::SN..ctrl::SN + 20], &self.serial, b' ');
        put_str(&mut b[ctrl::MN..ctrl::MN + 40], &self.model, b' ');
        put_str(&mut b[ctrl::FR..ctrl::FR + 8], &self.firmware, b' ');
        b[ctrl::MDTS] = self.mdts;
        put16(&mut b, ctrl::CNTLID, self.cntlid);
        put32(&mut b, ctrl::VER, self.version);
        b[ctrl::CNTRLTYPE] = self.cntrltype;
        b[ctrl::AERL] = self.aerl;
        put16(&mut b, ctrl::KAS, self.kas);
        // Entry sizes as 4-bit log2 (required, maximum): 64-byte SQEs and
        // 16-byte CQEs, the only sizes NVMe-oF uses.
        b[ctrl::SQES] = 0x66;
        b[ctrl::CQES] = 0x44;
        put16(&mut b, ctrl::MAXCMD, self.maxcmd);
        put32(&mut b, ctrl::NN, self.nn);
        put16(&mut b, ctrl::ONCS, self.oncs);
        b[ctrl::VWC] = u8::from(self.vwc);
        put32(&mut b, ctrl::SGLS, self.sgls);
        put_str(&mut b[ctrl::SUBNQN..ctrl::SUBNQN + 256], &self.subnqn, 0);
        put32(&mut b, ctrl::IOCCSZ, self.ioccsz);
        put32(&mut b, ctrl::IORCSZ, self.iorcsz);
        put16(&mut b, ctrl::ICDOFF, self.icdoff);
        b[ctrl::MSDBD] = self.msdbd;
        b
    }

    /// `None` if `b` is shorter than 4,096 bytes.
    pub fn parse(b: &[u8]) -> Option<ControllerInfo> {
        if b.len() < IDENTIFY_LEN {
            return None;
        }
        let s = |r: std::ops::Range<usize>| field_str(&b[r]).unwrap_or("").trim_end().to_string();
        Some(ControllerInfo {
            serial: s(ctrl::SN..ctrl::SN + 20),
            model: s(ctrl::MN..ctrl::MN + 40),
            firmware: s(ctrl::FR..ctrl::FR + 8),
            cntlid: le16(b, ctrl::CNTLID),
            version: le32(b, ctrl::VER),
            cntrltype: b[ctrl::CNTRLTYPE],
            mdts: b[ctrl::MDTS],
            kas: le16(b, ctrl::KAS),
            aerl: b[ctrl::AERL],
            maxcmd: le16(b, ctrl::MAXCMD),
            nn: le32(b, ctrl::NN),
            oncs: le16(b, ctrl::ONCS),
            vwc: b[ctrl::VWC] & 1 != 0,
            sgls: le32(b, ctrl::SGLS),
            subnqn: s(ctrl::SUBNQN..ctrl::SUBNQN + 256),
            ioccsz: le32(b, ctrl::IOCCSZ),
            iorcsz: le32(b, ctrl::IORCSZ),
            icdoff: le16(b, ctrl::ICDOFF),
            msdbd: b[ctrl::MSDBD],
        })
    }
}

/// What the Identify Namespace data structure says (one LBA format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Size in logical blocks (NSZE = NCAP = NUSE: thin provisioning off).
    pub blocks: u64,
    /// log2 of the block size (9 = 512 B, 12 = 4 KiB).
    pub lbads: u8,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
}

mod ns {
    pub const NSZE: usize = 0;
    pub const NCAP: usize = 8;
    pub const NUSE: usize = 16;
    pub const NLBAF: usize = 25;
    pub const FLBAS: usize = 26;
    pub const NGUID: usize = 104;
    pub const EUI64: usize = 120;
    pub const LBAF0: usize = 128;
}

impl NamespaceInfo {
    pub fn block_size(&self) -> u64 {
        1u64 << self.lbads
    }

    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_LEN];
        put64(&mut b, ns::NSZE, self.blocks);
        put64(&mut b, ns::NCAP, self.blocks);
        put64(&mut b, ns::NUSE, self.blocks);
        b[ns::NLBAF] = 0; // one format, 0's based
        b[ns::FLBAS] = 0;
        b[ns::NGUID..ns::NGUID + 16].copy_from_slice(&self.nguid);
        b[ns::EUI64..ns::EUI64 + 8].copy_from_slice(&self.eui64);
        // LBA format 0: metadata size 0 (bytes 0-1), LBADS (byte 2),
        // relative performance 0 (best).
        b[ns::LBAF0 + 2] = self.lbads;
        b
    }

    /// `None` if short, or the formatted LBA size is not a sane power of two.
    pub fn parse(b: &[u8]) -> Option<NamespaceInfo> {
        if b.len() < IDENTIFY_LEN {
            return None;
        }
        let f = usize::from(b[ns::FLBAS] & 0xf);
        let lbads = b[ns::LBAF0 + 4 * f + 2];
        if !(9..=16).contains(&lbads) {
            return None;
        }
        Some(NamespaceInfo {
            blocks: le64(b, ns::NSZE),
            lbads,
            nguid: b[ns::NGUID..ns::NGUID + 16].try_into().expect("16"),
            eui64: b[ns::EUI64..ns::EUI64 + 8].try_into().expect("8"),
        })
    }
}

/// The active namespace list (CNS 02h): NSIDs above `after`, ascending,
/// at most 1,024.
pub fn active_ns_list(nsids: impl IntoIterator<Item = u32>, after: u32) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    for (i, id) in nsids.into_iter().filter(|&n| n > after).take(IDENTIFY_LEN / 4).enumerate() {
        put32(&mut b, 4 * i, id);
    }
    b
}

/// The namespace identification descriptor list (CNS 03h, Fig. 277): the
/// NGUID (type 2) and a UUID (type 3).
pub fn ns_descriptors(nguid: &[u8; 16], uuid: &[u8; 16]) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    let mut at = 0;
    for (nidt, id) in [(2u8, nguid), (3u8, uuid)] {
        b[at] = nidt;
        b[at + 1] = 16;
        b[at + 4..at + 20].copy_from_slice(id);
        at += 20;
    }
    b
}

/// One entry of the discovery log page (NVMe-oF 1.1, Fig. 38).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// 1 = RDMA.
    pub trtype: u8,
    /// 1 = IPv4, 2 = IPv6.
    pub adrfam: u8,
    /// 1 = referral to a discovery service, 2 = NVM subsystem.
    pub subtype: u8,
    pub portid: u16,
    /// 0xFFFF: dynamic controller model.
    pub cntlid: u16,
    /// Admin max SQ size.
    pub asqsz: u16,
    pub trsvcid: String,
    pub subnqn: String,
    pub traddr: String,
}

/// The discovery log page's header (1,024 bytes) and entries (1,024 each).
pub const DISCOVERY_HEADER_LEN: usize = 1024;
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

/// The whole discovery log page for `entries`, generation `genctr`.
pub fn discovery_log(genctr: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut b = vec![0u8; DISCOVERY_HEADER_LEN + DISCOVERY_ENTRY_LEN * entries.len()];
    put64(&mut b, 0, genctr);
    put64(&mut b, 8, entries.len() as u64);
    put16(&mut b, 16, 0); // recfmt
    for (i, e) in entries.iter().enumerate() {
        let d = &mut b[DISCOVERY_HEADER_LEN + i * DISCOVERY_ENTRY_LEN..][..DISCOVERY_ENTRY_LEN];
        d[0] = e.trtype;
        d[1] = e.adrfam;
        d[2] = e.subtype;
        d[3] = 0; // TREQ: secure channel not specified
        put16(d, 4, e.portid);
        put16(d, 6, e.cntlid);
        put16(d, 8, e.asqsz);
        put_str(&mut d[32..64], &e.trsvcid, b' ');
        put_str(&mut d[256..512], &e.subnqn, 0);
        put_str(&mut d[512..768], &e.traddr, b' ');
        // TSAS for RDMA (Fig. 39).
        d[768] = tsas_rdma::QPTYPE_CONNECTED;
        d[769] = tsas_rdma::PRTYPE_NOT_SPECIFIED;
        d[770] = tsas_rdma::CMS_RDMA_CM;
    }
    b
}

/// The entries of a discovery log page (as many as `numrec` says and the
/// bytes hold), with its generation counter.
pub fn parse_discovery_log(b: &[u8]) -> Option<(u64, u64, Vec<DiscoveryEntry>)> {
    if b.len() < DISCOVERY_HEADER_LEN {
        return None;
    }
    let genctr = le64(b, 0);
    let numrec = le64(b, 8);
    let held = (b.len() - DISCOVERY_HEADER_LEN) / DISCOVERY_ENTRY_LEN;
    let n = usize::try_from(numrec).unwrap_or(usize::MAX).min(held);
    let s = |f: &[u8]| field_str(f).unwrap_or("").trim_end().to_string();
    let entries = (0..n)
        .map(|i| {
            let d = &b[DISCOVERY_HEADER_LEN + i * DISCOVERY_ENTRY_LEN..][..DISCOVERY_ENTRY_LEN];
            DiscoveryEntry {
                trtype: d[0],
                adrfam: d[1],
                subtype: d[2],
                portid: le16(d, 4),
                cntlid: le16(d, 6),
                asqsz: le16(d, 8),
                trsvcid: s(&d[32..64]),
                subnqn: s(&d[256..512]),
                traddr: s(&d[512..768]),
            }
        })
        .collect();
    Some((genctr, numrec, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_controller_round_trips_at_the_offsets_linux_reads() {
        let c = ControllerInfo {
            serial: "roce0001".into(),
            model: "roce".into(),
            firmware: "0.1.0".into(),
            cntlid: 3,
            version: 0x10300,
            cntrltype: cntrltype::IO,
            mdts: 5,
            kas: 50,
            aerl: 3,
            maxcmd: 128,
            nn: 2,
            oncs: 0x0c,
            vwc: true,
            sgls: 0x5,
            subnqn: "nqn.2026-11.io.roce:disk".into(),
            ioccsz: 4,
            iorcsz: 1,
            icdoff: 0,
            msdbd: 1,
        };
        let b = c.emit();
        assert_eq!(b[536] & 0b111, 0b101, "SGLS: keyed data blocks, 01b");
        assert_eq!(&b[768..792], b"nqn.2026-11.io.roce:disk");
        assert_eq!(u16::from_le_bytes([b[78], b[79]]), 3);
        assert_eq!(&b[4..12], b"roce0001");
        assert_eq!(b[12], b' ');
        assert_eq!(ControllerInfo::parse(&b), Some(c));
    }

    #[test]
    fn namespace_and_discovery_round_trip() {
        let n = NamespaceInfo { blocks: 16384, lbads: 12, nguid: [1; 16], eui64: [2; 8] };
        assert_eq!(NamespaceInfo::parse(&n.emit()), Some(n.clone()));
        let e = DiscoveryEntry {
            trtype: 1,
            adrfam: 1,
            subtype: 2,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            trsvcid: "4420".into(),
            subnqn: "nqn.2026-11.io.roce:disk".into(),
            traddr: "10.47.0.3".into(),
        };
        let log = discovery_log(5, std::slice::from_ref(&e));
        assert_eq!(log.len(), 2048);
        assert_eq!(parse_discovery_log(&log), Some((5, 1, vec![e])));
        // A host that read only the header learns the count.
        assert_eq!(parse_discovery_log(&log[..1024]).map(|(_, n, v)| (n, v.len())), Some((1, 0)));
        let l = active_ns_list([1, 2, 5], 1);
        assert_eq!(&l[..12], &[2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);
    }
}
