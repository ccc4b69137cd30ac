//! RDMA Extended Transport Header (IBTA vol. 1 §9.3.3, 16 bytes):
//! virtual address (64), R_Key (32), DMA length (32).

use crate::error::{Header, Result};
use crate::field::*;
use crate::view::header_view;

pub const HEADER_LEN: usize = 16;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const DMA_LEN: usize = 12;
}

header_view!(
    /// Zero-copy view of a RETH.
    Reth,
    HEADER_LEN,
    Header::Reth
);

impl<T: AsRef<[u8]>> Reth<T> {
    pub fn va(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::VA)
    }
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::RKEY)
    }
    pub fn dma_len(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::DMA_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::VA, v);
    }
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RKEY, v);
    }
    pub fn set_dma_len(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::DMA_LEN, v);
    }
}

/// Parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl RethRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> Result<RethRepr> {
        Ok(RethRepr { va: h.va(), rkey: h.rkey(), dma_len: h.dma_len() })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }
}
