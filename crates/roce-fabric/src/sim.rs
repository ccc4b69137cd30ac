//! The event loop: ports that serialise frames onto links, switches that
//! queue and forward them, hosts whose NIC runs the `roce-proto` engine.
//!
//! Events are totally ordered by (time, sequence number); time is integer
//! picoseconds. The engine sees nanoseconds: `now / 1000`, rounded down,
//! and its deadlines (whole nanoseconds) are scheduled exactly. A frame's
//! serialisation takes `wire bytes x 8 / rate`, rounded down to the
//! picosecond (exact for every common rate); it reaches the far end of its
//! link a propagation delay after its last bit left (store and forward).
//!
//! All randomness (link loss, ECN marking, the engines' identifiers) comes
//! from the scenario's seed: one seed, one run.
//!
//! The simulator's rooms, one job each (htsim and ns-3 separate them the
//! same way), in `sim/`: this file is the event loop and time; `frame`
//! frames and their slots; `port` a port with its queues and PFC state;
//! `link` a frame's trip over a link; `forward` a switch's forwarding,
//! buffer and ECN; `nic` the host NIC around the engine; `flows` the
//! scenario's flows and their records; `monitor` samples and the deadlock
//! check; `client` what a client driving its own hosts asks; `build` the
//! fabric of a scenario.

mod build;
mod client;
mod flows;
mod forward;
mod frame;
mod link;
mod monitor;
mod nic;
mod port;

use rustc_hash::FxHashMap;
use std::net::IpAddr;
use std::rc::Rc;

use roce_proto::cc::CcError;
use roce_proto::{Instant, Transmit, VerbsError, Wc};

use flows::FlowState;
use frame::{Hop, Slot};
pub(crate) use nic::host_engine;
use nic::Host;
use port::Port;

use crate::hooks::{LinkHooks, NoHooks};
use crate::queue::EventQueue;
use crate::report::{Ending, HeadroomUse, QueueRef, Report};
use crate::rng::SimRng;
use crate::routing::{RouteError, Routes};
use crate::scenario::{EventKind, NodeId, Scenario, ScenarioError, Time, PS_PER_NS};
use crate::switch::Mmu;

/// Why a scenario (or a mesh) cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// It breaks a rule of every scenario ([`crate::scenario::validate`],
    /// which names the key).
    #[error("invalid scenario: {0}")]
    Scenario(#[from] ScenarioError),
    /// A hop names nodes and ports in 16 bits.
    #[error("invalid scenario: {nodes} nodes and {ports} ports: at most 65536 of each")]
    TooLarge { nodes: usize, ports: usize },
    /// A hop carries a frame's length in 16 bits.
    #[error("invalid scenario: a {wire}-byte frame on the wire: at most 65535")]
    FrameTooLong { wire: u32 },
    #[error("invalid scenario: {0}")]
    Route(#[from] RouteError),
    #[error("invalid scenario: DCQCN set: {0}")]
    DcqcnSet(#[source] CcError),
    #[error("invalid scenario: DCQCN parameter {kv}: {source}")]
    DcqcnParameter { kv: String, source: CcError },
    #[error("invalid scenario: DCQCN parameters: {0}")]
    DcqcnParameters(#[source] CcError),
    #[error("invalid scenario: congestion control {0:?}: none or dcqcn")]
    UnknownCc(String),
    /// A mesh has two hosts at least.
    #[error("invalid scenario: a mesh of {0} hosts: it needs two at least")]
    MeshTooSmall(usize),
    /// A mesh's hosts have distinct addresses.
    #[error("invalid scenario: address {0} assigned to two hosts")]
    AddressTwice(IpAddr),
    /// A client's host on a switched fabric is a host node of its own,
    /// with one link.
    #[error("invalid scenario: client host on node {node}: {why}")]
    ClientHost { node: NodeId, why: &'static str },
    /// A client's fabric has no flows of its own: the client drives it.
    #[error("invalid scenario: {0} flows on a client's fabric: it has none")]
    ClientFlows(usize),
    /// Links are set between neighbours only.
    #[error("no link from node {from} to node {to}")]
    NoLink { from: NodeId, to: NodeId },
    /// A verb failed setting up a host's objects.
    #[error("engine of host {host}: {verb}: {source}")]
    Engine { host: NodeId, verb: &'static str, source: VerbsError },
}

/// Told how far a run has got, now and then (for a progress bar).
pub trait Progress {
    /// `now`: simulated time; `done` of `total` flows finished.
    fn update(&mut self, now: Time, done: usize, total: usize);
}

/// Events between progress reports.
const PROGRESS_EVERY: u64 = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    TxDone(u32),
    /// A frame reaches the far end of a link: the receiving port and the
    /// frame's `Hop` (its ingress port aside), flattened to keep an event
    /// in 16 bytes.
    Arrive {
        port: u16,
        dst: u16,
        wire: u16,
        bits: u8,
        fid: u32,
        hash: u32,
    },
    HostTimer(u32),
    FlowStart(u32),
    Scripted(u32),
    WatchdogCheck(u32, u8, u32),
    WatchdogRestore(u32, u8, u32),
    /// A pause received on (port, priority) runs out, unless refreshed
    /// since (epoch).
    PauseExpire(u32, u8, u32),
    /// Port's node refreshes its XOFF on a priority if still congested.
    PauseRefresh(u32, u8),
    /// A client's wake-up, with its token.
    Wake(u64),
    Sample,
    DeadlockCheck,
}

impl Ev {
    fn periodic(self) -> bool {
        matches!(self, Ev::Sample | Ev::DeadlockCheck)
    }
}

/// The simulator state.
pub(crate) struct Sim<H: LinkHooks = NoHooks> {
    scn: Rc<Scenario>,
    /// The client's view of the links (`NoHooks` for a scenario's run).
    pub(crate) hooks: H,
    /// With hooks: each frame's transmit metadata (beside `frames`).
    txs: Vec<Option<Transmit>>,
    /// Hosts a client drives: who has which address (empty: the fabric's
    /// own hosts, at `host_ip`).
    addrs: FxHashMap<IpAddr, NodeId>,
    /// A client's wake-up tokens due at the time of the last step.
    pub(crate) wakes: Vec<u64>,
    /// A client's hosts whose engine took input (a datagram or a timer)
    /// during the last step, each once, in the order they did.
    pub(crate) touched: Vec<NodeId>,
    /// Per node: whether it is in `touched`.
    touched_flag: Vec<bool>,
    /// (port, priority) pairs paused by their peer, over all ports.
    paused_queues: usize,
    now: Time,
    heap: EventQueue<Ev>,
    /// Flows in order of start; the next to start is queued.
    start_order: Vec<usize>,
    next_start: usize,
    real_pending: usize,
    pub(crate) ports: Vec<Port>,
    /// Global index of each node's first port.
    first_port: Vec<usize>,
    /// Frames, by id.
    slots: Vec<Slot>,
    free_frames: Vec<u32>,
    /// Buffers of datagrams kept whole (not compact, see `datagram`) that
    /// were delivered, for reuse.
    bufs: Vec<Vec<u8>>,
    /// What an engine writes a datagram into, and a compact datagram is
    /// rebuilt into for the receiving engine (`MAX_DATAGRAM` bytes).
    scratch: Vec<u8>,
    mmu: Vec<Option<Mmu>>,
    hosts: Vec<Option<Host>>,
    routes: Routes,
    flows: Vec<FlowState>,
    flows_done: usize,
    report: Report,
    /// Random streams: the links' faults, ECN marking.
    pub(crate) rng_links: SimRng,
    rng_ecn: SimRng,
    link_up: Vec<bool>,
    wc: Vec<Wc>,
    /// Queues in a suspected deadlock cycle at the last check, with their
    /// sent counters.
    deadlock_suspect: Option<Vec<(QueueRef, u64)>>,
    ending: Option<Ending>,
}

/// How a client's step ([`Sim::step`]) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEnd {
    /// Every event of one time ran.
    Ran,
    /// Nothing is queued.
    Idle,
    /// The next event is at or after the time limit.
    TimeLimit,
    /// The event limit is reached.
    EventLimit,
}

/// Runs a scenario to its end.
pub fn simulate(scn: &Scenario, progress: Option<&mut dyn Progress>) -> Result<Report, FabricError> {
    let mut sim = Sim::new(scn)?;
    sim.run(progress);
    Ok(sim.finish())
}

/// Every scenario, however made, meets the same rules
/// ([`crate::scenario::validate`], which names the offending field).
fn validate(scn: &Scenario) -> Result<(), FabricError> {
    Ok(crate::scenario::validate(scn)?)
}

impl Sim {
    /// A scenario's run: its hosts, flows and timed events.
    fn new(scn: &Scenario) -> Result<Sim, FabricError> {
        validate(scn)?;
        let mut sim = Sim::build(Rc::new(scn.clone()), NoHooks)?;
        sim.make_hosts()?;
        sim.make_flows()?;
        for (i, e) in scn.events.iter().enumerate() {
            sim.push(e.at_ps, Ev::Scripted(i as u32));
        }
        if scn.monitor.interval_ps > 0 {
            sim.push(0, Ev::Sample);
        }
        if scn.deadlock_check_ps > 0 {
            sim.push(scn.deadlock_check_ps, Ev::DeadlockCheck);
        }
        Ok(sim)
    }
}

impl<H: LinkHooks> Sim<H> {
    fn push(&mut self, at: Time, ev: Ev) {
        if !ev.periodic() {
            self.real_pending += 1;
        }
        self.heap.push(at, ev);
    }

    fn run(&mut self, mut progress: Option<&mut dyn Progress>) {
        let total = self.flows.len();
        if total == 0 && self.scn.stop_ps.is_none() {
            self.ending = Some(Ending::Completed);
            return;
        }
        while let Some((t, ev)) = self.heap.pop() {
            if let Some(stop) = self.scn.stop_ps {
                if t > stop {
                    self.now = stop;
                    self.ending = Some(Ending::StopTime);
                    return;
                }
            }
            if self.handle(t, ev) {
                return;
            }
            if total > 0 && self.flows_done == total {
                self.ending = Some(Ending::Completed);
                return;
            }
            if self.report.counters.events % PROGRESS_EVERY == 0 {
                if let Some(p) = progress.as_deref_mut() {
                    p.update(t, self.flows_done, total);
                }
            }
        }
        self.ending = Some(if self.flows_done == total { Ending::Completed } else { Ending::Stalled });
    }

    /// Runs one event just taken from the queue; true if it ends the run
    /// (a deadlock).
    fn handle(&mut self, t: Time, ev: Ev) -> bool {
        if !ev.periodic() {
            self.real_pending -= 1;
        }
        self.now = t;
        self.report.counters.events += 1;
        match ev {
            Ev::TxDone(p) => {
                let p = p as usize;
                self.ports[p].txdone_queued = false;
                self.start_tx(p);
                let port = &self.ports[p];
                if port.at_host {
                    self.arm_timer(port.node);
                }
            }
            Ev::Arrive { port, dst, wire, bits, fid, hash } => {
                self.arrive(port as usize, Hop { fid, hash, dst, wire, in_port: 0, bits })
            }
            Ev::HostTimer(node) => {
                let h = self.hosts[node as usize].as_mut().expect("host");
                if h.timer_at == Some(t) {
                    h.timer_at = None;
                    let now = Instant::from_nanos(t / PS_PER_NS);
                    if h.engine.poll_timeout().is_some_and(|d| d <= now) {
                        h.engine.handle_timeout(now);
                    }
                    self.host_after_input(node as usize);
                }
            }
            Ev::FlowStart(i) => self.flow_start(i as usize),
            Ev::Scripted(i) => self.scripted(i as usize),
            Ev::WatchdogCheck(p, q, epoch) => self.watchdog_check(p as usize, q, epoch),
            Ev::WatchdogRestore(p, q, epoch) => self.watchdog_restore(p as usize, q, epoch),
            Ev::PauseExpire(p, q, epoch) => self.pause_expire(p as usize, q, epoch),
            Ev::PauseRefresh(p, q) => self.pause_refresh(p as usize, q),
            Ev::Wake(token) => self.wakes.push(token),
            Ev::Sample => {
                self.sample();
                if self.real_pending > 0 {
                    self.push(t + self.scn.monitor.interval_ps, Ev::Sample);
                }
            }
            Ev::DeadlockCheck => {
                if let Some(cycle) = self.deadlock_check() {
                    if self.scn.watchdog.is_none() {
                        self.ending = Some(Ending::Deadlock { at_ps: t, cycle });
                        return true;
                    }
                    // The watchdog may break it: note it and go on.
                    if self.report.deadlocks.last().is_none_or(|(_, c)| *c != cycle) {
                        self.report.deadlocks.push((t, cycle));
                    }
                }
                if self.real_pending > 0 {
                    self.push(t + self.scn.deadlock_check_ps, Ev::DeadlockCheck);
                }
            }
        }
        false
    }

    /// A client's step: runs every event of the next time, if that is
    /// before `until` and fewer than `max_events` have run; the wake-ups
    /// due then are in `wakes`.
    pub(crate) fn step(&mut self, until: Time, max_events: u64) -> StepEnd {
        self.wakes.clear();
        for &n in &self.touched {
            self.touched_flag[n] = false;
        }
        self.touched.clear();
        let Some(t) = self.heap.peek_time() else { return StepEnd::Idle };
        if t >= until {
            return StepEnd::TimeLimit;
        }
        if self.report.counters.events >= max_events {
            return StepEnd::EventLimit;
        }
        while self.heap.peek_time() == Some(t) {
            let (t, ev) = self.heap.pop().expect("peeked");
            // A deadlock found sets `ending` (and stops the checks); the
            // client reads it and decides.
            self.handle(t, ev);
        }
        StepEnd::Ran
    }

    fn finish(mut self) -> Report {
        self.report.end_ps = self.now;
        // Every live data frame is inside: queued, on a link, or held by a
        // stalled NIC.
        self.report.bytes_in_fabric =
            self.slots.iter().filter_map(|s| s.frame).filter(|f| !f.pfc).map(|f| f.wire as u64).sum();
        self.report.ending = self.ending.take();
        for (node, mmu) in self.mmu.iter().enumerate() {
            let Some(mmu) = mmu else { continue };
            for (port, (headroom_bytes, peak_bytes, refused)) in mmu.headroom_use().enumerate() {
                if peak_bytes > 0 || refused > 0 {
                    let port = port as u32 + 1;
                    self.report.headroom.push(HeadroomUse {
                        node,
                        port,
                        headroom_bytes,
                        peak_bytes,
                        refused,
                    });
                }
            }
        }
        for h in self.hosts.iter().flatten() {
            let c = h.engine.counters();
            self.report.counters.retry_timeouts += c.completer_retry_err;
            self.report.counters.seq_naks += c.rcvd_seq_err;
        }
        self.report
    }

    /// A scenario's timed event.
    fn scripted(&mut self, i: usize) {
        match self.scn.events[i].kind {
            EventKind::LinkDown { link } => self.link_up[link] = false,
            EventKind::LinkUp { link } => self.link_up[link] = true,
            EventKind::NicStall { host } => self.nic_stall(host),
            EventKind::NicResume { host } => self.nic_resume(host),
        }
    }
}

#[cfg(test)]
mod tests;
