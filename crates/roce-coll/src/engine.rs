//! The per-communicator state machine: one collective at a time, driven by
//! [`Engine::start`] then [`Engine::progress`] until [`Poll::Done`].
//!
//! The executor runs a [`crate::schedule`] chunk by chunk. A send chunk is
//! staged (header + payload copied into a staging slot, in place:
//! [`Transport::stage`]) and written with
//! an immediate as soon as its dependencies are done and a slot of the
//! peer is free on some channel (channels taken round-robin, so one
//! transfer spreads over all the QPs to that peer). A received chunk is
//! reduced (or copied) straight from the receive slot
//! ([`Transport::read_slot`]) into the working
//! buffer as soon as its dependencies are done; then the slot is released
//! to the sender with a credit. Messages from the same peer are matched by
//! the index in their header, so channels may reorder freely.

use std::collections::VecDeque;

use crate::cost::{self, Params};
use crate::deps::{self, Dep};
use crate::error::{Error, TransportError, Waiting};
use crate::header::{Header, Imm};
use crate::reduce;
use crate::schedule::{self, Schedule};
use crate::transport::{Completion, Layout, Transport};
use crate::types::{Algo, OpDesc, OpKind, RedOp};
use crate::HEADER_BYTES;

/// Configuration of one rank's engine. Every rank of a communicator must
/// use the same `size`, `layout` and `cost` (so `Algo::Auto` resolves the
/// same everywhere; the message header carries the resolved algorithm, so
/// ranks that resolve differently are refused, not mixed).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub rank: usize,
    pub size: usize,
    pub layout: Layout,
    /// A call fails with [`Error::Timeout`] when nothing arrives for it
    /// during this long (transport clock).
    pub timeout_ns: u64,
    /// Parameters of the cost model that resolves `Algo::Auto`.
    pub cost: Params,
}

impl Config {
    pub fn new(rank: usize, size: usize) -> Config {
        Config { rank, size, layout: Layout::DEFAULT, timeout_ns: 30_000_000_000, cost: Params::default() }
    }
}

/// The user's buffers for one call, passed to `start` and to every
/// `progress` of that call (the engine keeps no borrow between calls, so a
/// simulator can own them and a driver can lend them).
pub enum Buffers<'a> {
    /// One buffer, [`OpDesc::inplace_bytes`] long.
    InPlace(&'a mut [u8]),
    /// Separate buffers, [`OpDesc::send_bytes`] and [`OpDesc::recv_bytes`]
    /// long.
    OutOfPlace { send: &'a [u8], recv: &'a mut [u8] },
}

/// What `progress` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// The call finished; the result is in the buffers.
    Done,
    /// The call waits for completions. Call `progress` again when the
    /// transport has some, or at `deadline_ns` at the latest (the call then
    /// fails with [`Error::Timeout`] if still nothing came).
    Pending { deadline_ns: u64 },
}

/// Where the working buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// The user's receive buffer (or the single in-place buffer).
    User,
    /// The engine's scratch copy.
    Scratch,
}

/// Where all-to-all sends read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Src {
    UserSend,
    Scratch,
}

/// One slot of a `(peer, channel)`: free to write when the receiver
/// released it (`credit`) and our last write from its staging slot
/// completed (`idle`).
#[derive(Debug, Clone, Copy)]
struct SlotState {
    credit: bool,
    idle: bool,
    /// The schedule step of the last write from this slot.
    step: u32,
}

/// Per-peer link state, kept across calls (the slots are registered once).
struct Link {
    slots: Vec<Vec<SlotState>>,
    free: Vec<VecDeque<usize>>,
    next_ch: usize,
}

impl Link {
    fn new(l: &Layout) -> Link {
        Link {
            slots: vec![vec![SlotState { credit: true, idle: true, step: 0 }; l.slots]; l.channels],
            free: (0..l.channels).map(|_| (0..l.slots).collect()).collect(),
            next_ch: 0,
        }
    }
    fn release(&mut self, ch: usize, slot: usize, credit: bool) {
        let s = &mut self.slots[ch][slot];
        if credit {
            s.credit = true;
        } else {
            s.idle = true;
        }
        if s.credit && s.idle {
            self.free[ch].push_back(slot);
        }
    }
    /// A free slot on a channel of `lane`'s share (channels `c` with
    /// `c % stride == lane % stride`; `stride` 1: any), the channels taken
    /// in turn.
    fn take(&mut self, lane: usize, stride: usize) -> Option<(usize, usize)> {
        let nch = self.free.len();
        for k in 0..nch {
            let ch = (self.next_ch + k) % nch;
            if ch % stride != lane % stride {
                continue;
            }
            if let Some(slot) = self.free[ch].pop_front() {
                self.slots[ch][slot] = SlotState { credit: false, idle: false, step: 0 };
                self.next_ch = (ch + 1) % nch;
                return Some((ch, slot));
            }
        }
        None
    }
    fn all_credits(&self) -> bool {
        self.slots.iter().flatten().all(|s| s.credit)
    }
}

/// Progress of one transfer.
struct XState {
    chunks: usize,
    done: Vec<bool>,
    /// Chunks done from the start, contiguous.
    prefix: usize,
    deps: Vec<Dep>,
}

impl XState {
    fn complete(&self) -> bool {
        self.prefix == self.chunks
    }
    fn mark(&mut self, c: usize) {
        self.done[c] = true;
        while self.prefix < self.chunks && self.done[self.prefix] {
            self.prefix += 1;
        }
    }
}

/// A message that arrived and waits to be applied.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    msg: usize,
    ch: usize,
    slot: usize,
}

#[derive(Default)]
struct PeerQ {
    /// `(transfer, chunk)` by message index.
    items: Vec<(usize, usize)>,
    /// Sends: messages posted. Receives: messages arrived.
    cursor: usize,
    /// Sends: per lane, the next message to post and the end of the lane:
    /// one lane of all the messages, or one per transfer (see
    /// [`Run::stride`]).
    lanes: Vec<[usize; 2]>,
    pending: Vec<Arrival>,
    outstanding: usize,
}

/// The call in progress.
struct Run {
    desc: OpDesc,
    seq: u32,
    sched: Schedule,
    xs: Vec<XState>,
    chunk_elems: usize,
    sendq: Vec<PeerQ>,
    recvq: Vec<PeerQ>,
    /// Lanes of a send queue and their channels: with [`Schedule::lanes`]
    /// and at least that many channels, each transfer to a peer is a lane
    /// of its own and lane `i` sends on the channels `c` with
    /// `c % stride == i % stride`, so each transfer has its own QPs and its
    /// own share of the NIC, as every transfer to another peer has (NCCL
    /// gives each of its two trees channels of its own). Otherwise 1: one
    /// lane per peer, any channel.
    stride: usize,
    /// The peers this rank sends to / receives from in this call (2 in a
    /// ring, whatever `n`): progress scans only these.
    send_peers: Vec<usize>,
    recv_peers: Vec<usize>,
    remaining: usize,
    outstanding: usize,
    /// With [`Schedule::send_in_order`]: per step, its send messages not
    /// yet acknowledged; and the lowest step with some (sends of steps
    /// beyond the next one wait).
    step_sends: Vec<usize>,
    open_step: usize,
    last_activity: u64,
    work: Work,
    src: Src,
    /// Element ranges of an out-of-place all-reduce's result no receive
    /// writes, copied from the source when the call completes.
    copy_at_end: Vec<(usize, usize)>,
    header: Header,
}

/// One rank's collectives engine.
pub struct Engine {
    cfg: Config,
    links: Vec<Link>,
    /// Next call's sequence number.
    seq: u32,
    run: Option<Run>,
    /// Data messages of later calls that arrived early: `(peer, channel,
    /// slot, seq)`.
    stash: Vec<(usize, usize, usize, u32)>,
    scratch: Vec<u8>,
    src_scratch: Vec<u8>,
    comps: Vec<Completion>,
    failed: bool,
}

fn terr(desc: &OpDesc, seq: u32, e: TransportError) -> Error {
    Error::Transport { op: desc.op, seq, source: e }
}

impl Engine {
    /// Checks the configuration.
    pub fn new(cfg: Config) -> Result<Engine, Error> {
        if cfg.size == 0 || cfg.rank >= cfg.size {
            return Err(Error::InvalidArgument(format!(
                "rank {} out of a communicator of {}",
                cfg.rank, cfg.size
            )));
        }
        if cfg.size > u32::MAX as usize / 2 {
            return Err(Error::InvalidArgument(format!("communicator of {} ranks is too large", cfg.size)));
        }
        cfg.layout.validate().map_err(Error::InvalidArgument)?;
        let links = (0..cfg.size).map(|_| Link::new(&cfg.layout)).collect();
        Ok(Engine {
            cfg,
            links,
            seq: 0,
            run: None,
            stash: Vec::new(),
            scratch: Vec::new(),
            src_scratch: Vec::new(),
            comps: Vec::new(),
            failed: false,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The sequence number the next call will carry (calls are numbered
    /// from 0 on every rank in the order they are started).
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    /// Whether a call is in progress.
    pub fn busy(&self) -> bool {
        self.run.is_some()
    }

    /// Whether every slot this rank writes to has been released by its
    /// peer (nothing of ours is left in a peer's receive slots). Right
    /// after a call the last credits may still be in flight: they are
    /// taken in by the next call's `progress`.
    pub fn quiescent(&self) -> bool {
        self.run.is_none() && self.links.iter().all(Link::all_credits)
    }

    /// The algorithm `desc` runs with here (`Auto` resolved by the cost
    /// model with this engine's parameters).
    pub fn resolve(&self, desc: &OpDesc) -> Algo {
        if desc.algo != Algo::Auto {
            return desc.algo;
        }
        let bytes = desc.count * desc.dtype.size();
        cost::choose(desc.op, bytes, self.cfg.size, &self.cfg.cost)
    }

    /// Starts a call: checks the buffers against `desc`, resolves
    /// `Algo::Auto`, builds the schedule and does the local copies. Every
    /// rank must start the same calls in the same order.
    pub fn start<T: Transport>(
        &mut self,
        t: &mut T,
        desc: OpDesc,
        bufs: &mut Buffers<'_>,
    ) -> Result<(), Error> {
        if self.failed {
            return Err(Error::State("the communicator failed in an earlier call"));
        }
        if self.run.is_some() {
            return Err(Error::State("a call is already in progress on this communicator"));
        }
        let n = self.cfg.size;
        let rank = self.cfg.rank;
        let mut desc = desc;
        if desc.op.rooted() {
            if desc.root >= n {
                return Err(Error::InvalidArgument(format!(
                    "root {} out of a communicator of {n}",
                    desc.root
                )));
            }
        } else {
            desc.root = 0;
        }
        if !desc.op.reduces() {
            desc.redop = RedOp::Sum;
        }
        if desc.op == OpKind::Barrier {
            desc.count = 0;
        }
        if !desc.algo.applies_to(desc.op) {
            return Err(Error::InvalidArgument(format!("algorithm {} does not run {}", desc.algo, desc.op)));
        }
        desc.algo = self.resolve(&desc);
        if (desc.count as u128) * (n as u128) * (desc.dtype.size() as u128) > isize::MAX as u128 {
            return Err(Error::InvalidArgument(format!("count {} is too large", desc.count)));
        }
        let (sb, rb, ib) = (desc.send_bytes(n), desc.recv_bytes(n), desc.inplace_bytes(n));
        match bufs {
            Buffers::InPlace(b) if b.len() != ib => {
                return Err(Error::InvalidArgument(format!(
                    "{}: in-place buffer is {} bytes, the call needs {ib}",
                    desc.op,
                    b.len()
                )))
            }
            Buffers::OutOfPlace { send, recv } if send.len() != sb || recv.len() != rb => {
                return Err(Error::InvalidArgument(format!(
                    "{}: buffers are {} (send) and {} (receive) bytes, the call needs {sb} and {rb}",
                    desc.op,
                    send.len(),
                    recv.len()
                )))
            }
            _ => {}
        }
        let es = desc.dtype.size();
        let cb = desc.count * es;
        let (mut work, mut src) = (Work::User, Src::UserSend);
        let mut sched = if desc.count == 0 && desc.op != OpKind::Barrier {
            Schedule::default()
        } else {
            schedule::build(&desc, rank, n)
        };
        // Ranges of the working buffer left to copy from the source at the
        // end (out-of-place all-reduce, which reads the source until a
        // range is written instead of copying it all up front).
        let mut copy_at_end = Vec::new();
        match (desc.op, &mut *bufs) {
            (OpKind::AllReduce, Buffers::OutOfPlace { send, recv }) => match sched.source_first(desc.count) {
                Some(gaps) => copy_at_end = gaps,
                None => recv.copy_from_slice(send),
            },
            (OpKind::ReduceScatter, Buffers::OutOfPlace { send, .. }) => {
                self.scratch.clear();
                self.scratch.extend_from_slice(send);
                work = Work::Scratch;
            }
            (OpKind::AllGather, Buffers::OutOfPlace { send, recv }) => {
                recv[rank * cb..(rank + 1) * cb].copy_from_slice(send)
            }
            (OpKind::Broadcast, Buffers::OutOfPlace { send, recv }) if rank == desc.root => {
                recv.copy_from_slice(send)
            }
            (OpKind::Reduce, Buffers::OutOfPlace { send, recv }) if rank == desc.root => {
                recv.copy_from_slice(send)
            }
            (OpKind::Reduce, b) if rank != desc.root => {
                let input: &[u8] = match b {
                    Buffers::InPlace(x) => x,
                    Buffers::OutOfPlace { send, .. } => send,
                };
                self.scratch.clear();
                self.scratch.extend_from_slice(input);
                work = Work::Scratch;
            }
            (OpKind::AllToAll, Buffers::InPlace(b)) => {
                self.src_scratch.clear();
                self.src_scratch.extend_from_slice(b);
                src = Src::Scratch;
            }
            (OpKind::AllToAll, Buffers::OutOfPlace { send, recv }) => {
                recv[rank * cb..(rank + 1) * cb].copy_from_slice(&send[rank * cb..(rank + 1) * cb])
            }
            _ => {}
        }
        let seq = self.seq;
        let work_elems = match work {
            Work::Scratch => self.scratch.len() / es,
            Work::User => match bufs {
                Buffers::InPlace(b) => b.len() / es,
                Buffers::OutOfPlace { recv, .. } => recv.len() / es,
            },
        };
        let deps = deps::compute(&sched, work_elems);
        let chunk_elems = (self.cfg.layout.slot_bytes - HEADER_BYTES) / es;
        let mut sendq: Vec<PeerQ> = (0..n).map(|_| PeerQ::default()).collect();
        let mut recvq: Vec<PeerQ> = (0..n).map(|_| PeerQ::default()).collect();
        let mut xs = Vec::with_capacity(sched.xfers.len());
        let mut remaining = 0;
        let mut step_sends = Vec::new();
        // Lanes: one per transfer to a peer where the schedule asks for
        // them and each can have channels of its own (the same stride on
        // every rank, so that every transfer has the same share of them).
        let stride = if sched.lanes > 1 && sched.lanes <= self.cfg.layout.channels { sched.lanes } else { 1 };
        for (i, (x, d)) in sched.xfers.iter().zip(deps).enumerate() {
            let chunks = x.len.div_ceil(chunk_elems).max(1);
            if sched.send_in_order && x.send {
                let st = x.step as usize;
                if step_sends.len() <= st {
                    step_sends.resize(st + 1, 0);
                }
                step_sends[st] += chunks;
            }
            let q = if x.send { &mut sendq[x.peer] } else { &mut recvq[x.peer] };
            let start = q.items.len();
            q.items.extend((0..chunks).map(|c| (i, c)));
            if x.send {
                match q.lanes.last_mut() {
                    Some(lane) if stride == 1 => lane[1] = q.items.len(),
                    _ => q.lanes.push([start, q.items.len()]),
                }
            }
            remaining += chunks;
            xs.push(XState { chunks, done: vec![false; chunks], prefix: 0, deps: d });
        }
        if sendq.iter().chain(recvq.iter()).any(|q| q.items.len() > u32::MAX as usize) {
            return Err(Error::InvalidArgument(format!(
                "{}: more than 2^32 messages to one peer; use larger slots",
                desc.op
            )));
        }
        self.seq = self.seq.wrapping_add(1);
        let now = t.now_ns();
        let send_peers = (0..n).filter(|&p| !sendq[p].items.is_empty()).collect();
        let recv_peers = (0..n).filter(|&p| !recvq[p].items.is_empty()).collect();
        self.run = Some(Run {
            send_peers,
            recv_peers,
            header: Header::for_call(&desc, seq, rank),
            desc,
            seq,
            sched,
            xs,
            chunk_elems,
            sendq,
            recvq,
            stride,
            remaining,
            outstanding: 0,
            open_step: step_sends.iter().position(|&c| c > 0).unwrap_or(step_sends.len()),
            step_sends,
            last_activity: now,
            work,
            src,
            copy_at_end,
        });
        // messages of this call that arrived during the previous one
        let stash = std::mem::take(&mut self.stash);
        for (peer, ch, slot, s) in stash {
            if s == seq {
                self.accept(t, peer, ch, slot)?;
            } else {
                self.stash.push((peer, ch, slot, s));
            }
        }
        Ok(())
    }

    /// Posts what can be posted and consumes completions, without
    /// blocking. After an error the communicator is unusable (its slots
    /// are in an unknown state): every later call fails.
    pub fn progress<T: Transport>(&mut self, t: &mut T, bufs: &mut Buffers<'_>) -> Result<Poll, Error> {
        if self.failed {
            return Err(Error::State("the communicator failed in an earlier call"));
        }
        if self.run.is_none() {
            return Err(Error::State("no call in progress"));
        }
        let r = self.step(t, bufs);
        if r.is_err() {
            self.failed = true;
            self.run = None;
        }
        r
    }

    fn step<T: Transport>(&mut self, t: &mut T, bufs: &mut Buffers<'_>) -> Result<Poll, Error> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let src_scratch = std::mem::take(&mut self.src_scratch);
        let r = self.step_inner(t, bufs, &mut scratch, &src_scratch);
        self.scratch = scratch;
        self.src_scratch = src_scratch;
        r
    }

    fn step_inner<T: Transport>(
        &mut self,
        t: &mut T,
        bufs: &mut Buffers<'_>,
        scratch: &mut [u8],
        src_scratch: &[u8],
    ) -> Result<Poll, Error> {
        let (work_sel, src_sel) = {
            let run = self.run.as_ref().unwrap();
            (run.work, run.src)
        };
        let done = {
            let (work, src): (&mut [u8], &[u8]) = match &mut *bufs {
                Buffers::InPlace(b) => {
                    (if work_sel == Work::Scratch { &mut *scratch } else { &mut **b }, src_scratch)
                }
                Buffers::OutOfPlace { send, recv } => (
                    if work_sel == Work::Scratch { &mut *scratch } else { &mut **recv },
                    if src_sel == Src::Scratch { src_scratch } else { *send },
                ),
            };
            loop {
                let mut moved = false;
                self.comps.clear();
                {
                    let run = self.run.as_ref().unwrap();
                    t.poll(&mut self.comps).map_err(|e| terr(&run.desc, run.seq, e))?;
                }
                if !self.comps.is_empty() {
                    moved = true;
                    self.run.as_mut().unwrap().last_activity = t.now_ns();
                }
                let comps = std::mem::take(&mut self.comps);
                for c in &comps {
                    self.completion(t, *c)?;
                }
                self.comps = comps;
                moved |= self.apply(t, work, src)?;
                moved |= self.post(t, work, src)?;
                if !moved {
                    break;
                }
            }
            let run = self.run.as_ref().unwrap();
            run.remaining == 0 && run.outstanding == 0
        };
        if done {
            let run = self.run.take().unwrap();
            let (n, rank) = (self.cfg.size, self.cfg.rank);
            match (bufs, run.work) {
                (Buffers::OutOfPlace { recv, .. }, Work::Scratch) => {
                    finish(&run, n, rank, scratch, Some(recv))
                }
                (Buffers::OutOfPlace { send, recv }, Work::User) => {
                    let es = run.desc.dtype.size();
                    for &(lo, hi) in &run.copy_at_end {
                        recv[lo * es..hi * es].copy_from_slice(&send[lo * es..hi * es]);
                    }
                    finish(&run, n, rank, recv, None)
                }
                (Buffers::InPlace(b), Work::User) => finish(&run, n, rank, b, None),
                (Buffers::InPlace(_), Work::Scratch) => finish(&run, n, rank, scratch, None),
            }
            return Ok(Poll::Done);
        }
        let run = self.run.as_ref().unwrap();
        let deadline = run.last_activity.saturating_add(self.cfg.timeout_ns);
        if t.now_ns() >= deadline {
            return Err(self.timeout(t.now_ns()));
        }
        Ok(Poll::Pending { deadline_ns: deadline })
    }

    fn completion<T: Transport>(&mut self, t: &mut T, c: Completion) -> Result<(), Error> {
        let n = self.cfg.size;
        let l = self.cfg.layout;
        match c {
            Completion::Sent { peer, channel, token } => {
                let run = self.run.as_mut().unwrap();
                let slot = token as usize;
                if peer >= n
                    || channel >= l.channels
                    || slot >= l.slots
                    || run.sendq[peer].outstanding == 0
                    || self.links[peer].slots[channel][slot].idle
                {
                    return Err(Error::Protocol {
                        op: run.desc.op,
                        seq: run.seq,
                        peer,
                        detail: format!("unexpected send completion (channel {channel}, token {token})"),
                    });
                }
                run.outstanding -= 1;
                run.sendq[peer].outstanding -= 1;
                if run.sched.send_in_order {
                    let st = self.links[peer].slots[channel][slot].step as usize;
                    run.step_sends[st] -= 1;
                    while run.open_step < run.step_sends.len() && run.step_sends[run.open_step] == 0 {
                        run.open_step += 1;
                    }
                }
                self.links[peer].release(channel, slot, false);
            }
            Completion::Arrived { peer, channel, imm } => {
                let run = self.run.as_ref().unwrap();
                let bad = |detail: String| Error::Protocol { op: run.desc.op, seq: run.seq, peer, detail };
                if peer >= n || peer == self.cfg.rank || channel >= l.channels {
                    return Err(bad(format!("arrival on unknown peer/channel ({peer}, {channel})")));
                }
                match Imm::parse(imm) {
                    Imm::Credit { slot } => {
                        if slot >= l.slots || self.links[peer].slots[channel][slot].credit {
                            return Err(bad(format!(
                                "credit for slot {slot} of channel {channel}, not in use"
                            )));
                        }
                        self.links[peer].release(channel, slot, true);
                    }
                    Imm::Data { seq15, slot } => {
                        if slot >= l.slots {
                            return Err(bad(format!("data in slot {slot}, beyond the {} slots", l.slots)));
                        }
                        let h =
                            slot_header(t, peer, channel, slot).map_err(|e| terr(&run.desc, run.seq, e))?;
                        let Some(h) = h else {
                            return Err(bad(format!(
                                "slot {slot} of channel {channel} holds no valid header"
                            )));
                        };
                        if h.seq & 0x7fff != seq15 || h.sender as usize != peer {
                            return Err(bad(format!(
                                "header (call #{}, sender {}) does not match its immediate (call #{seq15} mod 2^15)",
                                h.seq, h.sender
                            )));
                        }
                        let ahead = h.seq.wrapping_sub(run.seq) as i32;
                        if ahead > 0 {
                            self.stash.push((peer, channel, slot, h.seq));
                        } else if ahead < 0 {
                            return Err(bad(format!(
                                "a message of call #{} arrived during call #{}: the ranks disagree on the calls",
                                h.seq, run.seq
                            )));
                        } else {
                            self.accept(t, peer, channel, slot)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Validates a message of the current call and queues it.
    fn accept<T: Transport>(&mut self, t: &mut T, peer: usize, ch: usize, slot: usize) -> Result<(), Error> {
        let run = self.run.as_mut().unwrap();
        let (op, seq) = (run.desc.op, run.seq);
        let h = slot_header(t, peer, ch, slot).map_err(|e| terr(&run.desc, seq, e))?;
        let Some(h) = h else {
            return Err(Error::Protocol { op, seq, peer, detail: format!("slot {slot} lost its header") });
        };
        if let Some((field, ours, theirs)) = run.header.mismatch(&h) {
            return Err(Error::Mismatch { op, seq, peer, field, ours, theirs });
        }
        let q = &mut run.recvq[peer];
        let msg = h.msg as usize;
        let bad = |detail: String| Error::Protocol { op, seq, peer, detail };
        let Some(&(x, c)) = q.items.get(msg) else {
            return Err(bad(format!("message {msg} beyond the {} expected from this peer", q.items.len())));
        };
        let xf = run.sched.xfers[x];
        let want = chunk_range(xf.off, xf.len, run.chunk_elems, c);
        // (steps are numbered per rank: the sender's says nothing here)
        if h.elems as usize != want.1 - want.0 {
            return Err(bad(format!(
                "message {msg} (sender's step {}) has {} elements, expected {}",
                h.step,
                h.elems,
                want.1 - want.0
            )));
        }
        if HEADER_BYTES + want.1.saturating_sub(want.0) * run.desc.dtype.size() > self.cfg.layout.slot_bytes {
            return Err(bad("message larger than a slot: the ranks use different layouts".into()));
        }
        q.cursor += 1;
        q.pending.push(Arrival { msg, ch, slot });
        Ok(())
    }

    /// Applies the arrived messages whose dependencies are done.
    fn apply<T: Transport>(&mut self, t: &mut T, work: &mut [u8], src: &[u8]) -> Result<bool, Error> {
        let run = self.run.as_mut().unwrap();
        let es = run.desc.dtype.size();
        let data = t.carries_data();
        let mut moved = false;
        for i in 0..run.recv_peers.len() {
            let peer = run.recv_peers[i];
            let mut i = 0;
            while i < run.recvq[peer].pending.len() {
                let a = run.recvq[peer].pending[i];
                let (x, c) = run.recvq[peer].items[a.msg];
                let xf = run.sched.xfers[x];
                let (lo, hi) = chunk_range(xf.off, xf.len, run.chunk_elems, c);
                if !ready(&run.xs, &run.sched, run.chunk_elems, &run.xs[x].deps, lo, hi) {
                    i += 1;
                    continue;
                }
                let dst = &mut work[lo * es..hi * es];
                // (a timing-only transport: the message is applied, its
                // values are not)
                if data && xf.init_from_src {
                    // the working buffer's first write here: its left
                    // operand is still the source's (a chunk-sized copy,
                    // in cache for the reduce that follows)
                    dst.copy_from_slice(&src[lo * es..hi * es]);
                }
                let (dtype, redop) = (run.desc.dtype, run.desc.redop);
                // straight out of the receive slot: no copy before the reduce
                if data {
                    t.read_slot(peer, a.ch, a.slot, &mut |b| {
                        let data = &b[HEADER_BYTES..HEADER_BYTES + dst.len()];
                        if xf.reduce {
                            reduce::reduce(dtype, redop, dst, data);
                        } else {
                            dst.copy_from_slice(data);
                        }
                    })
                    .map_err(|e| terr(&run.desc, run.seq, e))?;
                }
                run.xs[x].mark(c);
                run.remaining -= 1;
                run.recvq[peer].pending.swap_remove(i);
                t.notify(peer, a.ch, Imm::credit(a.slot)).map_err(|e| terr(&run.desc, run.seq, e))?;
                moved = true;
            }
        }
        Ok(moved)
    }

    /// Stages and posts the send chunks whose dependencies are done, in
    /// order per lane (a chunk of each lane of a peer in turn), while slots
    /// are free.
    fn post<T: Transport>(&mut self, t: &mut T, work: &[u8], src: &[u8]) -> Result<bool, Error> {
        let run = self.run.as_mut().unwrap();
        let es = run.desc.dtype.size();
        let data = t.carries_data();
        let mut moved = false;
        for i in 0..run.send_peers.len() {
            let peer = run.send_peers[i];
            // a chunk of each lane in turn, while one can go
            let lanes = run.sendq[peer].lanes.len();
            let (mut lane, mut idle_lanes) = (0, 0);
            while idle_lanes < lanes {
                let this = lane;
                lane = (lane + 1) % lanes;
                let [msg, end] = run.sendq[peer].lanes[this];
                if msg == end {
                    idle_lanes += 1;
                    continue;
                }
                let (x, c) = run.sendq[peer].items[msg];
                let xf = run.sched.xfers[x];
                let (lo, hi) = chunk_range(xf.off, xf.len, run.chunk_elems, c);
                let blocked = !ready(&run.xs, &run.sched, run.chunk_elems, &run.xs[x].deps, lo, hi)
                    || (run.sched.send_in_order && xf.step as usize > run.open_step + 1);
                let got = if blocked { None } else { self.links[peer].take(this, run.stride) };
                let Some((ch, slot)) = got else {
                    idle_lanes += 1;
                    continue;
                };
                idle_lanes = 0;
                self.links[peer].slots[ch][slot].step = xf.step;
                let mut h = run.header;
                h.msg = msg as u32;
                h.step = xf.step;
                h.elems = (hi - lo) as u32;
                let from = if xf.from_src { src } else { work };
                let len = (hi - lo) * es;
                let payload = &from[lo * es..hi * es];
                // straight into the staging slot the NIC sends from
                t.stage(peer, ch, slot, &mut |buf| {
                    h.write(buf);
                    if data {
                        buf[HEADER_BYTES..HEADER_BYTES + len].copy_from_slice(payload);
                    }
                })
                .map_err(|e| terr(&run.desc, run.seq, e))?;
                t.write(peer, ch, slot, HEADER_BYTES + len, Imm::data(run.seq, slot), slot as u64)
                    .map_err(|e| terr(&run.desc, run.seq, e))?;
                run.xs[x].mark(c);
                run.remaining -= 1;
                run.outstanding += 1;
                let q = &mut run.sendq[peer];
                q.outstanding += 1;
                q.cursor += 1;
                q.lanes[this][0] += 1;
                moved = true;
            }
        }
        Ok(moved)
    }

    /// The timeout error, naming the peer this rank waits on.
    fn timeout(&self, now: u64) -> Error {
        let run = self.run.as_ref().unwrap();
        let waited_ms = now.saturating_sub(run.last_activity) / 1_000_000;
        let mk = |peer: usize, waiting: Waiting| Error::Timeout {
            op: run.desc.op,
            seq: run.seq,
            peer,
            waiting,
            waited_ms,
        };
        // a peer whose data has not arrived (and nothing of it is waiting)
        let data_from = |need_idle: bool| {
            run.recvq
                .iter()
                .enumerate()
                .find(|(_, q)| q.cursor < q.items.len() && (!need_idle || q.pending.is_empty()))
        };
        if let Some((p, _)) = data_from(true).or_else(|| data_from(false)) {
            return mk(p, Waiting::Data);
        }
        for (p, q) in run.sendq.iter().enumerate() {
            if q.cursor < q.items.len() && self.links[p].free.iter().all(|f| f.is_empty()) {
                return mk(p, Waiting::Credit);
            }
        }
        let p =
            run.sendq.iter().position(|q| q.outstanding > 0).unwrap_or((self.cfg.rank + 1) % self.cfg.size);
        mk(p, Waiting::SendCompletion)
    }
}

/// Local work after the last message: reduce-scatter's copy out,
/// `avg`'s division.
fn finish(run: &Run, n: usize, rank: usize, work: &mut [u8], user_recv: Option<&mut [u8]>) {
    let d = &run.desc;
    let es = d.dtype.size();
    let cb = d.count * es;
    let result: Option<&mut [u8]> = match d.op {
        OpKind::AllReduce => Some(work),
        OpKind::ReduceScatter => Some(&mut work[rank * cb..(rank + 1) * cb]),
        OpKind::Reduce if rank == d.root => Some(work),
        _ => None,
    };
    if let Some(res) = result {
        if d.redop == RedOp::Avg {
            reduce::finish_avg(d.dtype, n, res);
        }
        if d.op == OpKind::ReduceScatter && run.work == Work::Scratch {
            if let Some(out) = user_recv {
                out.copy_from_slice(res);
            }
        }
    }
}

/// The header at the start of a receive slot (`None`: none valid).
fn slot_header<T: Transport>(
    t: &T,
    peer: usize,
    ch: usize,
    slot: usize,
) -> Result<Option<Header>, TransportError> {
    let mut h = None;
    t.read_slot(peer, ch, slot, &mut |b| h = Header::read(b))?;
    Ok(h)
}

/// Elements `[lo, hi)` of chunk `c` of a transfer.
fn chunk_range(off: usize, len: usize, ce: usize, c: usize) -> (usize, usize) {
    let lo = off + (c * ce).min(len);
    let hi = off + ((c + 1) * ce).min(len);
    (lo, hi)
}

/// Whether a chunk covering `[lo, hi)` may run: every dependency has done
/// the part that overlaps it.
fn ready(xs: &[XState], sched: &Schedule, ce: usize, deps: &[Dep], lo: usize, hi: usize) -> bool {
    deps.iter().all(|d| {
        let s = &xs[d.x];
        if s.complete() {
            return true;
        }
        if d.full {
            return false;
        }
        let x = &sched.xfers[d.x];
        let (xo, xe) = (x.off, x.off + x.len);
        if hi <= xo || lo >= xe {
            return true;
        }
        let need = hi.min(xe) - xo;
        (s.prefix * ce).min(x.len) >= need
    })
}
