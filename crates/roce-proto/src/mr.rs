//! Memory regions: registration, key lookup and the access checks of IBTA
//! vol. 1 §10.6 (local: L_Key, PD, bounds, Local Write; remote §9.7.5.1.3 /
//! §10.6.3.3: R_Key, PD, bounds, Remote Read/Write/Atomic).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::config::Payload;
use crate::mem::{EngineId, MemBuf, NicBuf, PayloadRef};
use crate::verbs::{Access, Object, PdId, Sge, VerbsError};

/// A registered region. It holds its buffer's binding to this engine (see
/// `mem`), which ends when the record is dropped: deregistration or the
/// engine's end. Not `Clone`, so the binding cannot outlive the record.
#[derive(Debug)]
pub(crate) struct Mr {
    pub pd: PdId,
    pub buf: NicBuf,
    /// Offset of the region in `buf`.
    pub offset: usize,
    pub length: usize,
    pub iova: u64,
    pub access: Access,
    pub lkey: u32,
    pub rkey: u32,
    /// False after a remote invalidate (SEND with Invalidate).
    pub valid: bool,
}

impl Mr {
    /// Offset into `buf` of `[va, va+len)` if it lies inside the region.
    pub fn resolve(&self, va: u64, len: u64) -> Option<usize> {
        let start = va.checked_sub(self.iova)?;
        let end = start.checked_add(len)?;
        (end <= self.length as u64).then(|| self.offset + start as usize)
    }
}

/// Why a local buffer could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalError {
    /// Bad L_Key, PD mismatch, out of bounds or missing Local Write: the
    /// local protection error of ibverbs.
    Protection,
    /// The data does not fit the scatter list.
    Length,
}

#[derive(Debug)]
pub(crate) struct MrTable {
    /// The engine the table belongs to, to which it binds buffers.
    engine: EngineId,
    /// Hashed: every packet's gather or placement looks its region up,
    /// and a device may hold tens of thousands (a region per QP). The
    /// keys are the engine's own (random), so what a peer sends can only
    /// look up, not crowd a bucket.
    by_lkey: FxHashMap<u32, Mr>,
    rkey_to_lkey: FxHashMap<u32, u32>,
}

impl MrTable {
    pub fn new(engine: EngineId) -> MrTable {
        MrTable { engine, by_lkey: FxHashMap::default(), rkey_to_lkey: FxHashMap::default() }
    }

    /// Binds `buf` to this engine for a new region; fails if another engine
    /// has it.
    pub fn bind(&self, buf: Arc<MemBuf>) -> Result<NicBuf, VerbsError> {
        Ok(NicBuf::bind(buf, self.engine)?)
    }

    pub fn contains_key(&self, key: u32) -> bool {
        self.by_lkey.contains_key(&key) || self.rkey_to_lkey.contains_key(&key)
    }

    pub fn insert(&mut self, mr: Mr) {
        self.rkey_to_lkey.insert(mr.rkey, mr.lkey);
        self.by_lkey.insert(mr.lkey, mr);
    }

    pub fn remove(&mut self, lkey: u32) -> Option<Mr> {
        let mr = self.by_lkey.remove(&lkey)?;
        self.rkey_to_lkey.remove(&mr.rkey);
        Some(mr)
    }

    /// Regions registered on the device.
    pub fn len(&self) -> usize {
        self.by_lkey.len()
    }

    /// The region an R_Key names, if it is valid and in `pd`.
    pub fn by_rkey(&self, rkey: u32, pd: PdId) -> Option<&Mr> {
        let mr = self.by_lkey.get(self.rkey_to_lkey.get(&rkey)?)?;
        (mr.valid && mr.pd == pd).then_some(mr)
    }

    /// The binding and buffer offset of bytes `[offset, offset + len)` of
    /// the region `lkey` names, for the application's own access: access
    /// flags and remote invalidation guard the memory against the network,
    /// not against its owner.
    fn app_range(&self, lkey: u32, offset: usize, len: usize) -> Result<(&NicBuf, usize), VerbsError> {
        let mr = self.by_lkey.get(&lkey).ok_or(VerbsError::NotFound(Object::Mr))?;
        match offset.checked_add(len) {
            // The region lies inside its buffer (checked by reg_mr).
            Some(end) if end <= mr.length => Ok((&mr.buf, mr.offset + offset)),
            _ => Err(VerbsError::OutsideRegion { offset, len, size: mr.length }),
        }
    }

    /// `Engine::mr_read`.
    pub fn app_read(&self, lkey: u32, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        let (buf, at) = self.app_range(lkey, offset, dst.len())?;
        buf.nic_read(at, dst).map_err(|e| VerbsError::OutsideRegion { offset, len: e.len, size: e.size })
    }

    /// `Engine::mr_write`.
    pub fn app_write(&self, lkey: u32, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        let (buf, at) = self.app_range(lkey, offset, src.len())?;
        buf.nic_write(at, src).map_err(|e| VerbsError::OutsideRegion { offset, len: e.len, size: e.size })
    }

    /// `Engine::mr_fill`.
    pub fn app_fill(&self, lkey: u32, offset: usize, n: usize, byte: u8) -> Result<(), VerbsError> {
        let (buf, at) = self.app_range(lkey, offset, n)?;
        buf.nic_fill(at, n, byte).map_err(|e| VerbsError::OutsideRegion { offset, len: e.len, size: e.size })
    }

    /// Resolves a remote access: R_Key valid and in `pd`, access right
    /// granted, `[va, va+len)` inside the region. Returns the buffer and offset.
    pub fn remote(&self, rkey: u32, pd: PdId, va: u64, len: u64, need: Access) -> Option<(&NicBuf, usize)> {
        let mr = self.by_rkey(rkey, pd)?;
        if !mr.access.contains(need) {
            return None;
        }
        Some((&mr.buf, mr.resolve(va, len)?))
    }

    /// Remote invalidation of the region named by `rkey` (SEND with
    /// Invalidate, IBTA §10.6.6.2). Fails if the key is unknown, in another
    /// PD or already invalid.
    pub fn invalidate(&mut self, rkey: u32, pd: PdId) -> bool {
        let Some(&lkey) = self.rkey_to_lkey.get(&rkey) else { return false };
        match self.by_lkey.get_mut(&lkey) {
            Some(mr) if mr.valid && mr.pd == pd => {
                mr.valid = false;
                true
            }
            _ => false,
        }
    }

    fn local(&self, sge: &Sge, pd: PdId, need: Access) -> Result<(&NicBuf, usize), LocalError> {
        let mr = self.by_lkey.get(&sge.lkey).ok_or(LocalError::Protection)?;
        if !mr.valid || mr.pd != pd || !mr.access.contains(need) {
            return Err(LocalError::Protection);
        }
        let off = mr.resolve(sge.addr, u64::from(sge.length)).ok_or(LocalError::Protection)?;
        Ok((&mr.buf, off))
    }

    /// Walks bytes `[offset, offset + len)` of the logical concatenation
    /// of `sges`: each piece's buffer and offset in it, and its place in
    /// the walked range, after checking the element holds `need`.
    fn walk(
        &self,
        sges: &[Sge],
        pd: PdId,
        need: Access,
        mut offset: u64,
        len: usize,
        mut f: impl FnMut(&NicBuf, usize, std::ops::Range<usize>) -> Result<(), LocalError>,
    ) -> Result<(), LocalError> {
        let mut done = 0;
        for sge in sges {
            if done == len {
                break;
            }
            let sl = u64::from(sge.length);
            if offset >= sl {
                offset -= sl;
                continue;
            }
            let n = ((sl - offset) as usize).min(len - done);
            let (buf, base) = self.local(sge, pd, need)?;
            f(buf, base + offset as usize, done..done + n)?;
            done += n;
            offset = 0;
        }
        if done == len {
            Ok(())
        } else {
            Err(LocalError::Length)
        }
    }

    /// Copies bytes `[offset, offset + out.len())` of the logical
    /// concatenation of `sges` into `out`.
    pub fn gather(&self, sges: &[Sge], pd: PdId, offset: u64, out: &mut [u8]) -> Result<(), LocalError> {
        self.walk(sges, pd, Access::NONE, offset, out.len(), |buf, at, r| {
            buf.nic_read(at, &mut out[r]).map_err(|_| LocalError::Protection)
        })
    }

    /// Copies `data` into the logical concatenation of `sges` at `offset`;
    /// every element written needs Local Write.
    pub fn scatter(&self, sges: &[Sge], pd: PdId, offset: u64, data: &[u8]) -> Result<(), LocalError> {
        self.walk(sges, pd, Access::LOCAL_WRITE, offset, data.len(), |buf, at, r| {
            buf.nic_write(at, &data[r]).map_err(|_| LocalError::Protection)
        })
    }

    /// The engine whose regions these are.
    pub fn engine(&self) -> EngineId {
        self.engine
    }

    /// The pieces of bytes `[offset, offset + len)` of the logical
    /// concatenation of `sges`, checked as a gather would, left in memory
    /// for a driver to send: each with its place in the walked range.
    pub fn refs(
        &self,
        sges: &[Sge],
        pd: PdId,
        offset: u64,
        len: usize,
        mut f: impl FnMut(PayloadRef, std::ops::Range<usize>),
    ) -> Result<(), LocalError> {
        self.walk(sges, pd, Access::NONE, offset, len, |buf, at, r| {
            let piece = buf.nic_ref(at, r.len()).map_err(|_| LocalError::Protection)?;
            f(piece, r);
            Ok(())
        })
    }

    /// [`MrTable::gather`] of what `payload` carries of `out.len()` bytes
    /// at `offset` in their message: the rest is checked as a gather
    /// would and left zero.
    pub fn gather_payload(
        &self,
        payload: Payload,
        sges: &[Sge],
        pd: PdId,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), LocalError> {
        let n = payload.carried(offset, out.len());
        if n == out.len() {
            return self.gather(sges, pd, offset, out);
        }
        out[n..].fill(0);
        self.gather(sges, pd, offset, &mut out[..n])?;
        self.check(sges, pd, Access::NONE, offset + n as u64, out.len() - n)
    }

    /// [`MrTable::scatter`] of what `payload` carries of `data` at
    /// `offset` in its message: the rest is checked as a scatter would,
    /// and not written.
    pub fn scatter_payload(
        &self,
        payload: Payload,
        sges: &[Sge],
        pd: PdId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), LocalError> {
        let n = payload.carried(offset, data.len());
        if n == data.len() {
            return self.scatter(sges, pd, offset, data);
        }
        self.scatter(sges, pd, offset, &data[..n])?;
        self.check(sges, pd, Access::LOCAL_WRITE, offset + n as u64, data.len() - n)
    }

    /// The checks of a gather (`need` = `Access::NONE`) or a scatter
    /// (`Access::LOCAL_WRITE`) of `len` bytes at `offset`, moving nothing
    /// (an engine that elides payload, see `config::Payload`).
    fn check(&self, sges: &[Sge], pd: PdId, need: Access, offset: u64, len: usize) -> Result<(), LocalError> {
        self.walk(sges, pd, need, offset, len, |_, _, _| Ok(()))
    }
}

/// Total bytes of a scatter/gather list.
pub(crate) fn sge_total(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}
