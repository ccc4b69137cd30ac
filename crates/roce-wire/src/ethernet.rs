//! Ethernet II header (14 bytes) with an optional IEEE 802.1Q tag (4 bytes:
//! TPID 0x8100, PCP(3) DEI(1) VID(12)). The PCP carries the priority that PFC
//! pauses per class.

use crate::error::{Header, Result, WireError};
use crate::field::*;

pub const HEADER_LEN: usize = 14;
pub const VLAN_TAG_LEN: usize = 4;

pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
    /// RoCEv1: the GRH follows the Ethernet header directly.
    pub const ROCE_V1: u16 = 0x8915;
}

mod field {
    pub const DST: usize = 0;
    pub const SRC: usize = 6;
    pub const ETHERTYPE: usize = 12;
}

/// A MAC address.
pub type Mac = [u8; 6];

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: &Mac) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Zero-copy view of an Ethernet header, with any 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Checks that the header, and the VLAN tag if the outer EtherType says
    /// there is one, fit in the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let have = buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(WireError::Truncated { header: Header::Ethernet, need: HEADER_LEN, have });
        }
        let f = EthernetFrame { buffer };
        if f.outer_ethertype() == ethertype::VLAN && have < HEADER_LEN + VLAN_TAG_LEN {
            return Err(WireError::Truncated { header: Header::Vlan, need: HEADER_LEN + VLAN_TAG_LEN, have });
        }
        Ok(f)
    }

    pub fn dst(&self) -> Mac {
        self.buffer.as_ref()[field::DST..field::DST + 6].try_into().unwrap()
    }
    pub fn src(&self) -> Mac {
        self.buffer.as_ref()[field::SRC..field::SRC + 6].try_into().unwrap()
    }
    fn outer_ethertype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ETHERTYPE)
    }
    /// The 802.1Q TCI (PCP, DEI, VID) if the frame is tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        (self.outer_ethertype() == ethertype::VLAN)
            .then(|| get_u16(self.buffer.as_ref(), field::ETHERTYPE + 2))
    }
    /// The EtherType of the payload (after any VLAN tag).
    pub fn ethertype(&self) -> u16 {
        if self.vlan_tci().is_some() {
            get_u16(self.buffer.as_ref(), field::ETHERTYPE + VLAN_TAG_LEN)
        } else {
            self.outer_ethertype()
        }
    }
    pub fn header_len(&self) -> usize {
        HEADER_LEN + if self.vlan_tci().is_some() { VLAN_TAG_LEN } else { 0 }
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// An 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point (3 bits): the traffic class PFC acts on.
    pub pcp: u8,
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    #[inline]
    pub fn from_tci(tci: u16) -> VlanTag {
        VlanTag { pcp: (tci >> 13) as u8, dei: tci & 0x1000 != 0, vid: tci & 0x0fff }
    }
    pub fn tci(&self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }
}

/// Parsed Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EthernetRepr {
    pub dst: Mac,
    pub src: Mac,
    pub vlan: Option<VlanTag>,
    pub ethertype: u16,
}

impl EthernetRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Result<EthernetRepr> {
        Ok(EthernetRepr {
            dst: f.dst(),
            src: f.src(),
            vlan: f.vlan_tci().map(VlanTag::from_tci),
            ethertype: f.ethertype(),
        })
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN + if self.vlan.is_some() { VLAN_TAG_LEN } else { 0 }
    }

    /// Writes the header into the start of `buf`, which must hold `header_len()` bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[field::DST..field::DST + 6].copy_from_slice(&self.dst);
        buf[field::SRC..field::SRC + 6].copy_from_slice(&self.src);
        match self.vlan {
            Some(tag) => {
                set_u16(buf, field::ETHERTYPE, ethertype::VLAN);
                set_u16(buf, field::ETHERTYPE + 2, tag.tci());
                set_u16(buf, field::ETHERTYPE + 4, self.ethertype);
            }
            None => set_u16(buf, field::ETHERTYPE, self.ethertype),
        }
    }
}
