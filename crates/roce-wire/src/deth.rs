//! Datagram Extended Transport Header (IBTA vol. 1 §9.3.2, 8 bytes):
//! Q_Key (32), reserved (8), source QP (24). Carried by every UD packet.

use crate::error::{Header, Result, WireError};
use crate::field::*;
use crate::view::header_view;

pub const HEADER_LEN: usize = 8;

mod field {
    pub const QKEY: usize = 0;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: usize = 5;
}

header_view!(
    /// Zero-copy view of a DETH.
    Deth,
    HEADER_LEN,
    Header::Deth
);

impl<T: AsRef<[u8]>> Deth<T> {
    pub fn qkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::QKEY)
    }
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
    pub fn src_qp(&self) -> u32 {
        get_u24(self.buffer.as_ref(), field::SRC_QP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::QKEY, v);
    }
    pub fn set_src_qp(&mut self, v: u32) {
        self.buffer.as_mut()[field::RESERVED] = 0;
        set_u24(self.buffer.as_mut(), field::SRC_QP, v);
    }
}

/// Parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    pub qkey: u32,
    pub src_qp: u32,
}

impl DethRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Deth<T>) -> Result<DethRepr> {
        if h.reserved() != 0 {
            return Err(WireError::ReservedNonZero("DETH reserved byte"));
        }
        Ok(DethRepr { qkey: h.qkey(), src_qp: h.src_qp() })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<T>) {
        h.set_qkey(self.qkey);
        h.set_src_qp(self.src_qp & 0x00ff_ffff);
    }
}
