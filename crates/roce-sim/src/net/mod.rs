//! A deterministic in-process network: N hosts, each running a
//! `roce_proto::Engine`, joined by one-way simulated links (one per ordered
//! pair of hosts), driven by a discrete-event loop in integer nanoseconds.
//!
//! Each step of [`Network::run`] takes the earliest due time `t` and
//! 1. delivers every datagram due at `t` (`handle_datagram`) and runs every
//!    engine timer due at `t` (`handle_timeout`), in event order;
//! 2. lets the application act on the wake-ups due at `t` (post work
//!    requests, poll completion queues);
//! 3. drains every engine's `poll_transmit` into the links, host by host,
//!    and re-arms each engine's timer from `poll_timeout`.
//!
//! All randomness comes from the network's own [`SimRng`] stream and the
//! events are totally ordered by (time, sequence number), so one seed gives
//! one packet trace.

mod event;
pub mod link;
pub mod pcap;
pub mod trace;

use std::collections::BTreeMap;
use std::net::IpAddr;

use roce_proto::{DatagramMeta, Duration, Engine, Instant, Transmit};

use crate::rng::SimRng;
pub use event::{Event, EventQueue};
pub use link::{CopyFate, Link, LinkParams};
pub use trace::{Fate, Trace, TraceMode, TraceRecord};

/// Index of a host in the network.
pub type HostId = usize;

/// Largest datagram an engine may produce (4096-byte MTU plus headers).
const MAX_DATAGRAM: usize = 9000;

/// A simulated machine: one RDMA device.
pub struct Host {
    pub engine: Engine,
    /// The device's GIDs (its IP addresses).
    pub addrs: Vec<IpAddr>,
    /// The deadline a `Timer` event is queued for, if any.
    timer_armed: Option<Instant>,
}

/// Packet counts of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams the engines transmitted.
    pub sent: u64,
    /// Copies delivered intact / corrupted.
    pub delivered: u64,
    pub corrupted: u64,
    pub lost: u64,
    /// Extra copies made by duplication.
    pub duplicated: u64,
    /// Copies whose destination address no host owns.
    pub unroutable: u64,
    /// Events processed.
    pub events: u64,
}

/// What the application does when the network wakes it.
pub trait App {
    /// Called once per step, after the step's deliveries and timers and
    /// before the transmit drain, with the wake tokens due now (possibly
    /// none).
    fn on_step(&mut self, net: &mut Network, wakes: &[u64]);
}

/// Watches every copy a link carries (for checks that need the traffic).
pub trait Tap {
    fn on_copy(&mut self, from: HostId, to: Option<HostId>, fate: Fate, bytes: &[u8]);
}

/// What a [`Rule`] decides for a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not this rule's business: the next rule, or the link's dice, decide.
    Pass,
    /// The datagram is lost.
    Drop,
    /// One intact copy arrives this much later than the link's delay
    /// (outside the link's FIFO order).
    Delay(Duration),
    /// Two intact copies arrive after the link's delay.
    Duplicate,
}

/// A directed fault (for scenario tests): sees every datagram before the
/// link deals its random fate, and may decide that fate itself.
pub trait Rule {
    fn judge(&mut self, now: Instant, from: HostId, to: HostId, bytes: &[u8]) -> Verdict;
}

impl<F: FnMut(Instant, HostId, HostId, &[u8]) -> Verdict> Rule for F {
    fn judge(&mut self, now: Instant, from: HostId, to: HostId, bytes: &[u8]) -> Verdict {
        self(now, from, to, bytes)
    }
}

/// Bounds on a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// No event at or after this time is processed.
    pub until: Instant,
    /// At most this many events are processed.
    pub max_events: u64,
}

/// Why [`Network::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// No event is pending: every engine is quiet and no packet is in flight.
    Idle,
    /// The next event lies beyond `Limits::until`.
    TimeLimit,
    /// `Limits::max_events` events were processed.
    EventLimit,
}

/// The network and everything attached to it.
pub struct Network {
    hosts: Vec<Host>,
    routes: BTreeMap<IpAddr, HostId>,
    /// One-way links by (from, to), created on first use from `default_link`.
    links: BTreeMap<(HostId, HostId), Link>,
    default_link: LinkParams,
    queue: EventQueue,
    rng: SimRng,
    now: Instant,
    trace: Trace,
    taps: Vec<Box<dyn Tap>>,
    rules: Vec<Box<dyn Rule>>,
    stats: NetStats,
    buf: Vec<u8>,
}

impl Network {
    /// An empty network whose faults draw from `rng`; links not configured
    /// with [`Network::set_link`] get `default_link`.
    pub fn new(rng: SimRng, default_link: LinkParams, trace: TraceMode) -> Network {
        Network {
            hosts: Vec::new(),
            routes: BTreeMap::new(),
            links: BTreeMap::new(),
            default_link,
            queue: EventQueue::default(),
            rng,
            now: Instant::ZERO,
            trace: Trace::new(trace),
            taps: Vec::new(),
            rules: Vec::new(),
            stats: NetStats::default(),
            buf: vec![0; MAX_DATAGRAM],
        }
    }

    /// Attaches a host; its addresses are the engine's GID table.
    ///
    /// # Panics
    /// If another host already owns one of the addresses.
    pub fn add_host(&mut self, engine: Engine) -> HostId {
        let id = self.hosts.len();
        let addrs = engine.config().gids.clone();
        for a in &addrs {
            let prev = self.routes.insert(*a, id);
            assert!(prev.is_none(), "address {a} assigned to two hosts");
        }
        self.hosts.push(Host { engine, addrs, timer_armed: None });
        id
    }

    /// Sets the parameters of the one-way link `from -> to`.
    pub fn set_link(&mut self, from: HostId, to: HostId, params: LinkParams) {
        self.links.insert((from, to), Link::new(params));
    }

    pub fn link_params(&self, from: HostId, to: HostId) -> LinkParams {
        self.links.get(&(from, to)).map_or(self.default_link, |l| l.params)
    }

    pub fn add_tap(&mut self, tap: Box<dyn Tap>) {
        self.taps.push(tap);
    }

    /// Adds a directed fault; rules are asked in the order they were added.
    pub fn add_rule(&mut self, rule: Box<dyn Rule>) {
        self.rules.push(rule);
    }

    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    pub fn engine(&self, h: HostId) -> &Engine {
        &self.hosts[h].engine
    }

    pub fn engine_mut(&mut self, h: HostId) -> &mut Engine {
        &mut self.hosts[h].engine
    }

    pub fn host_of(&self, addr: IpAddr) -> Option<HostId> {
        self.routes.get(&addr).copied()
    }

    /// Current simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    pub fn stats(&self) -> NetStats {
        self.stats
    }

    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Events still queued.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Wakes the application at `at` (not before now) with `token`.
    pub fn schedule_wake(&mut self, at: Instant, token: u64) {
        self.queue.push(at.max(self.now), Event::Wake { token });
    }

    /// Runs steps until nothing is pending or a limit is reached. Before the
    /// first event, the engines' pending transmits are drained at the
    /// current time.
    pub fn run(&mut self, app: &mut impl App, limits: Limits) -> RunEnd {
        self.flush();
        let mut wakes = Vec::new();
        loop {
            let Some(t) = self.queue.peek_time() else { return RunEnd::Idle };
            if t >= limits.until {
                return RunEnd::TimeLimit;
            }
            if self.stats.events >= limits.max_events {
                return RunEnd::EventLimit;
            }
            self.now = t;
            wakes.clear();
            while let Some(ev) = self.queue.pop_due(t) {
                self.stats.events += 1;
                match ev {
                    Event::Deliver { host, meta, bytes } => {
                        self.hosts[host].engine.handle_datagram(t, &meta, &bytes);
                    }
                    Event::Timer { host } => {
                        let h = &mut self.hosts[host];
                        // A stale event (the deadline moved) is ignored;
                        // handle_timeout only runs timers actually due.
                        if h.timer_armed == Some(t) {
                            h.timer_armed = None;
                            h.engine.handle_timeout(t);
                        }
                    }
                    Event::Wake { token } => wakes.push(token),
                }
            }
            app.on_step(self, &wakes);
            self.flush();
        }
    }

    /// Drains every engine's transmit queue into the links and re-arms the
    /// engines' timers.
    pub fn flush(&mut self) {
        let now = self.now;
        for h in 0..self.hosts.len() {
            while let Some(tx) = self.hosts[h].engine.poll_transmit(now, &mut self.buf) {
                self.stats.sent += 1;
                let bytes = self.buf[..tx.len].to_vec();
                self.send(h, &tx, bytes);
            }
            let host = &mut self.hosts[h];
            if let Some(t) = host.engine.poll_timeout() {
                let t = t.max(now);
                if host.timer_armed != Some(t) {
                    host.timer_armed = Some(t);
                    self.queue.push(t, Event::Timer { host: h });
                }
            }
        }
    }

    /// Puts one datagram on the link towards its destination.
    fn send(&mut self, from: HostId, tx: &Transmit, bytes: Vec<u8>) {
        let now = self.now;
        let Some(to) = self.host_of(tx.meta.dst) else {
            self.stats.unroutable += 1;
            self.trace.record(now, None, from, None, 0, Fate::Unroutable, tx, &bytes);
            for t in &mut self.taps {
                t.on_copy(from, None, Fate::Unroutable, &bytes);
            }
            return;
        };
        let ip_header = if tx.meta.dst.is_ipv4() { 20 } else { 40 };
        let default = self.default_link;
        let link = self.links.entry((from, to)).or_insert_with(|| Link::new(default));
        let verdict =
            self.rules.iter_mut().map(|r| r.judge(now, from, to, &bytes)).find(|v| *v != Verdict::Pass);
        let fates = match verdict {
            Some(Verdict::Drop) => vec![CopyFate { arrive: None, flip_bit: None }],
            Some(Verdict::Delay(d)) => {
                vec![CopyFate { arrive: Some(now + link.params.delay.max(Duration(1)) + d), flip_bit: None }]
            }
            Some(Verdict::Duplicate) => {
                let copy =
                    CopyFate { arrive: Some(now + link.params.delay.max(Duration(1))), flip_bit: None };
                vec![copy, copy]
            }
            _ => link.send(&mut self.rng, now, bytes.len(), ip_header),
        };
        self.stats.duplicated += fates.len() as u64 - 1;
        let meta = DatagramMeta {
            src: tx.meta.src,
            dst: tx.meta.dst,
            src_port: tx.meta.src_port,
            dst_port: tx.meta.dst_port,
            ecn: tx.traffic_class & 3,
            ipv4_id: tx.meta.ipv4_id.or(Some(0)),
        };
        for (copy, f) in fates.iter().enumerate() {
            let mut b = bytes.clone();
            let fate = match (f.arrive, f.flip_bit) {
                (None, _) => Fate::Lost,
                (Some(_), Some(bit)) => {
                    b[bit as usize / 8] ^= 0x80 >> (bit % 8);
                    Fate::Corrupted { bit }
                }
                (Some(_), None) => Fate::Delivered,
            };
            match fate {
                Fate::Lost => self.stats.lost += 1,
                Fate::Corrupted { .. } => self.stats.corrupted += 1,
                _ => self.stats.delivered += 1,
            }
            self.trace.record(now, f.arrive, from, Some(to), copy as u8, fate, tx, &b);
            for t in &mut self.taps {
                t.on_copy(from, Some(to), fate, &b);
            }
            if let Some(at) = f.arrive {
                self.queue.push(at, Event::Deliver { host: to, meta, bytes: b });
            }
        }
    }
}
