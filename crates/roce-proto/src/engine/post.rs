//! Posting work requests: `ibv_post_send` and `ibv_post_recv`.

use super::*;

impl Engine {
    /// Posts a send work request (`ibv_post_send`). A QP in ERR (or SQE)
    /// completes it at once with WR_FLUSH_ERR.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        self.post_send_with(qpn, wr, None)
    }

    /// Posts an inline send whose bytes the caller hands over: `data` is
    /// what the SGEs name, concatenated, read by the caller at post time.
    /// ibverbs' `IBV_SEND_INLINE` lets those SGEs name memory no region
    /// covers (their L_Keys are not checked), which only the caller, a C
    /// library reading the program's memory, can read.
    pub fn post_send_inline(&mut self, qpn: u32, mut wr: SendWr, data: &[u8]) -> Result<(), VerbsError> {
        wr.inline = true;
        self.post_send_with(qpn, wr, Some(data))
    }

    pub(super) fn post_send_with(
        &mut self,
        qpn: u32,
        wr: SendWr,
        given: Option<&[u8]>,
    ) -> Result<(), VerbsError> {
        if let Some(d) = &wr.ud {
            self.check_av(&d.av)?;
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?;
        let q = &mut qp.core;
        let cfg = &self.res.cfg;
        match q.state {
            QpState::Rts | QpState::Sqd | QpState::Err | QpState::Sqe => {}
            s => return Err(VerbsError::BadState(s)),
        }
        if q.sq.len() >= q.init.cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull(WorkQueue::Send));
        }
        if wr.sg_list.len() > q.init.cap.max_send_sge as usize {
            return Err(Invalid::TooManySges {
                given: wr.sg_list.len(),
                max: q.init.cap.max_send_sge,
                queue: WorkQueue::Send,
            }
            .into());
        }
        let t = q.init.qp_type;
        match (&wr.op, t) {
            (SendOp::Send | SendOp::SendWithImm { .. }, _) => {}
            (SendOp::SendWithInv { .. }, QpType::Rc | QpType::Uc) => {}
            (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, QpType::Rc | QpType::Uc) => {}
            (SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }, QpType::Rc) => {}
            _ => return Err(Invalid::OpNotSupported { op: wr.op, qp_type: t }.into()),
        }
        let length = sge_total(&wr.sg_list);
        if length > cfg.max_msg_size {
            return Err(Invalid::MessageTooLong { length, max: cfg.max_msg_size }.into());
        }
        if t == QpType::Ud {
            if wr.ud.is_none() {
                return Err(Invalid::UdWithoutDestination.into());
            }
            if length > q.mtu() as u64 {
                return Err(Invalid::MessageTooLong { length, max: q.mtu() as u64 }.into());
            }
        }
        let remote = match wr.op {
            SendOp::Write { remote_addr, .. }
            | SendOp::WriteWithImm { remote_addr, .. }
            | SendOp::Read { remote_addr, .. }
            | SendOp::CompareSwap { remote_addr, .. }
            | SendOp::FetchAdd { remote_addr, .. } => Some(remote_addr),
            _ => None,
        };
        if remote.is_some_and(|a| a.checked_add(length.max(8)).is_none()) {
            return Err(Invalid::RemoteRangeOverflow.into());
        }
        if wr.op.is_atomic() {
            if length != 8 || wr.sg_list.len() != 1 {
                return Err(Invalid::AtomicSge.into());
            }
            let addr = match wr.op {
                SendOp::CompareSwap { remote_addr, .. } | SendOp::FetchAdd { remote_addr, .. } => remote_addr,
                _ => 0,
            };
            if addr % 8 != 0 {
                return Err(Invalid::AtomicAlignment(addr).into());
            }
        }
        if wr.op.is_read_or_atomic() && q.attr.max_rd_atomic == 0 {
            return Err(Invalid::NoReadAtomicInitiator.into());
        }
        let inline_data = if wr.inline {
            if wr.op.is_read_or_atomic() {
                return Err(Invalid::InlineReadAtomic.into());
            }
            if length > u64::from(q.init.cap.max_inline_data) {
                return Err(Invalid::InlineTooLong { length, max: q.init.cap.max_inline_data }.into());
            }
            let mut data = InlineData::zeroed(length as usize);
            match given {
                Some(d) if d.len() as u64 == length => data.as_mut_slice().copy_from_slice(d),
                Some(d) => return Err(Invalid::InlineDataLength { given: d.len(), length }.into()),
                None => self
                    .res
                    .mrs
                    .gather(&wr.sg_list, q.init.pd, 0, data.as_mut_slice())
                    .map_err(|_| VerbsError::LocalProtection)?,
            }
            Some(data)
        } else {
            None
        };
        let signaled = wr.signaled || q.init.sq_sig_all;
        q.sq.push_back(SendWqe {
            wr,
            inline_data,
            length,
            signaled,
            first_psn: Psn::ZERO,
            last_psn: Psn::ZERO,
            started: false,
            read_done: 0,
            read_sent: 0,
            read_above: Default::default(),
            read_charged: 0,
            done: None,
        });
        if matches!(q.state, QpState::Err | QpState::Sqe) {
            q.flush_send(&mut self.res);
            qp.req.abort(&qp.core);
        }
        self.schedule(qpn);
        Ok(())
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let q = &mut self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?.core;
        if q.init.srq.is_some() {
            return Err(Invalid::QpUsesSrq.into());
        }
        if q.state == QpState::Reset {
            return Err(VerbsError::BadState(QpState::Reset));
        }
        if q.rq.len() >= q.init.cap.max_recv_wr as usize {
            return Err(VerbsError::QueueFull(WorkQueue::Recv));
        }
        if wr.sg_list.len() > q.init.cap.max_recv_sge as usize {
            return Err(Invalid::TooManySges {
                given: wr.sg_list.len(),
                max: q.init.cap.max_recv_sge,
                queue: WorkQueue::Recv,
            }
            .into());
        }
        let length = sge_total(&wr.sg_list);
        q.rq.push_back(RecvWqe { wr, length });
        if q.state == QpState::Err {
            q.flush_recv(&mut self.res);
        }
        Ok(())
    }
}
