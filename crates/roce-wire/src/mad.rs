//! Management datagrams (IBTA vol. 1 §13.4): the 256-byte MAD a UD SEND to
//! QP 1 (the GSI) carries, and its 24-byte common header.
//!
//! ```text
//!  0 BaseVersion(8) MgmtClass(8) ClassVersion(8) Method(8)
//!  4 Status(16) ClassSpecific(16)
//!  8 TransactionID(64)
//! 16 AttributeID(16) Reserved(16)
//! 20 AttributeModifier(32)
//! 24 class data (232 bytes; for the CM, one message of `crate::cm`)
//! ```
//!
//! The communication manager's MADs (class 0x07, class version 2, method
//! Send 0x03) go to QP 1 with P_Key 0xFFFF and the GSI Q_Key 0x80010000
//! (IBTA vol. 1 §13.5.1; Linux `rxe_recv.c` `check_keys` drops others).

use crate::error::{Header, Result, WireError};
use crate::field::*;
use crate::view::header_view;

/// Bytes of a MAD: every GSI datagram carries exactly one (UDP length 288).
pub const MAD_LEN: usize = 256;
/// Bytes of the common MAD header.
pub const HEADER_LEN: usize = 24;
/// Bytes of class data after the header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// `BaseVersion` of every MAD (IB_MGMT_BASE_VERSION).
pub const BASE_VERSION: u8 = 1;
/// Management class of the communication manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version Linux sends and accepts (`IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;
/// Method `Send`: the only one CM messages use (Linux `validate_mad`).
pub const METHOD_SEND: u8 = 0x03;
/// Q_Key of the GSI (QP 1): IBTA vol. 1 §13.5.1, Linux `IB_QP1_QKEY`.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The GSI is QP 1.
pub const GSI_QPN: u32 = 1;
/// The default (full-member) P_Key every GSI MAD carries on RoCE.
pub const DEFAULT_PKEY: u16 = 0xffff;

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const RESERVED: usize = 18;
    pub const ATTR_MOD: usize = 20;
}

header_view!(
    /// Zero-copy view of a MAD (`new_checked` wants the header; the CM
    /// parser wants all 256 bytes).
    Mad,
    HEADER_LEN,
    Header::Mad
);

impl<T: AsRef<[u8]>> Mad<T> {
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }
    pub fn status(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::STATUS)
    }
    pub fn class_specific(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CLASS_SPECIFIC)
    }
    pub fn transaction_id(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::TID)
    }
    pub fn attr_id(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ATTR_ID)
    }
    pub fn attr_mod(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ATTR_MOD)
    }
    /// The class data after the header (up to 232 bytes).
    pub fn data(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..b.len().min(MAD_LEN)]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    pub fn set_base_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = v;
    }
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.buffer.as_mut()[field::MGMT_CLASS] = v;
    }
    pub fn set_class_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = v;
    }
    pub fn set_method(&mut self, v: u8) {
        self.buffer.as_mut()[field::METHOD] = v;
    }
    pub fn set_status(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::STATUS, v);
    }
    pub fn set_class_specific(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CLASS_SPECIFIC, v);
    }
    pub fn set_transaction_id(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::TID, v);
    }
    pub fn set_attr_id(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::ATTR_ID, v);
        set_u16(self.buffer.as_mut(), field::RESERVED, 0);
    }
    pub fn set_attr_mod(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ATTR_MOD, v);
    }
    /// The class data after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let end = b.len().min(MAD_LEN);
        &mut b[HEADER_LEN..end]
    }
}

/// Parsed MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MadRepr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub transaction_id: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
}

impl MadRepr {
    /// A CM MAD header (class 0x07 version 2, method Send) for `attr_id`.
    pub fn cm(attr_id: u16, transaction_id: u64) -> MadRepr {
        MadRepr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attr_id,
            attr_mod: 0,
        }
    }

    pub fn parse<T: AsRef<[u8]>>(h: &Mad<T>) -> Result<MadRepr> {
        if h.base_version() != BASE_VERSION {
            return Err(WireError::Mad("base version is not 1"));
        }
        Ok(MadRepr {
            base_version: h.base_version(),
            mgmt_class: h.mgmt_class(),
            class_version: h.class_version(),
            method: h.method(),
            status: h.status(),
            class_specific: h.class_specific(),
            transaction_id: h.transaction_id(),
            attr_id: h.attr_id(),
            attr_mod: h.attr_mod(),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Mad<T>) {
        h.set_base_version(self.base_version);
        h.set_mgmt_class(self.mgmt_class);
        h.set_class_version(self.class_version);
        h.set_method(self.method);
        h.set_status(self.status);
        h.set_class_specific(self.class_specific);
        h.set_transaction_id(self.transaction_id);
        h.set_attr_id(self.attr_id);
        h.set_attr_mod(self.attr_mod);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_round_trips(cls in any::<u8>(), ver in any::<u8>(), m in any::<u8>(), st in any::<u16>(),
                              cs in any::<u16>(), tid in any::<u64>(), a in any::<u16>(), am in any::<u32>()) {
            let r = MadRepr { base_version: 1, mgmt_class: cls, class_version: ver, method: m, status: st,
                              class_specific: cs, transaction_id: tid, attr_id: a, attr_mod: am };
            let mut b = [0u8; MAD_LEN];
            r.emit(&mut Mad::new_unchecked(&mut b[..]));
            prop_assert_eq!(MadRepr::parse(&Mad::new_checked(&b[..]).unwrap()).unwrap(), r);
        }
    }

    #[test]
    fn short_and_wrong_version_are_errors() {
        assert!(Mad::new_checked(&[0u8; 23][..]).is_err());
        let b = [2u8; MAD_LEN];
        assert_eq!(
            MadRepr::parse(&Mad::new_checked(&b[..]).unwrap()),
            Err(WireError::Mad("base version is not 1"))
        );
    }
}
