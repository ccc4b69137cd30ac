//! Queue pairs: creation parameters, connecting, posting.

use std::net::IpAddr;

use roce_proto::*;
use roce_wire::Psn;

use crate::cq::Cq;
use crate::device::Device;
use crate::driver::Core;
use crate::error::{Error, Result};
use crate::pd::{Pd, Srq};

/// QP creation parameters.
pub struct QpBuilder<'a> {
    pub(crate) qp_type: QpType,
    pub(crate) send_cq: &'a Cq,
    pub(crate) recv_cq: &'a Cq,
    pub(crate) srq: Option<&'a Srq>,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
}

impl<'a> QpBuilder<'a> {
    pub fn new(qp_type: QpType, send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpBuilder { qp_type, send_cq, recv_cq, srq: None, cap: QpCap::default(), sq_sig_all: false }
    }
    /// Receives come from this shared receive queue (the QP's own receive
    /// queue is not used).
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }
    pub fn rc(cq: &'a Cq) -> Self {
        Self::new(QpType::Rc, cq, cq)
    }
    pub fn ud(cq: &'a Cq) -> Self {
        Self::new(QpType::Ud, cq, cq)
    }
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.cap.max_send_wr = n;
        self
    }
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.cap.max_recv_wr = n;
        self
    }
    pub fn max_sge(mut self, send: u32, recv: u32) -> Self {
        self.cap.max_send_sge = send;
        self.cap.max_recv_sge = recv;
        self
    }
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.cap.max_inline_data = n;
        self
    }
    pub fn sq_sig_all(mut self, on: bool) -> Self {
        self.sq_sig_all = on;
        self
    }
}

/// Creation lives with the QP it makes.
impl Pd {
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
}

/// What a peer needs to know to connect to a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub gid: IpAddr,
    /// UDP port of the peer device (4791 unless it bound another).
    pub port: u16,
    pub qpn: u32,
    pub psn: Psn,
}

/// Transport parameters for `Qp::connect` (RC: INIT -> RTR -> RTS).
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    pub mtu: PathMtu,
    pub access: Access,
    /// Local ACK timeout code (4.096 us x 2^timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    /// DSCP of this QP's packets (0..=63: `connect` refuses more with
    /// [`Error::Dscp`]); `None` uses the device's.
    pub dscp: Option<u8>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: PathMtu::Mtu4096,
            access: Access::ALL,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            dscp: None,
        }
    }
}

/// A queue pair.
pub struct Qp {
    pub(crate) pd: Pd,
    pub(crate) send_cq: Cq,
    pub(crate) recv_cq: Cq,
    pub(crate) srq: Option<Srq>,
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    /// The first send PSN, drawn at creation.
    pub(crate) psn: Psn,
}

impl Qp {
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The transport service (`qp->qp_type`).
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    pub fn send_cq(&self) -> &Cq {
        &self.send_cq
    }
    pub fn recv_cq(&self) -> &Cq {
        &self.recv_cq
    }

    fn dev(&self) -> &Device {
        self.pd.dev()
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        self.dev().with(|e| e.modify_qp(self.qpn, attr, mask))?;
        self.note_state();
        Ok(())
    }

    /// Tells the driver what this QP can now have in flight towards the
    /// device's socket (`Core::note_qp`): a connected RC/UC QP's peer may
    /// send a full window of path-MTU packets.
    pub(crate) fn note_state(&self) {
        let Ok(mut core) = self.dev().shared().lock() else { return };
        let window = core.engine.config().max_unacked_psns;
        let connected = match core.engine.query_qp(self.qpn) {
            Ok(a) if matches!(self.qp_type, QpType::Rc | QpType::Uc) => {
                matches!(a.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd)
                    .then(|| (a.path_mtu.bytes(), window))
            }
            _ => None,
        };
        core.note_qp(self.qpn, connected);
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        self.dev().with(|e| e.query_qp(self.qpn))
    }

    pub fn state(&self) -> Result<QpState> {
        Ok(self.query()?.qp_state)
    }

    /// The shared receive queue the QP takes its receives from, if any.
    pub fn srq(&self) -> Option<&Srq> {
        self.srq.as_ref()
    }

    /// What the peer needs to connect to this QP: GID, UDP port, QPN and
    /// the first PSN this QP sends (drawn once, at creation, from the
    /// engine's CSPRNG).
    pub fn endpoint(&self) -> Endpoint {
        Endpoint { gid: self.dev().gid(), port: self.dev().local_addr().port(), qpn: self.qpn, psn: self.psn }
    }

    /// Protects the QP's packets with these keys (AES-128-GCM, see
    /// `roce::crypto` for agreeing on them). Call before `connect`; the
    /// peer's QP must be given the mirrored keys.
    pub fn protect(&self, keys: &QpKeys) -> Result<()> {
        self.dev().with(|e| e.set_qp_keys(self.qpn, keys))
    }

    /// RC/UC: moves the QP RESET -> INIT -> RTR -> RTS towards `remote`
    /// (the peer's `endpoint()`), sending from this QP's own first PSN (the
    /// one `endpoint()` told the peer). UD QPs are not connected: see
    /// `ready_ud`.
    pub fn connect(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        let local_psn = self.psn;
        let dscp = opts.dscp.unwrap_or(self.dev().inner.dscp);
        // The traffic class byte is DSCP << 2 | ECN: a seventh bit would be
        // shifted out, and the packets would leave with another class.
        if dscp > 63 {
            return Err(Error::Dscp(dscp));
        }
        let av = AddressVector {
            dgid: remote.gid,
            sgid_index: 0,
            traffic_class: dscp << 2,
            hop_limit: 64,
            flow_label: 0,
            udp_port: Some(remote.port),
        };
        let c = ConnectAttr {
            access: opts.access,
            mtu: opts.mtu,
            max_dest_rd_atomic: opts.max_dest_rd_atomic,
            min_rnr_timer: opts.min_rnr_timer,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            max_rd_atomic: opts.max_rd_atomic,
            ..ConnectAttr::new(av, remote.qpn, remote.psn, local_psn)
        };
        self.dev().with(|e| e.connect_qp(self.qpn, &c))?;
        self.note_state();
        Ok(())
    }

    /// UD: RESET -> INIT -> RTR -> RTS with the given Q_Key, sending from
    /// this QP's first PSN.
    pub fn ready_ud(&self, qkey: u32) -> Result<()> {
        let psn = self.psn;
        self.dev().with(|e| e.ready_ud(self.qpn, qkey, psn))
    }

    /// `ibv_post_send`; the packets leave from the calling thread.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        let sh = &self.dev().inner.shared;
        let mut core = sh.lock()?;
        note_read(&mut core, &wr);
        core.engine.post_send(self.qpn, wr)?;
        sh.kick(core);
        Ok(())
    }

    /// Posts an inline send with its bytes (`Engine::post_send_inline`):
    /// for a C library, whose program's inline SGEs may name memory no
    /// region covers.
    pub fn post_send_inline(&self, wr: SendWr, data: &[u8]) -> Result<()> {
        let sh = &self.dev().inner.shared;
        let mut core = sh.lock()?;
        note_read(&mut core, &wr);
        core.engine.post_send_inline(self.qpn, wr, data)?;
        sh.kick(core);
        Ok(())
    }

    /// Posts several send WRs under one lock and one flush.
    pub fn post_send_batch(&self, wrs: impl IntoIterator<Item = SendWr>) -> Result<()> {
        let sh = &self.dev().inner.shared;
        let mut core = sh.lock()?;
        let mut r = Ok(());
        for wr in wrs {
            note_read(&mut core, &wr);
            if let Err(e) = core.engine.post_send(self.qpn, wr) {
                r = Err(e.into());
                break;
            }
        }
        sh.kick(core);
        r
    }

    /// Posts send WRs in order under one lock and one flush, stopping at
    /// the first the engine refuses: `Err((i, e))` says the `i`-th (from 0)
    /// was refused and those before it were posted (`ibv_post_send`'s
    /// `bad_wr`).
    /// A WR may come with its inline bytes (`Engine::post_send_inline`).
    pub fn post_send_each(
        &self,
        wrs: impl IntoIterator<Item = (SendWr, Option<Vec<u8>>)>,
    ) -> std::result::Result<(), (usize, Error)> {
        let sh = &self.dev().inner.shared;
        let mut core = sh.lock().map_err(|e| (0, e))?;
        let mut r = Ok(());
        for (i, (wr, data)) in wrs.into_iter().enumerate() {
            note_read(&mut core, &wr);
            let posted = match data {
                Some(d) => core.engine.post_send_inline(self.qpn, wr, &d),
                None => core.engine.post_send(self.qpn, wr),
            };
            if let Err(e) = posted {
                r = Err((i, e.into()));
                break;
            }
        }
        sh.kick(core);
        r
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.dev().with(|e| e.post_recv(self.qpn, wr))
    }

    /// Send WRs posted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.dev().shared().lock_any().engine.sq_outstanding(self.qpn)
    }
}

/// Tells the driver the length of an RDMA READ about to be posted (its
/// responses come back in one burst: `Core::note_read`).
fn note_read(core: &mut Core, wr: &SendWr) {
    if let SendOp::Read { .. } = wr.op {
        core.note_read(wr.sg_list.iter().map(|s| u64::from(s.length)).sum());
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let _ = self.dev().with(|e| e.destroy_qp(self.qpn));
        if let Ok(mut core) = self.dev().shared().lock() {
            core.note_qp(self.qpn, None);
        }
    }
}
