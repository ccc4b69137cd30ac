//! An in-memory transport: `n` ranks in one process, messages delivered by
//! a deterministic scheduler. Public so that other crates' tests (the
//! `roce` driver's, the fabric simulator's) can use it.
//!
//! Each message (data write, credit, send completion) gets a delivery
//! time `now + delay`, the delay drawn from a seeded generator in
//! `[min_delay_ns, max_delay_ns]`, then pushed back if needed so that
//! messages of one QP keep their order, as RC guarantees; across QPs they
//! reorder freely. Per (source, destination, channel) there are two QPs,
//! as on the real transports: one carries data writes (and their send
//! completions come back in its order), the other credits, so a credit
//! may overtake data and data may overtake a credit. The
//! driver ([`Cluster::run`]) calls the ranks' `progress` in a seeded random
//! order and advances the virtual clock to the next delivery or deadline
//! when nothing moves, so a run is a pure function of the seed. A rank can
//! start late (`start_at_ns`) or stop answering (`stall`): it is then
//! never driven again, and the others' deadlines decide, with no sleeping.

use std::cell::RefCell;
use std::rc::Rc;

use crate::engine::{Buffers, Config, Engine, Poll};
use crate::error::{Error, TransportError};
use crate::transport::{Completion, Layout, Transport};
use crate::types::OpDesc;

/// The scheduler's knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfig {
    pub seed: u64,
    pub min_delay_ns: u64,
    pub max_delay_ns: u64,
    /// Per rank: the time it enters the call (a late rank).
    pub start_at_ns: Vec<u64>,
    /// Ranks that stop being driven at the given time (a hung process).
    pub stall: Vec<(usize, u64)>,
    /// `(rank, k)`: the `k`-th data write (from 0) the rank posts arrives
    /// with its first byte flipped (a corrupt or foreign message).
    pub corrupt: Vec<(usize, u64)>,
}

impl NetConfig {
    pub fn new(seed: u64) -> NetConfig {
        NetConfig {
            seed,
            min_delay_ns: 1_000,
            max_delay_ns: 20_000,
            start_at_ns: Vec::new(),
            stall: Vec::new(),
            corrupt: Vec::new(),
        }
    }
}

enum Kind {
    Data { slot: usize, bytes: Vec<u8>, imm: u32 },
    Notify { imm: u32 },
    Sent { token: u64 },
}

struct Msg {
    at: u64,
    order: u64,
    src: usize,
    ch: usize,
    kind: Kind,
}

/// The shared state: clock, messages in flight.
pub struct Net {
    n: usize,
    now: u64,
    rng: u64,
    min_delay: u64,
    max_delay: u64,
    /// Messages in flight, per destination.
    queue: Vec<Vec<Msg>>,
    /// Last delivery time per QP (src, dst, channel, data or credit): RC
    /// order.
    last_at: Vec<u64>,
    channels: usize,
    order: u64,
    /// Bumped by every post and delivery: "something moved".
    pub activity: u64,
    corrupt: Vec<(usize, u64)>,
    /// Data writes posted, per rank.
    writes: Vec<u64>,
}

impl Net {
    fn rand(&mut self) -> u64 {
        // SplitMix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn delay(&mut self) -> u64 {
        let span = self.max_delay.saturating_sub(self.min_delay);
        self.min_delay + if span == 0 { 0 } else { self.rand() % (span + 1) }
    }

    fn push(&mut self, src: usize, dst: usize, ch: usize, kind: Kind) {
        let d = self.delay();
        let credit = usize::from(matches!(kind, Kind::Notify { .. }));
        let qp = ((src * self.n + dst) * self.channels + ch) * 2 + credit;
        let at = (self.now + d).max(self.last_at[qp]);
        self.last_at[qp] = at;
        self.order += 1;
        self.activity += 1;
        self.queue[dst].push(Msg { at, order: self.order, src, ch, kind });
    }

    /// The virtual clock, ns.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The next delivery in the future (messages already due but not
    /// polled, e.g. to a stalled rank, are no event).
    fn next_at(&self) -> Option<u64> {
        self.queue.iter().flatten().map(|m| m.at).filter(|&at| at > self.now).min()
    }
}

/// One rank's view: its own registered regions, the shared net.
pub struct MemTransport {
    rank: usize,
    layout: Layout,
    net: Rc<RefCell<Net>>,
    /// Per peer: channels x slots x slot_bytes.
    recv: Vec<Vec<u8>>,
    staging: Vec<Vec<u8>>,
}

impl MemTransport {
    fn range(&self, ch: usize, slot: usize) -> std::ops::Range<usize> {
        let o = (ch * self.layout.slots + slot) * self.layout.slot_bytes;
        o..o + self.layout.slot_bytes
    }
}

impl Transport for MemTransport {
    fn now_ns(&self) -> u64 {
        self.net.borrow().now
    }

    fn stage(
        &mut self,
        peer: usize,
        channel: usize,
        slot: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), TransportError> {
        let r = self.range(channel, slot);
        f(&mut self.staging[peer][r]);
        Ok(())
    }

    fn read_slot(
        &self,
        peer: usize,
        channel: usize,
        slot: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TransportError> {
        f(&self.recv[peer][self.range(channel, slot)]);
        Ok(())
    }

    fn write(
        &mut self,
        peer: usize,
        channel: usize,
        slot: usize,
        len: usize,
        imm: u32,
        token: u64,
    ) -> Result<(), TransportError> {
        if peer >= self.recv.len() || peer == self.rank || len > self.layout.slot_bytes {
            return Err(TransportError::new(Some(peer), format!("bad write: peer {peer}, {len} bytes")));
        }
        let r = self.range(channel, slot);
        let mut bytes = self.staging[peer][r][..len].to_vec();
        let mut net = self.net.borrow_mut();
        let k = net.writes[self.rank];
        net.writes[self.rank] += 1;
        if net.corrupt.contains(&(self.rank, k)) && !bytes.is_empty() {
            bytes[0] ^= 0xff;
        }
        net.push(self.rank, peer, channel, Kind::Data { slot, bytes, imm });
        // the acknowledgement comes back on the same QP's reverse path
        net.push(peer, self.rank, channel, Kind::Sent { token });
        Ok(())
    }

    fn notify(&mut self, peer: usize, channel: usize, imm: u32) -> Result<(), TransportError> {
        if peer >= self.recv.len() || peer == self.rank {
            return Err(TransportError::new(Some(peer), "bad notify"));
        }
        self.net.borrow_mut().push(self.rank, peer, channel, Kind::Notify { imm });
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<(), TransportError> {
        let mut net = self.net.borrow_mut();
        let now = net.now;
        let rank = self.rank;
        let mut mine: Vec<Msg> = Vec::new();
        let mut i = 0;
        let q = &mut net.queue[rank];
        while i < q.len() {
            if q[i].at <= now {
                mine.push(q.swap_remove(i));
            } else {
                i += 1;
            }
        }
        mine.sort_by_key(|m| (m.at, m.order));
        net.activity += mine.len() as u64;
        drop(net);
        for m in mine {
            match m.kind {
                Kind::Data { slot, bytes, imm } => {
                    let r = self.range(m.ch, slot);
                    self.recv[m.src][r][..bytes.len()].copy_from_slice(&bytes);
                    out.push(Completion::Arrived { peer: m.src, channel: m.ch, imm });
                }
                Kind::Notify { imm } => out.push(Completion::Arrived { peer: m.src, channel: m.ch, imm }),
                // pushed as (peer -> us): `src` is the peer written to
                Kind::Sent { token } => out.push(Completion::Sent { peer: m.src, channel: m.ch, token }),
            }
        }
        Ok(())
    }
}

/// A rank's owned buffers for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankBuffers {
    InPlace(Vec<u8>),
    OutOfPlace { send: Vec<u8>, recv: Vec<u8> },
}

impl RankBuffers {
    pub fn as_buffers(&mut self) -> Buffers<'_> {
        match self {
            RankBuffers::InPlace(b) => Buffers::InPlace(b),
            RankBuffers::OutOfPlace { send, recv } => Buffers::OutOfPlace { send, recv },
        }
    }

    /// The result: the receive buffer (or the in-place buffer).
    pub fn result(&self) -> &[u8] {
        match self {
            RankBuffers::InPlace(b) => b,
            RankBuffers::OutOfPlace { recv, .. } => recv,
        }
    }
}

/// `n` engines over one in-memory net.
pub struct Cluster {
    pub net: Rc<RefCell<Net>>,
    pub transports: Vec<MemTransport>,
    pub engines: Vec<Engine>,
    cfg: NetConfig,
}

impl Cluster {
    /// `base` gives the layout, timeout and cost parameters (its rank and
    /// size are replaced).
    pub fn new(n: usize, base: &Config, cfg: NetConfig) -> Result<Cluster, Error> {
        let l = base.layout;
        let net = Rc::new(RefCell::new(Net {
            n,
            now: 0,
            rng: cfg.seed,
            min_delay: cfg.min_delay_ns,
            max_delay: cfg.max_delay_ns.max(cfg.min_delay_ns),
            queue: (0..n).map(|_| Vec::new()).collect(),
            last_at: vec![0; n * n * l.channels * 2],
            channels: l.channels,
            order: 0,
            activity: 0,
            corrupt: cfg.corrupt.clone(),
            writes: vec![0; n],
        }));
        let region = l.channels * l.slots * l.slot_bytes;
        let mut transports = Vec::new();
        let mut engines = Vec::new();
        for r in 0..n {
            let per = |p: usize| if p == r { Vec::new() } else { vec![0u8; region] };
            transports.push(MemTransport {
                rank: r,
                layout: l,
                net: net.clone(),
                recv: (0..n).map(per).collect(),
                staging: (0..n).map(per).collect(),
            });
            engines.push(Engine::new(Config { rank: r, size: n, ..base.clone() })?);
        }
        Ok(Cluster { net, transports, engines, cfg })
    }

    fn stalled(&self, r: usize, now: u64) -> bool {
        self.cfg.stall.iter().any(|&(s, at)| s == r && now >= at)
    }

    /// Runs one call on every rank: rank `r` starts `descs[r]` with
    /// `bufs[r]`. Returns each rank's outcome, `None` for a rank that was
    /// stalled before it finished.
    pub fn run(&mut self, descs: &[OpDesc], bufs: &mut [RankBuffers]) -> Vec<Option<Result<(), Error>>> {
        let n = self.engines.len();
        assert_eq!(descs.len(), n);
        assert_eq!(bufs.len(), n);
        let mut out: Vec<Option<Result<(), Error>>> = (0..n).map(|_| None).collect();
        let mut started = vec![false; n];
        let mut deadline = vec![u64::MAX; n];
        let mut order: Vec<usize> = (0..n).collect();
        loop {
            let now = self.net.borrow().now;
            let before = self.net.borrow().activity;
            // seeded shuffle of the order ranks are driven in this round
            for i in (1..n).rev() {
                let j = (self.net.borrow_mut().rand() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
            let mut moved = false;
            for &r in &order {
                if out[r].is_some() || self.stalled(r, now) {
                    continue;
                }
                let (e, t) = (&mut self.engines[r], &mut self.transports[r]);
                if !started[r] {
                    if now < self.cfg.start_at_ns.get(r).copied().unwrap_or(0) {
                        continue;
                    }
                    started[r] = true;
                    moved = true;
                    if let Err(err) = e.start(t, descs[r], &mut bufs[r].as_buffers()) {
                        out[r] = Some(Err(err));
                        continue;
                    }
                }
                match e.progress(t, &mut bufs[r].as_buffers()) {
                    Ok(Poll::Done) => {
                        out[r] = Some(Ok(()));
                        moved = true;
                    }
                    Ok(Poll::Pending { deadline_ns }) => deadline[r] = deadline_ns,
                    Err(err) => {
                        out[r] = Some(Err(err));
                        moved = true;
                    }
                }
            }
            let live: Vec<usize> = (0..n).filter(|&r| out[r].is_none() && !self.stalled(r, now)).collect();
            if live.is_empty() {
                break;
            }
            if moved || self.net.borrow().activity != before {
                continue;
            }
            // nothing moved: advance the clock to the next event
            let mut next = self.net.borrow().next_at().unwrap_or(u64::MAX);
            for &r in &live {
                if started[r] {
                    next = next.min(deadline[r]);
                } else {
                    next = next.min(self.cfg.start_at_ns.get(r).copied().unwrap_or(0));
                }
            }
            for &(_, at) in &self.cfg.stall {
                if at > now {
                    next = next.min(at);
                }
            }
            if next == u64::MAX || next <= now {
                // cannot happen with a deadline per started rank
                next = now + 1;
            }
            self.net.borrow_mut().now = next;
        }
        out
    }
}
