//! The harness's network: N hosts, each running a `roce_proto::Engine`,
//! on the fabric simulator (`roce_fabric::mesh`): a full mesh of one-way
//! links, one per ordered pair of hosts, each with the delay, rate and
//! faults of its [`LinkParams`], in the fabric's event loop (integer
//! picoseconds; the engines and this API see nanoseconds).
//!
//! Each step of [`Network::run`] runs every fabric event of the next time
//! `t` (frames reaching hosts, engine timers, wake-ups), then
//! 1. lets the application act on the wake-ups due at `t` (post work
//!    requests, poll completion queues);
//! 2. lets every NIC take what its engine now has to send, and re-arms the
//!    engines' timers.
//!
//! Or the hosts run on a switched fabric ([`Network::use_fabric`]: one
//! or two switches with PFC and ECN marking, `Mesh::on_fabric`); then each
//! host has one link, to its switch, which carries the worst of the
//! faults of its [`LinkParams`] towards every other host, and the rules,
//! taps and trace see each datagram on that first hop (naming the
//! destination host). The switches run lossless: a frame a switch drops
//! is counted in [`NetStats::switch_drops`] (the checks fail the run).
//!
//! Every datagram a host puts on a link is first shown to the [`Rule`]s
//! (directed faults), then meets the link's random faults; every copy is
//! recorded in the [`Trace`] and shown to the [`Tap`]s. All randomness
//! comes from the network's own [`SimRng`] stream and the fabric's events
//! are totally ordered by (time, sequence number), so one seed gives one
//! packet trace.

pub mod link;
pub mod pcap;
pub mod trace;

use std::collections::BTreeMap;
use std::net::IpAddr;

use roce_fabric::hooks::{self, LinkHooks};
use roce_fabric::mesh::{Mesh, MeshLink};
use roce_fabric::scenario::Scenario;
use roce_fabric::sim::StepEnd;
use roce_fabric::Time;
use roce_proto::{Duration, Engine, Instant};

use crate::rng::SimRng;
pub use link::{CopyFate, Link, LinkParams};
pub use trace::{Fate, Trace, TraceMode, TraceRecord};

/// Index of a host in the network.
pub type HostId = usize;

/// Picoseconds per nanosecond (the fabric's time unit, the engines').
const PS: u64 = 1000;

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
    /// Datagrams handed to an engine from outside the links
    /// ([`Network::inject`]).
    pub injected: u64,
    /// Events processed.
    pub events: u64,
    /// On a switched fabric: frames the switches marked CE, and frames
    /// they dropped (buffer overflow, PFC watchdog, a stalled NIC).
    pub ce_marked: u64,
    pub switch_drops: u64,
    /// On a switched fabric: the PFC pauses (XOFF) the switches sent.
    pub pfc_pauses: u64,
    /// Intact copies of the engines' own CNPs delivered.
    pub cnps_delivered: u64,
}

impl NetStats {
    /// Copies on a link now: put on one and neither delivered nor lost yet.
    pub fn in_flight(&self) -> u64 {
        (self.sent + self.duplicated).saturating_sub(self.delivered + self.corrupted + self.lost)
    }
}

/// What the application does when the network wakes it.
pub trait App {
    /// Called once per step, after the step's deliveries and timers and
    /// before the NICs take what the engines have to send, with the wake
    /// tokens due now (possibly none).
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

/// What the harness sees of the links: its rules, taps, trace and counts
/// (the fabric's [`LinkHooks`]).
#[derive(Default)]
struct Wire {
    trace: Trace,
    taps: Vec<Box<dyn Tap>>,
    rules: Vec<Box<dyn Rule>>,
    stats: NetStats,
}

impl LinkHooks for Wire {
    fn judge(&mut self, now: Time, from: usize, to: usize, bytes: &[u8]) -> hooks::Verdict {
        let now = Instant(now / PS);
        match self.rules.iter_mut().map(|r| r.judge(now, from, to, bytes)).find(|v| *v != Verdict::Pass) {
            None | Some(Verdict::Pass) => hooks::Verdict::Pass,
            Some(Verdict::Drop) => hooks::Verdict::Drop,
            Some(Verdict::Delay(d)) => hooks::Verdict::Delay(d.0.saturating_mul(PS)),
            Some(Verdict::Duplicate) => hooks::Verdict::Duplicate,
        }
    }

    fn on_copy(&mut self, c: &hooks::Copy<'_>) {
        let fate = c.fate;
        let s = &mut self.stats;
        if c.copy == 0 {
            s.sent += 1;
        } else {
            s.duplicated += 1;
        }
        match fate {
            Fate::Delivered => {
                s.delivered += 1;
                let cnp = roce_wire::bth::Bth::new_checked(c.bytes)
                    .is_ok_and(|b| b.opcode() == roce_wire::opcode::CNP);
                s.cnps_delivered += u64::from(cnp);
            }
            Fate::Corrupted { .. } => s.corrupted += 1,
            Fate::Lost => s.lost += 1,
            Fate::Unroutable => s.unroutable += 1,
        }
        let arrive = c.arrive.map(|t| Instant(t / PS));
        self.trace.record(Instant(c.sent / PS), arrive, c.from, c.to, c.copy, fate, c.tx, c.bytes);
        for t in &mut self.taps {
            t.on_copy(c.from, c.to, fate, c.bytes);
        }
    }
}

/// What a network holds before it first runs.
struct Pending {
    engines: Vec<Engine>,
    wire: Wire,
    rng: SimRng,
    /// The switched fabric the hosts go on (`None`: the mesh).
    fabric: Option<Scenario>,
}

/// The hosts, before the network first runs, or the fabric they run on.
enum Hosts {
    Building(Box<Pending>),
    Running(Box<Mesh<Wire>>),
}

/// The network and everything attached to it.
pub struct Network {
    hosts: Hosts,
    /// Links set with [`Network::set_link`]; the others are `default_link`.
    links: BTreeMap<(HostId, HostId), LinkParams>,
    default_link: LinkParams,
    /// On a switched fabric: each host's switch.
    uplink: Option<Vec<usize>>,
}

/// A harness link as the fabric's mesh link.
fn mesh_link(p: LinkParams) -> MeshLink {
    MeshLink {
        delay: p.delay.max(Duration(1)).0 * PS,
        rate_bps: p.rate_bps,
        faults: roce_fabric::faults::Faults {
            jitter: p.jitter.0 * PS,
            loss: p.loss,
            reorder: p.reorder,
            reorder_delay: p.reorder_delay.0 * PS,
            duplicate: p.duplicate,
            corrupt: p.corrupt,
        },
    }
}

impl Network {
    /// An empty network whose faults draw from `rng`; links not configured
    /// with [`Network::set_link`] get `default_link`.
    pub fn new(rng: SimRng, default_link: LinkParams, trace: TraceMode) -> Network {
        let wire = Wire {
            trace: Trace::new(trace),
            taps: Vec::new(),
            rules: Vec::new(),
            stats: NetStats::default(),
        };
        Network {
            hosts: Hosts::Building(Box::new(Pending { engines: Vec::new(), wire, rng, fabric: None })),
            links: BTreeMap::new(),
            default_link,
            uplink: None,
        }
    }

    /// Runs the hosts on `scn` instead of the mesh: host `i` on node `i`
    /// (a host node with one link, to its switch); see
    /// `roce_fabric::mesh::Mesh::on_fabric`. Links' rates and delays are
    /// the scenario's; each host's link to its switch carries the worst
    /// faults of its links towards the other hosts.
    ///
    /// # Panics
    /// If the network has run already.
    pub fn use_fabric(&mut self, scn: Scenario) {
        let Hosts::Building(b) = &mut self.hosts else {
            panic!("the fabric is chosen before the network runs");
        };
        let mut uplink = vec![usize::MAX; scn.nodes.len()];
        for l in &scn.links {
            uplink[l.a] = l.b;
            uplink[l.b] = l.a;
        }
        self.uplink = Some(uplink);
        b.fabric = Some(scn);
    }

    /// Whether the hosts run on a switched fabric.
    pub fn switched(&self) -> bool {
        self.uplink.is_some()
    }

    /// The faults of host `h`'s link to its switch: the worst of its
    /// links' towards every other host.
    fn uplink_faults(&self, h: HostId, hosts: usize) -> roce_fabric::faults::Faults {
        let mut f = roce_fabric::faults::Faults::default();
        for to in (0..hosts).filter(|&to| to != h) {
            let g = mesh_link(self.link_params(h, to)).faults;
            f.jitter = f.jitter.max(g.jitter);
            f.loss = f.loss.max(g.loss);
            f.reorder = f.reorder.max(g.reorder);
            f.reorder_delay = f.reorder_delay.max(g.reorder_delay);
            f.duplicate = f.duplicate.max(g.duplicate);
            f.corrupt = f.corrupt.max(g.corrupt);
        }
        f
    }

    /// Data frames anywhere in the fabric (NIC or switch queues, links).
    pub fn frames_in_fabric(&self) -> usize {
        match &self.hosts {
            Hosts::Building(_) => 0,
            Hosts::Running(m) => m.frames_in_fabric(),
        }
    }

    /// The deadlock the fabric's check found (a cycle of paused queues).
    pub fn deadlock(&self) -> Option<String> {
        match &self.hosts {
            Hosts::Building(_) => None,
            Hosts::Running(m) => m.deadlock().map(|e| format!("{e:?}")),
        }
    }

    /// Attaches a host; its addresses are the engine's GID table. Hosts
    /// are attached before the network first runs or schedules a wake-up.
    ///
    /// # Panics
    /// If the network has run already.
    pub fn add_host(&mut self, engine: Engine) -> HostId {
        let Hosts::Building(b) = &mut self.hosts else {
            panic!("hosts are attached before the network runs");
        };
        b.engines.push(engine);
        b.engines.len() - 1
    }

    /// Sets the parameters of the one-way link `from -> to` (on a
    /// switched fabric: its faults count towards `from`'s link).
    pub fn set_link(&mut self, from: HostId, to: HostId, params: LinkParams) {
        self.links.insert((from, to), params);
        let n = self.host_count();
        let faults = self.uplink.as_ref().map(|u| (u[from], self.uplink_faults(from, n)));
        if let Hosts::Running(m) = &mut self.hosts {
            match faults {
                None => m.set_link(from, to, mesh_link(params)),
                Some((sw, f)) => m.set_faults(from, sw, f).unwrap_or_else(|e| panic!("the network: {e}")),
            }
        }
    }

    pub fn link_params(&self, from: HostId, to: HostId) -> LinkParams {
        self.links.get(&(from, to)).copied().unwrap_or(self.default_link)
    }

    pub fn add_tap(&mut self, tap: Box<dyn Tap>) {
        self.wire_mut().taps.push(tap);
    }

    /// Adds a directed fault; rules are asked in the order they were added.
    pub fn add_rule(&mut self, rule: Box<dyn Rule>) {
        self.wire_mut().rules.push(rule);
    }

    fn wire(&self) -> &Wire {
        match &self.hosts {
            Hosts::Building(b) => &b.wire,
            Hosts::Running(m) => m.hooks(),
        }
    }

    fn wire_mut(&mut self) -> &mut Wire {
        match &mut self.hosts {
            Hosts::Building(b) => &mut b.wire,
            Hosts::Running(m) => m.hooks_mut(),
        }
    }

    /// The fabric, built from the hosts attached so far on first use.
    ///
    /// # Panics
    /// With fewer than two hosts, or an address on two of them.
    fn mesh(&mut self) -> &mut Mesh<Wire> {
        if let Hosts::Building(b) = &mut self.hosts {
            let (engines, wire, rng) =
                (std::mem::take(&mut b.engines), std::mem::take(&mut b.wire), b.rng.clone());
            let mesh = match b.fabric.take() {
                None => {
                    let (links, default) = (&self.links, self.default_link);
                    let link = |a, b| mesh_link(links.get(&(a, b)).copied().unwrap_or(default));
                    Mesh::new(engines, link, rng, wire)
                }
                Some(scn) => {
                    let n = engines.len();
                    let faults: Vec<_> = (0..n).map(|h| self.uplink_faults(h, n)).collect();
                    Mesh::on_fabric(scn, engines.into_iter().enumerate().collect(), rng, wire).and_then(
                        |mut m| {
                            let up = self.uplink.as_ref().expect("a fabric has uplinks");
                            for (h, f) in faults.into_iter().enumerate() {
                                m.set_faults(h, up[h], f)?;
                            }
                            Ok(m)
                        },
                    )
                }
            };
            let mesh = mesh.unwrap_or_else(|e| panic!("the network: {e}"));
            self.hosts = Hosts::Running(Box::new(mesh));
        }
        match &mut self.hosts {
            Hosts::Running(m) => m,
            Hosts::Building(_) => unreachable!("built above"),
        }
    }

    /// Number of hosts.
    pub fn host_count(&self) -> usize {
        match &self.hosts {
            Hosts::Building(b) => b.engines.len(),
            Hosts::Running(m) => m.hosts(),
        }
    }

    pub fn engine(&self, h: HostId) -> &Engine {
        match &self.hosts {
            Hosts::Building(b) => &b.engines[h],
            Hosts::Running(m) => m.engine(h),
        }
    }

    pub fn engine_mut(&mut self, h: HostId) -> &mut Engine {
        match &mut self.hosts {
            Hosts::Building(b) => &mut b.engines[h],
            Hosts::Running(m) => m.engine_mut(h),
        }
    }

    /// The host that has address `addr`.
    pub fn host_of(&self, addr: IpAddr) -> Option<HostId> {
        match &self.hosts {
            Hosts::Building(b) => b.engines.iter().position(|e| e.config().gids.contains(&addr)),
            Hosts::Running(m) => m.host_of(addr),
        }
    }

    /// Current simulated time.
    pub fn now(&self) -> Instant {
        match &self.hosts {
            Hosts::Building(_) => Instant::ZERO,
            Hosts::Running(m) => Instant(m.now() / PS),
        }
    }

    pub fn stats(&self) -> NetStats {
        let (events, ce_marked, switch_drops, pfc_pauses) = match &self.hosts {
            Hosts::Building(_) => (0, 0, 0, 0),
            Hosts::Running(m) => {
                let c = m.counters();
                let drops = c.dropped_buffer + c.dropped_watchdog + c.dropped_nic_rx;
                (m.events(), c.ecn_marked, drops, c.pfc_pause_sent)
            }
        };
        NetStats { events, ce_marked, switch_drops, pfc_pauses, ..self.wire().stats }
    }

    pub fn trace(&self) -> &Trace {
        &self.wire().trace
    }

    /// Events still queued.
    pub fn pending(&self) -> usize {
        match &self.hosts {
            Hosts::Building(_) => 0,
            Hosts::Running(m) => m.pending(),
        }
    }

    /// Wakes the application at `at` (not before now) with `token`.
    pub fn schedule_wake(&mut self, at: Instant, token: u64) {
        self.mesh().schedule_wake(at.0.saturating_mul(PS), token);
    }

    /// Runs steps until nothing is pending or a limit is reached. Before the
    /// first event, the NICs take what the engines have to send now.
    pub fn run(&mut self, app: &mut impl App, limits: Limits) -> RunEnd {
        self.flush();
        let until = limits.until.0.saturating_mul(PS);
        let mut wakes = Vec::new();
        loop {
            match self.mesh().step(until, limits.max_events) {
                StepEnd::Ran => {}
                StepEnd::Idle => return RunEnd::Idle,
                StepEnd::TimeLimit => return RunEnd::TimeLimit,
                StepEnd::EventLimit => return RunEnd::EventLimit,
            }
            wakes.clear();
            wakes.extend_from_slice(self.mesh().wakes());
            app.on_step(self, &wakes);
            self.flush();
        }
    }

    /// Hands host `to` a datagram that came by no link (a CNP a congested
    /// path would have made its peer send), now; counted in
    /// [`NetStats::injected`]. The NICs take what the engine answers at the
    /// next [`Network::flush`].
    pub fn inject(&mut self, to: HostId, meta: &roce_proto::DatagramMeta, bytes: &[u8]) {
        let now = self.now();
        self.wire_mut().stats.injected += 1;
        self.engine_mut(to).handle_datagram(now, meta, bytes);
    }

    /// Lets every NIC take what its engine has to send, and re-arms the
    /// engines' timers.
    pub fn flush(&mut self) {
        self.mesh().kick();
    }
}
