//! The small extension headers: ImmDt (IBTA vol. 1 §9.3.7, 4 bytes of
//! immediate data), IETH (§9.3.8, the R_Key to invalidate), FETH (the FLUSH
//! extended transport header of IBTA 1.5 §9.3.9: reserved (26), selectivity
//! level (2), placement type (4)) and the 16 reserved bytes that follow the BTH
//! of a RoCEv2 CNP (Annex A17.9.3).

use crate::error::{Header, Result, WireError};
use crate::field::*;
use crate::view::header_view;

pub const IMM_DT_LEN: usize = 4;
pub const IETH_LEN: usize = 4;
pub const FETH_LEN: usize = 4;
pub const CNP_PAD_LEN: usize = 16;

header_view!(
    /// A 32-bit big-endian header: ImmDt or IETH.
    Word,
    4,
    Header::ImmDt
);

impl<T: AsRef<[u8]>> Word<T> {
    pub fn value(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Word<T> {
    pub fn set_value(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }
}

/// Parsed FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// Selectivity level (2 bits): 0 memory region range, 1 whole memory region.
    pub selectivity: u8,
    /// Placement type (4 bits): bit 0 global visibility, bit 1 persistence.
    pub placement: u8,
}

impl FethRepr {
    #[inline]
    pub fn parse(b: &[u8]) -> Result<FethRepr> {
        if b.len() < FETH_LEN {
            return Err(WireError::Truncated { header: Header::Feth, need: FETH_LEN, have: b.len() });
        }
        let v = get_u32(b, 0);
        if v >> 6 != 0 {
            return Err(WireError::ReservedNonZero("FETH reserved bits"));
        }
        Ok(FethRepr { selectivity: ((v >> 4) & 3) as u8, placement: (v & 0xf) as u8 })
    }
    pub fn emit(&self, b: &mut [u8]) {
        let v = (u32::from(self.selectivity & 3) << 4) | u32::from(self.placement & 0xf);
        set_u32(b, 0, v);
    }
}
