//! Protection domains and what lives in one besides memory regions: shared
//! receive queues and address handles.

use std::sync::Arc;

use roce_proto::*;

use crate::device::Device;
use crate::error::Result;
use crate::mr::Mr;
use crate::qp::{Qp, QpBuilder};

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

impl Pd {
    pub(crate) fn dev(&self) -> &Device {
        &self.inner.dev
    }

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
        Ok(Mr { pd: self.clone(), keys, buf })
    }

    /// Creates a QP (`ibv_create_qp`). It draws its first send PSN now
    /// (`Qp::endpoint` tells it to the peer, `Qp::connect` uses it).
    pub fn create_qp(&self, b: QpBuilder<'_>) -> Result<Qp> {
        let init = QpInitAttr {
            qp_type: b.qp_type,
            pd: self.inner.id,
            send_cq: b.send_cq.inner.id,
            recv_cq: b.recv_cq.inner.id,
            srq: b.srq.map(|s| s.inner.id),
            cap: b.cap,
            sq_sig_all: b.sq_sig_all,
        };
        let (qpn, psn) = self.dev().with(|e| Ok((e.create_qp(init)?, e.random_psn())))?;
        Ok(Qp {
            pd: self.clone(),
            send_cq: b.send_cq.clone(),
            recv_cq: b.recv_cq.clone(),
            srq: b.srq.cloned(),
            qpn,
            qp_type: b.qp_type,
            psn,
        })
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
