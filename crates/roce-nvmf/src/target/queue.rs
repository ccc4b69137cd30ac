//! One queue pair of a controller (one RDMA connection): capsules in,
//! [`Step`]s out.

use std::collections::HashSet;
use std::sync::Arc;

pub use super::command::Place;
use super::command::{Cmd, Outcome, QueueState};
use super::{admin, io, Target};
use crate::wire::fabrics::{rej_status, ReqPrivate};
use crate::wire::{admin as op, Cqe, Sgl, Sqe, Status, SQE_LEN};

/// A response capsule and how to send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub cqe: Cqe,
    /// SEND WITH INVALIDATE of this key (the host's keyed SGL had sub
    /// type "invalidate", RDMA Transport 1.0, 3.3); plain SEND if `None`.
    pub invalidate: Option<u32>,
}

/// What the driver does with a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send this response; the command is over.
    Respond(Response),
    /// Pull `len` bytes of the host's memory (`addr`, `key`) by RDMA READ
    /// `into` the command's buffer, then call [`Queue::data_in`] with the
    /// same capsule, or into a namespace, then call [`Queue::data_placed`].
    /// (RDMA Transport 1.0, 3.3: the controller moves all data;
    /// host-to-controller data by RDMA READ.)
    Fetch { addr: u64, key: u32, len: u32, into: Place },
    /// RDMA WRITE `len` bytes `from` the command's buffer (its first
    /// bytes) or a namespace to the host's memory (`addr`, `key`), then
    /// send `response` on the same QP (ordered after the WRITE, as the
    /// binding requires).
    Deliver { addr: u64, key: u32, len: u32, from: Place, response: Response },
    /// Held (an Asynchronous Event Request): no response until an event
    /// or the queue's end.
    Parked,
    /// Not a capsule this queue can answer (shorter than an SQE): Linux
    /// nvmet treats it as fatal to the connection, and so does the driver.
    Fatal(&'static str),
}

/// One NVMe queue pair on one RDMA connection.
pub struct Queue {
    st: QueueState,
    received: u32,
}

impl Queue {
    /// A queue for a connection request whose NVMe/RDMA private data is
    /// `req` (RDMA Transport 1.0, 3.1), or the REJ status to refuse it
    /// with (Fig. 7), checked as Linux nvmet checks it.
    pub fn accept(target: Arc<Target>, req: &ReqPrivate) -> Result<Queue, u16> {
        let entries = u32::from(req.hsqsize) + 1;
        if req.recfmt != 0 {
            return Err(rej_status::INVALID_RECFMT);
        }
        if req.qid > target.cfg.max_io_queues {
            return Err(rej_status::INVALID_QID);
        }
        let max = if req.qid == 0 { 32 } else { u32::from(target.cfg.max_queue_entries) };
        if entries > max || req.hsqsize == 0 {
            return Err(rej_status::INVALID_HSQSIZE);
        }
        if req.hrqsize == 0 {
            return Err(rej_status::INVALID_HRQSIZE);
        }
        Ok(Queue {
            st: QueueState {
                target,
                qid: req.qid,
                entries: entries as u16,
                cntlid: None,
                disconnect: false,
                direct: HashSet::new(),
            },
            received: 0,
        })
    }

    pub fn qid(&self) -> u16 {
        self.st.qid
    }

    /// The driver reaches namespace index `ns` of subsystem index `subsys`
    /// by RDMA on this connection (it registered the namespace's
    /// [`region`](crate::namespace::Backend::region)): Reads and Writes of
    /// it name it as their data's place ([`Place::Namespace`]). Others go
    /// through the command's buffer.
    pub fn reach(&mut self, subsys: usize, ns: usize) {
        self.st.direct.insert((subsys, ns));
    }

    /// The REP's CRQSIZE: receive buffers the driver must keep posted.
    pub fn crqsize(&self) -> u16 {
        self.st.entries
    }

    /// The controller this queue belongs to, once connected.
    pub fn cntlid(&self) -> Option<u16> {
        self.st.cntlid
    }

    /// Bytes a receive buffer must hold: an SQE, plus in-capsule data on
    /// I/O queues (admin and fabrics capsules carry none).
    pub fn capsule_len(&self) -> usize {
        SQE_LEN + if self.st.qid == 0 { 0 } else { self.st.target.cfg.in_capsule as usize }
    }

    /// Whether no command of this queue can wait for a disk (every
    /// namespace in memory): [`Queue::command`] and [`Queue::data_in`] may
    /// then run on the registered data slot itself.
    pub fn never_blocks(&self) -> bool {
        self.st.target.never_blocks()
    }

    /// Bytes a command's data buffer must hold.
    pub fn buffer_len(&self) -> usize {
        self.st.target.cfg.max_transfer as usize
    }

    /// False once the controller is gone (keep-alive lapsed, or its admin
    /// queue closed): the driver disconnects.
    pub fn alive(&self) -> bool {
        self.st.cntlid.is_none_or(|c| self.st.target.is_alive(c)) && !self.st.disconnect
    }

    /// The host asked to end this queue (a Fabrics Disconnect).
    pub fn wants_disconnect(&self) -> bool {
        self.st.disconnect
    }

    /// A received capsule (`bytes`: the SQE and any in-capsule data), with
    /// the command's data buffer (at least [`Queue::buffer_len`] bytes).
    pub fn command(&mut self, now: u64, bytes: &[u8], buf: &mut [u8]) -> Step {
        let Some(sqe) = Sqe::new_checked(bytes) else {
            self.st.target.lock().stats.malformed += 1;
            return Step::Fatal("capsule shorter than 64 bytes");
        };
        self.received = self.received.wrapping_add(1);
        self.st.target.lock().stats.commands += 1;
        if sqe.fuse() != 0 || sqe.psdt() != 1 {
            // NVMe-oF commands use one SGL and no fused pairs (1.1, 2.1).
            self.st.target.lock().stats.malformed += 1;
            return self.finish(&sqe, None, Outcome::err(Status::INVALID_FIELD));
        }
        let sgl = match Sgl::parse(sqe.dptr()) {
            Ok(s) => s,
            Err(e) => {
                self.st.target.lock().stats.malformed += 1;
                return self.finish(&sqe, None, Outcome::err(e.status()));
            }
        };
        let data = match sgl {
            Sgl::Keyed { .. } => None,
            Sgl::InCapsule { offset, len } => {
                // In-capsule data only on I/O queues, within what came
                // (ICDOFF is 0: the offset counts from the SQE's end).
                let have = bytes.len() - SQE_LEN;
                let fits = offset.checked_add(u64::from(len)).is_some_and(|end| end <= have as u64);
                if self.st.qid == 0 || !fits || len > self.st.target.cfg.in_capsule {
                    return self.finish(&sqe, Some(sgl), Outcome::err(Status::DATA_SGL_LENGTH_INVALID));
                }
                Some(&bytes[SQE_LEN + offset as usize..][..len as usize])
            }
        };
        let cmd = Cmd { sqe, sgl_len: sgl.len(), data, placed: false, now };
        let out = self.dispatch(&cmd, buf);
        self.finish(&cmd.sqe, Some(sgl), out)
    }

    /// The host's data for a command that asked for it ([`Step::Fetch`]):
    /// `bytes` is the same capsule, `data` what the RDMA READ brought.
    pub fn data_in(&mut self, now: u64, bytes: &[u8], data: &[u8]) -> Step {
        let Some(sqe) = Sqe::new_checked(bytes) else {
            return Step::Fatal("capsule shorter than 64 bytes");
        };
        let sgl = Sgl::parse(sqe.dptr()).ok();
        let cmd = Cmd { sqe, sgl_len: sgl.map_or(0, |s| s.len()), data: Some(data), placed: false, now };
        // Commands that take the host's data send none back.
        let out = self.dispatch(&cmd, &mut []);
        self.finish(&cmd.sqe, sgl, out)
    }

    /// The host's data for a command whose [`Step::Fetch`] named a
    /// namespace is there: `bytes` is the same capsule. The command is
    /// checked again as it was (the controller may have gone meanwhile)
    /// and finished without touching the data.
    pub fn data_placed(&mut self, now: u64, bytes: &[u8]) -> Step {
        let Some(sqe) = Sqe::new_checked(bytes) else {
            return Step::Fatal("capsule shorter than 64 bytes");
        };
        let sgl = Sgl::parse(sqe.dptr()).ok();
        let cmd = Cmd { sqe, sgl_len: sgl.map_or(0, |s| s.len()), data: None, placed: true, now };
        let out = self.dispatch(&cmd, &mut []);
        self.finish(&cmd.sqe, sgl, out)
    }

    fn dispatch(&mut self, cmd: &Cmd<'_>, buf: &mut [u8]) -> Outcome {
        if cmd.sqe.opcode() == op::FABRICS {
            return admin::fabrics(&mut self.st, cmd);
        }
        let Some(cntlid) = self.st.cntlid else {
            // Only Connect may come first on a queue (NVMe-oF 1.1, 3.3).
            return Outcome::err(Status::COMMAND_SEQUENCE_ERROR);
        };
        // One look at the controller per command: alive, its activity
        // stamped (traffic keeps it), ready, and which subsystem.
        let (ready, subsys) = {
            let mut st = self.st.target.lock();
            match st.ctrls.get_mut(&cntlid) {
                None => return Outcome::err(Status::ABORTED_SQ_DELETION),
                Some(c) => {
                    c.last_activity_ns = cmd.now;
                    (c.csts & 1 != 0, c.subsys)
                }
            }
        };
        if self.st.qid == 0 {
            admin::admin(&mut self.st, cntlid, ready, cmd, buf)
        } else if !ready {
            Outcome::err(Status::COMMAND_SEQUENCE_ERROR)
        } else {
            io::io(&mut self.st, subsys, cmd, buf)
        }
    }

    fn finish(&mut self, sqe: &Sqe<&[u8]>, sgl: Option<Sgl>, out: Outcome) -> Step {
        let cqe = |status: Status, dw0: u32, dw1: u32| Cqe {
            dw0,
            dw1,
            // The host's flow control (RDMA Transport 1.0, 3.4): the head
            // moves one entry per command received.
            sqhd: (self.received % u32::from(self.st.entries)) as u16,
            sqid: self.st.qid,
            cid: sqe.cid(),
            status,
        };
        let invalidate = match sgl {
            Some(Sgl::Keyed { key, invalidate: true, len, .. })
                if self.st.target.cfg.send_with_invalidate && len > 0 =>
            {
                Some(key)
            }
            _ => None,
        };
        let respond =
            |status: Status, dw0, dw1| Step::Respond(Response { cqe: cqe(status, dw0, dw1), invalidate });
        match out {
            Outcome::Done { status, dw0, dw1 } => {
                if !status.is_success() {
                    self.st.target.lock().stats.errors += 1;
                }
                respond(status, dw0, dw1)
            }
            Outcome::Park => Step::Parked,
            Outcome::NeedData { len, into } => match sgl {
                Some(Sgl::Keyed { addr, key, len: have, .. }) if have >= len && len > 0 => {
                    Step::Fetch { addr, key, len, into }
                }
                _ => {
                    self.st.target.lock().stats.errors += 1;
                    respond(Status::DATA_SGL_LENGTH_INVALID, 0, 0)
                }
            },
            Outcome::Deliver { len, dw0, from } => match sgl {
                Some(Sgl::Keyed { addr, key, len: have, .. }) if have >= len => Step::Deliver {
                    addr,
                    key,
                    len,
                    from,
                    response: Response { cqe: cqe(Status::SUCCESS, dw0, 0), invalidate },
                },
                _ => {
                    self.st.target.lock().stats.errors += 1;
                    respond(Status::DATA_SGL_LENGTH_INVALID, 0, 0)
                }
            },
        }
    }

    /// The connection ended: an admin queue takes its controller with it
    /// (and so its I/O queues); an I/O queue frees its QID. Parked
    /// requests die with the connection.
    pub fn close(&mut self) {
        let Some(cntlid) = self.st.cntlid.take() else { return };
        let mut st = self.st.target.lock();
        if self.st.qid == 0 {
            st.ctrls.remove(&cntlid);
        } else if let Some(c) = st.ctrls.get_mut(&cntlid) {
            c.io_queues.remove(&self.st.qid);
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.close();
    }
}
