//! Atomic Extended Transport Header (IBTA vol. 1 §9.3.4, 28 bytes: VA (64),
//! R_Key (32), swap/add data (64), compare data (64)) and Atomic Acknowledge
//! Extended Transport Header (§9.3.6, 8 bytes: original remote data).

use crate::error::{Header, Result};
use crate::field::*;
use crate::view::header_view;

pub const ATOMIC_ETH_LEN: usize = 28;
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const SWAP_ADD: usize = 12;
    pub const COMPARE: usize = 20;
    pub const ORIG: usize = 0;
}

header_view!(
    /// Zero-copy view of an AtomicETH.
    AtomicEth,
    ATOMIC_ETH_LEN,
    Header::AtomicEth
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    pub fn va(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::VA)
    }
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::RKEY)
    }
    pub fn swap_add(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::SWAP_ADD)
    }
    pub fn compare(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::VA, v);
    }
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RKEY, v);
    }
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::SWAP_ADD, v);
    }
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::COMPARE, v);
    }
}

/// Parsed AtomicETH. For FETCH_ADD the compare field is unused (sent as 0 by
/// rxe, but carried as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

impl AtomicEthRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> Result<AtomicEthRepr> {
        Ok(AtomicEthRepr { va: h.va(), rkey: h.rkey(), swap_add: h.swap_add(), compare: h.compare() })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }
}

header_view!(
    /// Zero-copy view of an AtomicAckETH.
    AtomicAckEth,
    ATOMIC_ACK_ETH_LEN,
    Header::AtomicAckEth
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The value at the target address before the atomic operation.
    pub fn orig(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::ORIG)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    pub fn set_orig(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::ORIG, v);
    }
}
