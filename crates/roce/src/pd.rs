//! Protection domains and what lives in one besides memory regions: shared
//! receive queues and address handles.

use std::sync::Arc;

use roce_proto::*;

use crate::device::Device;
use crate::error::Result;

pub(crate) struct PdInner {
    pub(crate) dev: Device,
    pub(crate) id: PdId,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let _ = self.dev.with(|e| e.dealloc_pd(self.id));
    }
}

/// A protection domain.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

/// Allocation lives with the PD it makes.
impl Device {
    pub fn alloc_pd(&self) -> Result<Pd> {
        let id = self.with(|e| Ok(e.alloc_pd()))?;
        Ok(Pd { inner: Arc::new(PdInner { dev: self.clone(), id }) })
    }
}

impl Pd {
    pub(crate) fn dev(&self) -> &Device {
        &self.inner.dev
    }

    /// Creates a shared receive queue (`ibv_create_srq`): `max_wr` receive
    /// WRs of up to `max_sge` SGEs, for any number of QPs of this PD.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let id = self.dev().with(|e| e.create_srq(self.inner.id, max_wr, max_sge))?;
        Ok(Srq { inner: Arc::new(SrqInner { pd: self.clone(), id }) })
    }

    /// An address handle for UD sends (`ibv_create_ah`): checked against
    /// the device's GID table now (the source GID exists and is of the
    /// destination's IP family), so a send through it cannot be refused
    /// for its address.
    pub fn create_ah(&self, av: AddressVector) -> Result<Ah> {
        self.dev().with(|e| e.check_av(&av))?;
        Ok(Ah { _pd: self.clone(), av })
    }
}

pub(crate) struct SrqInner {
    pd: Pd,
    pub(crate) id: SrqId,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let _ = self.pd.dev().with(|e| e.destroy_srq(self.id));
    }
}

/// A shared receive queue. QPs created with it (`QpBuilder::srq`) keep it
/// alive.
#[derive(Clone)]
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

impl Srq {
    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.inner.pd.dev().with(|e| e.post_srq_recv(self.inner.id, wr))
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`):
    /// `AsyncEvent::SrqLimitReached` once fewer than `limit` WRs are left.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.inner.pd.dev().with(|e| e.arm_srq_limit(self.inner.id, limit))
    }

    /// The engine's identifier (what `AsyncEvent::SrqLimitReached` names).
    pub fn id(&self) -> SrqId {
        self.inner.id
    }
}

/// An address handle: where UD sends go (`struct ibv_ah`), checked when
/// made.
#[derive(Clone)]
pub struct Ah {
    _pd: Pd,
    av: AddressVector,
}

impl Ah {
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// The destination of a UD send (`wr.ud` of `ibv_send_wr`): this
    /// address, the remote QP and its Q_Key.
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest { av: self.av, remote_qpn, remote_qkey }
    }
}
