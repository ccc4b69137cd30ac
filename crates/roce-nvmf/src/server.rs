//! The target on a roce device: an RDMA CM listener (NVMe/RDMA's port,
//! 4420 by default) and one thread per connection, each driving one
//! [`Queue`] with the verbs the binding prescribes (RDMA Transport 1.0,
//! 3.3): capsules arrive as SENDs into posted receives, host data is
//! pulled by RDMA READ and pushed by RDMA WRITE, and every response is a
//! SEND (WITH INVALIDATE when the host's key allows it).
//!
//! A namespace in the device's memory ([`DeviceMem`](crate::namespace::DeviceMem))
//! is registered with each connection's protection domain, and its blocks
//! go to and come from the host by RDMA with no copy ([`Queue::reach`]).
//! Otherwise data is copied once between the command's registered slot
//! and a buffer of the thread's own, so that a namespace's file I/O never
//! runs under the device's lock (which the NIC needs for every packet).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce::cm::{AcceptOpts, CmEvent, Connection, Listener, ReqInfo};
use roce::{alloc_buffer, Access, Device, Mr, Qp, RecvWr, SendOp, SendWr, Wc, WcOpcode, WcStatus};

use crate::rdma::Spin;
use crate::target::{Place, Queue, Response, Step, Target};
use crate::wire::fabrics::{rej_private, rej_status, RepPrivate, ReqPrivate};

/// Where the server's messages go (a line each).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// How long an accepted connection may take to send its RTU.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the loops look at the stop flag and the keep-alive clock.
const TICK: Duration = Duration::from_millis(50);

/// Serves `target` on `dev`'s address, RDMA CM port `port`, until `stop`
/// is set. Connections run on threads of their own; this returns after
/// they have ended.
pub fn serve(dev: &Device, target: Arc<Target>, port: u16, stop: &AtomicBool, log: Log) -> roce::Result<()> {
    let listener = Listener::bind(dev, port)?;
    let epoch = Instant::now();
    let stop_all = Arc::new(AtomicBool::new(false));
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let now = epoch.elapsed().as_nanos() as u64;
        for id in target.expire(now) {
            log(&format!("controller {id}: keep-alive expired, its queues disconnect"));
        }
        conns.retain(|h| !h.is_finished());
        let (id, req) = match listener.next_request(Some(TICK)) {
            Ok(r) => r,
            Err(roce::Error::Timeout(_)) => continue,
            Err(e) => break Err(e),
        };
        let peer = SocketAddr::new(req.src_ip, req.src_port);
        let Some(p) = ReqPrivate::parse(&req.private_data) else {
            log(&format!("{peer}: no NVMe/RDMA private data in the request: rejected"));
            let _ = dev.cm_reject(id, &rej_private(rej_status::INVALID_PRIVATE_DATA_LENGTH));
            continue;
        };
        let queue = match Queue::accept(target.clone(), &p) {
            Ok(q) => q,
            Err(sts) => {
                log(&format!("{peer}: queue {} refused ({p:?}): reject status {sts}", p.qid));
                let _ = dev.cm_reject(id, &rej_private(sts));
                continue;
            }
        };
        match QueueConn::accept(dev, &listener, id, req, queue, &target, &log) {
            Ok(c) => {
                let stop = stop_all.clone();
                let clog = log.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("nvmf-q{}", c.queue.qid()))
                    .spawn(move || c.run(epoch, &stop, &clog));
                match spawned {
                    Ok(h) => conns.push(h),
                    Err(e) => log(&format!("{peer}: no thread for the connection: {e}")),
                }
            }
            Err(e) => log(&format!("{peer}: queue {} not established: {e}", p.qid)),
        }
    };
    stop_all.store(true, Ordering::Relaxed);
    for h in conns {
        let _ = h.join();
    }
    result
}

/// What a work request's ID says: kind in the high half, slot in the low.
const WR_RECV: u64 = 1 << 32;
const WR_READ: u64 = 2 << 32;
const WR_SEND: u64 = 3 << 32;
const WR_WRITE: u64 = 4 << 32;

/// A command waiting for its RDMA READ.
struct Pending {
    capsule: Vec<u8>,
    len: usize,
    /// Where the READ puts the data.
    into: Place,
}

/// One connection: its QP, receive slots, data slots and queue.
struct QueueConn {
    conn: Connection,
    queue: Queue,
    recv_mr: Mr,
    data_mr: Mr,
    capsule_len: usize,
    buffer_len: usize,
    /// Commands run on their registered data slot, not on a scratch
    /// buffer copied to or from it (every namespace in memory: see
    /// `Backend::never_blocks`).
    in_place: bool,
    spin: Spin,
    /// Data slots not in use (one per command the host may have out).
    free: Vec<usize>,
    pending: Vec<Option<Pending>>,
    /// Commands that came before a slot was free (in order).
    waiting: VecDeque<Vec<u8>>,
    /// The regions of namespaces whose memory the NIC reaches
    /// (`Backend::region`), by subsystem and namespace index, registered
    /// with this connection's protection domain (the queue is told:
    /// `Queue::reach`).
    regions: HashMap<(usize, usize), Mr>,
    /// Work requests made by one batch of completions, posted together
    /// after it (`post`): one lock and one flush for the batch, so the
    /// data WRITEs and responses of several commands leave in one
    /// `sendmmsg`, as a NIC's doorbell covers a list of WQEs.
    outbox: Vec<(SendWr, Option<Vec<u8>>)>,
}

impl QueueConn {
    fn accept(
        dev: &Device,
        l: &Listener,
        id: roce::cm::CmId,
        req: ReqInfo,
        mut queue: Queue,
        target: &Target,
        log: &Log,
    ) -> roce::Result<QueueConn> {
        let entries = usize::from(queue.crqsize());
        // The target only starts RDMA READs and WRITEs: no remote access.
        let (pd, qp) = crate::rdma::capsule_qp(dev, entries, Access::NONE)?;
        let capsule_len = queue.capsule_len();
        let buffer_len = queue.buffer_len();
        let recv_mr = pd.reg_mr(alloc_buffer(entries * capsule_len), Access::LOCAL_WRITE)?;
        let data_mr = pd.reg_mr(alloc_buffer(entries * buffer_len), Access::LOCAL_WRITE)?;
        let mut regions = HashMap::new();
        for (s, sub) in target.config().subsystems.iter().enumerate() {
            for (n, ns) in sub.namespaces.iter().enumerate() {
                let Some(buf) = ns.backend.region() else { continue };
                match pd.reg_mr(buf.clone(), Access::LOCAL_WRITE) {
                    Ok(mr) => {
                        regions.insert((s, n), mr);
                        queue.reach(s, n);
                    }
                    // Memory of another device: its blocks go through the
                    // data slots instead.
                    Err(e) => log(&format!(
                        "namespace {} of {}: not reachable by RDMA from this device ({e}): copied",
                        n + 1,
                        sub.nqn
                    )),
                }
            }
        }
        // Receives are posted before the REP leaves: the host may send its
        // Connect as soon as it has the REP.
        for i in 0..entries {
            post_recv(&qp, &recv_mr, capsule_len, i)?;
        }
        let opts = AcceptOpts {
            private_data: RepPrivate { recfmt: 0, crqsize: queue.crqsize() }.emit().to_vec(),
            // The host never reads from us (its REQ's initiator depth is
            // 0); we read its data at most as deep as it lets us.
            responder_resources: req.initiator_depth.min(16),
            initiator_depth: req.responder_resources.min(16),
            rnr_retry_count: 7,
        };
        let conn = l.accept_request(id, req, qp, &opts, Some(ESTABLISH_TIMEOUT))?;
        Ok(QueueConn {
            in_place: queue.never_blocks(),
            spin: Spin::default(),
            conn,
            queue,
            recv_mr,
            data_mr,
            capsule_len,
            buffer_len,
            free: (0..entries).rev().collect(),
            pending: (0..entries).map(|_| None).collect(),
            waiting: VecDeque::new(),
            regions,
            outbox: Vec::new(),
        })
    }

    fn qp(&self) -> &Qp {
        self.conn.qp()
    }

    /// Serves commands until the host disconnects, the controller goes,
    /// or `stop`.
    fn run(mut self, epoch: Instant, stop: &AtomicBool, log: &Log) {
        let peer = self.conn.peer();
        let qid = self.queue.qid();
        let mut scratch = vec![0u8; self.buffer_len];
        let mut wcs = [Wc::EMPTY; 32];
        let why = 'outer: loop {
            if stop.load(Ordering::Relaxed) {
                break "the target stops".to_string();
            }
            // A host's Disconnect is answered before the QP goes (its
            // response's completion frees the last slot).
            if self.queue.wants_disconnect() && self.free.len() == self.pending.len() {
                break "the host asked to disconnect".to_string();
            }
            if !self.queue.alive() && !self.queue.wants_disconnect() {
                break "its controller is gone".to_string();
            }
            while let Some(ev) = self.conn.try_event() {
                if matches!(ev, CmEvent::Disconnected { .. }) {
                    break 'outer "the host disconnected".to_string();
                }
            }
            // With responses outstanding the thread spins a little first.
            let busy = || self.free.len() < self.pending.len();
            let qp = self.conn.qp();
            let n = match self.spin.next_completions(qp.recv_cq(), qp.qpn(), busy, &mut wcs, TICK) {
                Ok(n) => n,
                Err(e) => break format!("the completion queue failed: {e}"),
            };
            for wc in &wcs[..n] {
                let now = epoch.elapsed().as_nanos() as u64;
                if let Err(e) = self.completion(wc, now, &mut scratch) {
                    break 'outer e;
                }
            }
            if let Err(e) = self.post() {
                break e;
            }
        };
        log(&format!("{peer}: queue {qid} of controller {:?} ends: {why}", self.queue.cntlid()));
        self.queue.close();
        let _ = self.conn.disconnect();
    }

    fn completion(&mut self, wc: &Wc, now: u64, scratch: &mut [u8]) -> Result<(), String> {
        if wc.status != WcStatus::Success {
            return Err(if wc.status == WcStatus::WrFlushErr {
                "the QP was flushed".to_string()
            } else {
                format!("a work request failed: {:?} (wr {:#x})", wc.status, wc.wr_id)
            });
        }
        let slot = (wc.wr_id & 0xffff_ffff) as usize;
        match wc.wr_id & !0xffff_ffff {
            WR_RECV if wc.opcode == WcOpcode::Recv => {
                let len = (wc.byte_len as usize).min(self.capsule_len);
                let mut capsule = vec![0u8; len];
                self.recv_mr
                    .read(slot * self.capsule_len, &mut capsule)
                    .map_err(|e| format!("receive slot: {e}"))?;
                post_recv(self.qp(), &self.recv_mr, self.capsule_len, slot)
                    .map_err(|e| format!("reposting a receive: {e}"))?;
                // A slot is freed when its response's SEND completes, which
                // takes the host's ACK: a host may have the response, and
                // send its next command, first (an ACK late or lost). The
                // command waits for the slot; more than a queue's worth
                // waiting is a host that ignores its queue size.
                let Some(d) = self.free.pop() else {
                    if self.waiting.len() >= self.pending.len() {
                        return Err("the host sent more commands than its queue holds".to_string());
                    }
                    self.waiting.push_back(capsule);
                    return Ok(());
                };
                let step = self.command(d, now, &capsule, scratch)?;
                self.step(d, capsule, step, scratch)
            }
            WR_READ => {
                let p = self.pending[slot].take().ok_or("a READ completed for no command".to_string())?;
                let step = self.data_in(slot, now, &p, scratch)?;
                self.step(slot, p.capsule, step, scratch)
            }
            WR_SEND => {
                self.free.push(slot);
                self.drain(now, scratch)
            }
            _ => Ok(()),
        }
    }

    /// Commands that waited for a slot, in order, while slots are free.
    fn drain(&mut self, now: u64, scratch: &mut [u8]) -> Result<(), String> {
        while !self.waiting.is_empty() {
            let Some(d) = self.free.pop() else { break };
            let capsule = self.waiting.pop_front().expect("not empty");
            let step = self.command(d, now, &capsule, scratch)?;
            self.step(d, capsule, step, scratch)?;
        }
        Ok(())
    }

    /// Runs a received command with slot `d` as its data buffer: the
    /// registered slot itself when `in_place` (a read's blocks copied once,
    /// from the namespace to where the WRITE sends them from), else
    /// `scratch`, which `step` copies to the slot.
    fn command(&mut self, d: usize, now: u64, capsule: &[u8], scratch: &mut [u8]) -> Result<Step, String> {
        if !self.in_place {
            return Ok(self.queue.command(now, capsule, scratch));
        }
        let (mr, queue) = (&self.data_mr, &mut self.queue);
        mr.with_bytes_mut(d * self.buffer_len, self.buffer_len, |slot| queue.command(now, capsule, slot))
            .map_err(|e| format!("data slot: {e}"))
    }

    /// Runs a command whose data an RDMA READ brought into slot `d`: read
    /// in place when `in_place`, else through `scratch`. Data the READ
    /// put straight into a namespace is already where it goes.
    fn data_in(&mut self, d: usize, now: u64, p: &Pending, scratch: &mut [u8]) -> Result<Step, String> {
        let at = d * self.buffer_len;
        if p.into != Place::Buffer {
            return Ok(self.queue.data_placed(now, &p.capsule));
        }
        if self.in_place {
            let (mr, queue) = (&self.data_mr, &mut self.queue);
            return mr
                .with_bytes(at, p.len, |data| queue.data_in(now, &p.capsule, data))
                .map_err(|e| format!("data slot: {e}"));
        }
        self.data_mr.read(at, &mut scratch[..p.len]).map_err(|e| format!("data slot: {e}"))?;
        Ok(self.queue.data_in(now, &p.capsule, &scratch[..p.len]))
    }

    fn step(&mut self, d: usize, capsule: Vec<u8>, step: Step, scratch: &[u8]) -> Result<(), String> {
        let at = (d * self.buffer_len) as u64;
        match step {
            Step::Respond(r) => self.respond(d, r),
            Step::Fetch { addr, key, len, into } => {
                self.pending[d] = Some(Pending { capsule, len: len as usize, into });
                let sge = self.sge(into, at, len)?;
                let wr =
                    SendWr::new(WR_READ | d as u64, SendOp::Read { remote_addr: addr, rkey: key }, vec![sge]);
                self.outbox.push((wr, None));
                Ok(())
            }
            Step::Deliver { addr, key, len, from, response } => {
                if len > 0 {
                    if from == Place::Buffer && !self.in_place {
                        self.data_mr
                            .write(at as usize, &scratch[..len as usize])
                            .map_err(|e| format!("data slot: {e}"))?;
                    }
                    let sge = self.sge(from, at, len)?;
                    let mut wr = SendWr::new(
                        WR_WRITE | d as u64,
                        SendOp::Write { remote_addr: addr, rkey: key },
                        vec![sge],
                    );
                    // The response's completion says the WRITE is done (RC
                    // completes in order).
                    wr.signaled = false;
                    self.outbox.push((wr, None));
                }
                self.respond(d, response)
            }
            // Its slot is free; a waiting command takes it at the next
            // completion (`drain`).
            Step::Parked => {
                self.free.push(d);
                Ok(())
            }
            Step::Fatal(why) => Err(why.to_string()),
        }
    }

    /// The SGE for `len` bytes at `place`: the command's slot (at `at`) or
    /// a namespace's region registered here (the only namespaces the queue
    /// names: `Queue::reach`).
    fn sge(&self, place: Place, at: u64, len: u32) -> Result<roce::Sge, String> {
        match place {
            Place::Buffer => Ok(self.data_mr.sge(at, len)),
            Place::Namespace { subsys, ns, offset } => match self.regions.get(&(subsys, ns)) {
                Some(mr) => Ok(mr.sge(offset, len)),
                None => Err(format!("namespace {} of subsystem {subsys} is not registered here", ns + 1)),
            },
        }
    }

    fn respond(&mut self, d: usize, r: Response) -> Result<(), String> {
        let op = match r.invalidate {
            Some(rkey) => SendOp::SendWithInv { rkey },
            None => SendOp::Send,
        };
        // Inline: the SGE gives the length only (its address and key are
        // not read; the 16 bytes are copied at post time).
        let cqe = r.cqe.emit();
        let sge = roce::Sge { addr: 0, length: cqe.len() as u32, lkey: 0 };
        let mut wr = SendWr::new(WR_SEND | d as u64, op, vec![sge]);
        wr.inline = true;
        self.outbox.push((wr, Some(cqe.to_vec())));
        Ok(())
    }

    /// Posts what the last batch of completions made, in order.
    fn post(&mut self) -> Result<(), String> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        let r = self.conn.qp().post_send_each(self.outbox.drain(..));
        r.map_err(|(_, e)| format!("posting a work request: {e}"))
    }
}

fn post_recv(qp: &Qp, mr: &Mr, len: usize, slot: usize) -> roce::Result<()> {
    qp.post_recv(RecvWr {
        wr_id: WR_RECV | slot as u64,
        sg_list: vec![mr.sge((slot * len) as u64, len as u32)],
    })
}
