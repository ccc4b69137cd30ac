//! One queue pair of the initiator on one RDMA connection: command
//! capsules out as inline SENDs, response capsules (16-byte CQEs) into
//! posted receives, the data in a registered slot per command that the
//! controller reaches by RDMA READ/WRITE (RDMA Transport 1.0, 3.3).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use roce::cm::{connect_with, ConnectOpts, Connection};
use roce::{alloc_buffer, Access, Device, Mr, RecvWr, SendOp, SendWr, Sge, Wc};

use super::HostError;
use crate::wire::fabrics::{parse_rej_private, ReqPrivate};
use crate::wire::{Cqe, Sgl, Sqe, CQE_LEN, FLAGS_SGL, SQE_LEN};

const WR_RECV: u64 = 1 << 32;
const WR_SEND: u64 = 2 << 32;

/// A command's completion, with the time it took.
#[derive(Debug, Clone, Copy)]
pub struct Done {
    /// The slot (and command identifier) it used.
    pub slot: u16,
    pub cqe: Cqe,
    pub latency: Duration,
}

/// One NVMe queue pair (admin or I/O) over its own RC QP.
pub struct HostQueue {
    conn: Connection,
    recv_mr: Mr,
    data_mr: Mr,
    pub(super) qid: u16,
    depth: u16,
    slot_len: usize,
    /// Submission time of each slot's command (its CID is the slot).
    busy: Vec<Option<Instant>>,
    free: Vec<u16>,
    spin: crate::rdma::Spin,
    /// Commands submitted and not yet posted: they leave together at the
    /// next `flush` or `poll`, one lock, one flush and one `sendmmsg` for
    /// all, as a host rings the doorbell once for a batch of SQEs.
    unposted: Vec<(SendWr, Option<Vec<u8>>)>,
}

impl HostQueue {
    /// Connects queue `qid` (depth `depth`) to the controller at `addr`
    /// through the RDMA CM with the NVMe/RDMA private data (Fig. 5),
    /// receives posted first.
    pub(super) fn connect(
        dev: &Device,
        addr: SocketAddr,
        qid: u16,
        depth: u16,
        cntlid: u16,
        slot_len: usize,
        timeout: Duration,
    ) -> Result<HostQueue, HostError> {
        let n = usize::from(depth);
        let access = Access::LOCAL_WRITE.union(Access::REMOTE_READ).union(Access::REMOTE_WRITE);
        let (pd, qp) = crate::rdma::capsule_qp(dev, n, access)?;
        let recv_mr = pd.reg_mr(alloc_buffer(n * CQE_LEN), Access::LOCAL_WRITE)?;
        let data_mr = pd.reg_mr(alloc_buffer(n * slot_len), access)?;
        for i in 0..n {
            qp.post_recv(RecvWr {
                wr_id: WR_RECV | i as u64,
                sg_list: vec![recv_mr.sge((i * CQE_LEN) as u64, CQE_LEN as u32)],
            })?;
        }
        let private = ReqPrivate { recfmt: 0, qid, hrqsize: depth, hsqsize: depth - 1, cntlid };
        let opts = ConnectOpts {
            private_data: private.emit().to_vec(),
            // The controller reads our data (Write commands); we never read.
            responder_resources: 16,
            initiator_depth: 0,
            ..ConnectOpts::default()
        };
        let conn = connect_with(dev, addr, qp, &opts, Some(timeout)).map_err(|e| match e {
            roce::Error::Rejected { reason, private_data } => {
                // The binding's status rides only on a consumer reject
                // (reason 28); other reasons come from the CM itself.
                let status = if reason == 28 { parse_rej_private(&private_data) } else { None };
                HostError::Rejected { reason, status }
            }
            e => HostError::Device(e),
        })?;
        Ok(HostQueue {
            conn,
            recv_mr,
            data_mr,
            qid,
            depth,
            slot_len,
            busy: vec![None; n],
            free: (0..depth).rev().collect(),
            spin: crate::rdma::Spin::default(),
            unposted: Vec::new(),
        })
    }

    pub fn depth(&self) -> u16 {
        self.depth
    }

    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Commands outstanding.
    pub fn outstanding(&self) -> usize {
        usize::from(self.depth) - self.free.len()
    }

    /// A free slot, if any.
    pub fn take_slot(&mut self) -> Option<u16> {
        self.free.pop()
    }

    /// Returns a slot taken but not submitted.
    pub fn give_back(&mut self, slot: u16) {
        if self.busy.get(usize::from(slot)).is_some_and(Option::is_none) && !self.free.contains(&slot) {
            self.free.push(slot);
        }
    }

    /// The keyed SGL for `len` bytes of `slot` (sub type address: the
    /// controller answers with a plain SEND and the region stays ours).
    pub fn sgl(&self, slot: u16, len: u32) -> Sgl {
        Sgl::Keyed {
            addr: self.data_mr.addr() + (usize::from(slot) * self.slot_len) as u64,
            len,
            key: self.data_mr.rkey(),
            invalidate: false,
        }
    }

    /// Copies `data` into `slot` (a Write's or Connect's data).
    pub fn fill(&self, slot: u16, data: &[u8]) -> Result<(), HostError> {
        Ok(self.data_mr.write(usize::from(slot) * self.slot_len, data)?)
    }

    /// Copies `out.len()` bytes out of `slot` (a Read's data).
    pub fn copy_out(&self, slot: u16, out: &mut [u8]) -> Result<(), HostError> {
        Ok(self.data_mr.read(usize::from(slot) * self.slot_len, out)?)
    }

    /// Submits `sqe` (its CID set to `slot`, SGL flags set) from `slot`:
    /// it is sent with the others submitted since at the next
    /// [`HostQueue::flush`] or [`HostQueue::poll`]. Its latency counts from
    /// here.
    pub fn submit(&mut self, slot: u16, mut sqe: [u8; SQE_LEN]) -> Result<(), HostError> {
        let mut v = Sqe::new_checked(&mut sqe[..]).expect("64 bytes");
        v.set_cid(slot);
        v.set_flags(FLAGS_SGL);
        let sge = Sge { addr: 0, length: SQE_LEN as u32, lkey: 0 };
        let mut wr = SendWr::new(WR_SEND | u64::from(slot), SendOp::Send, vec![sge]);
        wr.inline = true;
        self.busy[usize::from(slot)] = Some(Instant::now());
        self.unposted.push((wr, Some(sqe.to_vec())));
        Ok(())
    }

    /// Sends the commands submitted since the last flush, in order.
    pub fn flush(&mut self) -> Result<(), HostError> {
        if self.unposted.is_empty() {
            return Ok(());
        }
        let r = self.conn.qp().post_send_each(self.unposted.drain(..));
        r.map_err(|(_, e)| HostError::Device(e))
    }

    /// Sends what was submitted ([`HostQueue::flush`]), then takes the
    /// completions that arrived, waiting up to `wait` for the first.
    pub fn poll(&mut self, wait: Duration, out: &mut Vec<Done>) -> Result<(), HostError> {
        self.flush()?;
        let mut wcs = [Wc::EMPTY; 32];
        let qp = self.conn.qp();
        let outstanding = self.outstanding();
        let n = self.spin.next_completions(qp.recv_cq(), qp.qpn(), || outstanding > 0, &mut wcs, wait)?;
        for wc in &wcs[..n] {
            if wc.status != roce::WcStatus::Success {
                return Err(HostError::Protocol(format!(
                    "queue {}: work request {:#x} failed: {:?}",
                    self.qid, wc.wr_id, wc.status
                )));
            }
            if wc.wr_id & !0xffff_ffff != WR_RECV {
                continue;
            }
            let r = (wc.wr_id & 0xffff_ffff) as usize;
            let mut b = [0u8; CQE_LEN];
            self.recv_mr.read(r * CQE_LEN, &mut b)?;
            self.conn.qp().post_recv(RecvWr {
                wr_id: wc.wr_id,
                sg_list: vec![self.recv_mr.sge((r * CQE_LEN) as u64, CQE_LEN as u32)],
            })?;
            let cqe = match (wc.byte_len as usize >= CQE_LEN).then(|| Cqe::parse(&b)).flatten() {
                Some(c) => c,
                None => {
                    return Err(HostError::Protocol(format!(
                        "queue {}: a response of {} bytes",
                        self.qid, wc.byte_len
                    )))
                }
            };
            // A response must answer a command we sent (NVMe Base 2.0,
            // 4.6: the CID names it).
            let slot = cqe.cid;
            let Some(t) = self.busy.get_mut(usize::from(slot)).and_then(Option::take) else {
                return Err(HostError::Protocol(format!(
                    "queue {}: a response for command {slot}, which is not outstanding",
                    self.qid
                )));
            };
            self.free.push(slot);
            out.push(Done { slot, cqe, latency: t.elapsed() });
        }
        Ok(())
    }

    /// Submits one command from a free slot and waits for its answer:
    /// its CQE (or an error naming `what`).
    pub fn exec(
        &mut self,
        what: &'static str,
        build: impl FnOnce(&Self, u16) -> [u8; SQE_LEN],
        data_out: Option<&[u8]>,
        data_in: Option<&mut [u8]>,
        timeout: Duration,
    ) -> Result<Cqe, HostError> {
        let slot =
            self.take_slot().ok_or(HostError::Protocol(format!("queue {}: no free slot", self.qid)))?;
        if let Some(d) = data_out {
            self.fill(slot, d)?;
        }
        let sqe = build(self, slot);
        self.submit(slot, sqe)?;
        let cqe = self.wait_for(slot, what, timeout)?;
        if let Some(out) = data_in {
            self.copy_out(slot, out)?;
        }
        Ok(cqe)
    }

    /// Waits up to `timeout` for the answer to `slot`'s command: its CQE,
    /// or the error its status says.
    pub fn wait_for(&mut self, slot: u16, what: &'static str, timeout: Duration) -> Result<Cqe, HostError> {
        let deadline = Instant::now() + timeout;
        let mut done = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(HostError::Timeout(what));
            }
            self.poll(left.min(Duration::from_millis(100)), &mut done)?;
            if let Some(d) = done.iter().find(|d| d.slot == slot) {
                if !d.cqe.status.is_success() {
                    return Err(HostError::Status { command: what, status: d.cqe.status });
                }
                return Ok(d.cqe);
            }
        }
    }

    /// Disconnects the connection (DREQ) and moves the QP to ERR.
    pub fn disconnect(&mut self) {
        let _ = self.conn.disconnect();
    }
}

/// A zeroed SQE with `opcode` and `nsid`.
pub fn sqe(opcode: u8, nsid: u32) -> [u8; SQE_LEN] {
    let mut b = [0u8; SQE_LEN];
    let mut v = Sqe::new_checked(&mut b[..]).expect("64 bytes");
    v.set_opcode(opcode);
    v.set_nsid(nsid);
    b
}
