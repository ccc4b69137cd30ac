//! Registered memory regions, and the safe way to their bytes.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use roce_proto::*;

use crate::error::Result;
use crate::pd::Pd;
use crate::wait::{wait_for, Until};

/// A registered memory region. The memory stays alive as long as the region
/// (and as long as the application keeps its own `Arc<MemBuf>`).
///
/// [`Mr::read`], [`Mr::write`] and [`Mr::fill`] reach the memory safely at
/// any time. The verbs contract still says when its bytes mean something:
/// memory that an outstanding work request is sending may change under it
/// only after the completion, and memory a peer may be writing holds the
/// message only once the completion (or the peer's own signal) says so.
pub struct Mr {
    pub(crate) pd: Pd,
    pub(crate) keys: MrKeys,
    pub(crate) buf: Arc<MemBuf>,
    /// Where the region starts in `buf`.
    pub(crate) buf_offset: usize,
}

/// Registration lives with the region it makes.
impl Pd {
    /// Registers all of `buf` with the given access rights (`ibv_reg_mr`);
    /// the I/O virtual address is the buffer's address.
    pub fn reg_mr(&self, buf: Arc<MemBuf>, access: Access) -> Result<Mr> {
        let len = buf.len();
        self.reg_mr_range(buf, 0, len, None, access)
    }

    /// Registers `[offset, offset+length)` of `buf`, optionally at a chosen
    /// I/O virtual address.
    pub fn reg_mr_range(
        &self,
        buf: Arc<MemBuf>,
        offset: usize,
        length: usize,
        iova: Option<u64>,
        access: Access,
    ) -> Result<Mr> {
        let spec = MrSpec { buf: buf.clone(), offset, length, iova, access };
        let keys = self.dev().with(|e| e.reg_mr(self.inner.id, spec))?;
        Ok(Mr { pd: self.clone(), keys, buf, buf_offset: offset })
    }
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        self.keys.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.keys.rkey
    }
    pub fn addr(&self) -> u64 {
        self.keys.addr
    }
    pub fn len(&self) -> usize {
        self.keys.length as usize
    }
    pub fn is_empty(&self) -> bool {
        self.keys.length == 0
    }
    /// The registered buffer. Holding it is harmless; touching its bytes
    /// directly takes `unsafe` and the verbs contract (see [`MemBuf`]):
    /// [`Mr::read`] and [`Mr::write`] are the safe way.
    pub fn buf(&self) -> &Arc<MemBuf> {
        &self.buf
    }

    /// Copies bytes `[offset, offset + dst.len())` of the region (offsets
    /// into the region) into `dst`.
    ///
    /// Sound whatever the NIC is doing: it takes the device's lock, and the
    /// NIC touches registered memory only under that lock. The engine, which
    /// does every copy and atomic of the NIC (receives, incoming WRITEs and
    /// atomics, READ responses, gathering what it sends), lives in the
    /// driver's `Core` inside the device's mutex; the driver thread and the
    /// application's threads (posting, polling, busy-poll progress) reach
    /// it only through that mutex, and the socket moves datagrams through
    /// the driver's own buffers, never registered memory. The buffer cannot
    /// be registered with another device meanwhile (see
    /// [`VerbsError::BufferOnOtherDevice`]).
    ///
    /// What it reads may be part of a message still arriving; the
    /// completion says when a message is all there.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let mut core = self.pd.dev().shared().lock()?;
        Ok(core.engine.mr_read(self.keys.lkey, offset, dst)?)
    }

    /// Waits until byte `offset` of the region equals `want` (perftest's
    /// latency loops watch the last byte of an incoming RDMA WRITE this
    /// way): true once it does, false if `timeout` passes first.
    ///
    /// Without busy-poll it sleeps between looks and is woken by the
    /// driver thread after each receive, so it never holds the device's
    /// lock while the driver needs it. A loop of [`Mr::read`] would take
    /// the lock back-to-back and, with fewer cores than busy threads, can
    /// keep the driver thread from the packet it is waiting for for tens of
    /// milliseconds. With busy-poll it drives the network itself.
    pub fn wait_byte(&self, offset: usize, want: u8, timeout: StdDuration) -> Result<bool> {
        let mut b = [0u8];
        let seen = wait_for(self.pd.dev().shared(), Until::Progress, timeout, |core| {
            core.engine.mr_read(self.keys.lkey, offset, &mut b)?;
            Ok((b[0] == want).then_some(()))
        })?;
        Ok(seen.is_some())
    }

    /// Copies `src` into the region at `offset`; sound for the reasons
    /// given at [`Mr::read`]. Bytes that an outstanding work request sends
    /// may go out before or after the change.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        let mut core = self.pd.dev().shared().lock()?;
        Ok(core.engine.mr_write(self.keys.lkey, offset, src)?)
    }

    /// Lends bytes `[offset, offset + len)` of the region to `f` in place,
    /// without a copy (a collective reduces straight out of a receive slot
    /// and stages straight into a send slot), and returns what `f` returns.
    ///
    /// Sound for the reasons given at [`Mr::read`]: `f` runs while this
    /// thread holds the device's lock, and the NIC (the engine) touches
    /// registered memory only under that lock, so no access of the NIC to
    /// these bytes can overlap `f`'s. Every other safe way to the bytes
    /// ([`Mr::read`], [`Mr::write`], [`Mr::fill`], this method on any region
    /// of the same buffer, which can only belong to this device) takes the
    /// same lock; the unsafe ones (`MemBuf::read`, raw pointers) carry the
    /// promise that nothing conflicting runs. So the slice is the only
    /// access to those bytes while it lives. The range is checked against
    /// the region (and the region against the buffer) before the slice is
    /// formed. `f` must not call into this device (it would wait for the
    /// lock it holds: a deadlock, never a data race), and it holds up the
    /// driver thread while it runs, so keep it short (a slot, not a buffer).
    pub fn with_bytes_mut<R>(&self, offset: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let outside = || VerbsError::OutsideRegion { offset, len, size: self.len() };
        let end = offset.checked_add(len).filter(|&e| e <= self.len()).ok_or_else(outside)?;
        let start = self.buf_offset.checked_add(offset).ok_or_else(outside)?;
        if self.buf_offset.checked_add(end).is_none_or(|e| e > self.buf.len()) {
            return Err(outside().into());
        }
        let _core = self.pd.dev().shared().lock()?;
        // SAFETY: `[start, start + len)` lies inside the buffer (checked
        // above), which lives as long as `self.buf`. The device's lock is
        // held until the slice is gone (`_core` outlives `f`'s call), so
        // neither the engine nor another safe accessor touches these bytes
        // meanwhile (see the doc comment): the `&mut` is unique.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.buf.as_ptr().add(start), len) };
        Ok(f(bytes))
    }

    /// [`Mr::with_bytes_mut`] for reading.
    pub fn with_bytes<R>(&self, offset: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.with_bytes_mut(offset, len, |b| f(b))
    }

    /// Sets bytes `[offset, offset + n)` of the region to `byte`; see
    /// [`Mr::write`].
    pub fn fill(&self, offset: usize, n: usize, byte: u8) -> Result<()> {
        let mut core = self.pd.dev().shared().lock()?;
        Ok(core.engine.mr_fill(self.keys.lkey, offset, n, byte)?)
    }
    /// A scatter/gather element for `[offset, offset+len)` of the region.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge { addr: self.keys.addr + offset, length: len, lkey: self.keys.lkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let _ = self.pd.dev().with(|e| e.dereg_mr(self.keys.lkey));
    }
}
