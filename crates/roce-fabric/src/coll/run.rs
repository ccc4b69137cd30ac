//! The driver: builds the fabric of a workload, puts one rank on each of
//! its first hosts, and runs each size of a `[[collective]]` (out of
//! place, then in place, as nccl-tests) for its iterations.
//!
//! An iteration on rank `r`: the compute phase (a timed delay in simulated
//! time, drawn per rank and iteration), then the call, driven by the real
//! `roce-coll` engine over [`super::transport`]. A rank starts its next
//! iteration as soon as its call ends (no barrier: as a training step).
//! Before each half every rank is idle and all start together.
//!
//! Figures per half, with `S_k` the time the last rank entered call `k`
//! and `T_k` the time the last rank left it (`T_-1` the half's start):
//! * the call's time (nccl-tests' `time`): the mean of `T_k - S_k`, the
//!   collective once everyone is in it;
//! * the iteration time (a training step): `T_k - T_(k-1)`, whose p50,
//!   p99 and max are printed; compute jitter and stragglers show here;
//! * per rank, how often it entered a call last (who the others waited
//!   for).
//!
//! The driver wakes a rank when its compute ends, when its host's engine
//! took input ([`Mesh::touched`]) and has completions for it, at its
//! deadline (looked at every [`DEADLINE_LOOK`] of a busy fabric), or, when
//! the fabric has nothing left to do, at the earliest engine deadline (so
//! a peer that never answers ends in the engine's timeout, naming it,
//! never a hang).

use roce_coll::{Algo, Buffers, Config, Engine, Layout, OpDesc, OpKind, Poll, HEADER_BYTES};
use roce_proto::config::Payload;
use roce_proto::Engine as NicEngine;

use super::agg::{AggTree, Aggregator, Child, Member};
use super::background::Background;
use super::transport::Hosts;
use super::workload::{CollSpec, SimAlgo, Topology, Workload};
use super::CollSimError;
use crate::hooks::NoHooks;
use crate::mesh::Mesh;
use crate::rng::SimRng;
use crate::scenario::{EventKind, NodeId, NodeKind, Scenario, SwitchConfig, Time, TimedEvent, PS_PER_NS};
use crate::sim::StepEnd;
use crate::topo::{self, LinkKind};

/// Checks results: the caller's test data (`roce coll`'s), so the
/// simulator checks with the same values as the real tool.
pub trait DataCheck {
    /// Writes rank `rank`'s input for `desc` into `input` (the send buffer,
    /// or the in-place buffer).
    fn fill(&self, desc: &OpDesc, n: usize, rank: usize, in_place: bool, input: &mut [u8]);
    /// Elements of `result` (the receive or in-place buffer) that are wrong.
    fn wrong(&self, desc: &OpDesc, n: usize, rank: usize, in_place: bool, result: &[u8]) -> u64;
}

/// One half (out-of-place or in-place) of a size.
#[derive(Debug, Clone, PartialEq)]
pub struct Half {
    /// Mean call time, us.
    pub time_us: f64,
    /// Each iteration's time, us.
    pub iter_us: Vec<f64>,
    /// Wrong elements over all ranks (`None`: not checked).
    pub wrong: Option<u64>,
    /// The half's start, and per rank each call's (start, end), ps: the
    /// per-rank timeline.
    pub t0: Time,
    pub spans: Vec<Vec<(Time, Time)>>,
}

/// One size of a collective.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeRow {
    /// nccl-tests' size and count columns.
    pub bytes: usize,
    pub count: usize,
    pub algo: SimAlgo,
    pub out_of_place: Option<Half>,
    pub in_place: Half,
}

/// One `[[collective]]`'s results.
#[derive(Debug, Clone, PartialEq)]
pub struct CollResult {
    pub spec: CollSpec,
    pub ranks: usize,
    pub topology: String,
    pub hosts: usize,
    pub rows: Vec<SizeRow>,
    /// Per rank: calls it entered last.
    pub last_in: Vec<u64>,
    /// Simulated time at the end, ps.
    pub end_ps: Time,
    /// Events the simulator ran; frames that left a port (packet-hops).
    pub events: u64,
    pub packet_hops: u64,
    pub qps: usize,
    /// Over the one-way links between switches (none behind one switch):
    /// the most frames one carried, and that over the mean (1.0: ECMP
    /// spread the load perfectly).
    pub max_trunk_frames: u64,
    pub trunk_imbalance: f64,
    pub dropped: u64,
    pub pfc_pauses: u64,
    /// With `algo = "switch"`: the aggregation nodes and the tree's
    /// levels.
    pub aggregation: Option<(usize, usize)>,
    /// The one-way links busiest over the run (at most 3): from, to (node
    /// names), and the share of the run's simulated time they spent
    /// sending. A slow or congested link stands out here.
    pub busiest_links: Vec<(String, String, f64)>,
    /// With `[[background]]`: its flows, the bytes they delivered, and
    /// the simulated time they ran, ps.
    pub background: Option<(usize, u64, Time)>,
}

/// The fabric of a workload and the nodes of its hosts, in order.
pub fn fabric_of(w: &Workload) -> Result<(Scenario, Vec<NodeId>), CollSimError> {
    let f = &w.fabric;
    let mut sw = SwitchConfig::hpcc();
    sw.pfc_enabled = f.pfc;
    sw.lossless_mask = if f.pfc { 0xff } else { 0 };
    sw.ecn_enabled = f.ecn;
    if let Some(b) = f.buffer_bytes {
        sw.buffer_bytes = b;
    }
    if let Some(weights) = f.weights {
        sw.scheduling = crate::scenario::Scheduling::Dwrr { weights };
    }
    let link = LinkKind { rate_bps: f.rate_bps, delay_ps: f.delay_ps };
    let mut scn = match &f.topology {
        Topology::Switch { hosts } => topo::single_switch(*hosts, link, sw)?,
        Topology::FatTree { k } => topo::fat_tree(*k, link, sw)?,
        Topology::LeafSpine { hosts, hosts_per_leaf, spines, oversubscription, rails } => topo::leaf_spine(
            &topo::LeafSpine {
                hosts: *hosts,
                hosts_per_leaf: *hosts_per_leaf,
                spines: *spines,
                oversubscription: *oversubscription,
                rails: *rails,
                host_link: link,
                uplink_delay_ps: f.delay_ps,
            },
            sw,
        )?,
        Topology::File(p) => {
            let mut s = crate::toml_scenario::from_path(p)?;
            s.flows.clear();
            s
        }
    };
    scn.seed = w.seed;
    scn.nic.cc = if f.dcqcn { "dcqcn".into() } else { "none".into() };
    let hosts: Vec<NodeId> = (0..scn.nodes.len()).filter(|&i| scn.nodes[i].kind == NodeKind::Host).collect();
    Ok((scn, hosts))
}

fn link_of(scn: &Scenario, node: NodeId) -> Option<usize> {
    scn.links.iter().position(|l| l.a == node || l.b == node)
}

/// The cost model's parameters on this fabric: the host link's rate,
/// reductions free (they take no simulated time), one step's latency
/// about a round trip of the fabric's diameter (4 links each way on a
/// fat-tree, 2 behind one switch, plus a frame's serialisation).
pub fn cost_params(w: &Workload, layout: &Layout) -> roce_coll::cost::Params {
    let f = &w.fabric;
    let links = match f.topology {
        Topology::Switch { .. } => 2.0,
        Topology::LeafSpine { .. } => 4.0,
        _ => 6.0,
    };
    let frame_ns = (f.mtu.bytes() as f64 + 100.0) * 8.0 / f.rate_bps as f64 * 1e9;
    roce_coll::cost::Params {
        alpha_ns: 2.0 * links * (f.delay_ps as f64 / PS_PER_NS as f64 + frame_ns),
        link_bytes_per_s: f.rate_bps as f64 / 8.0,
        reduce_bytes_per_s: 1e15,
        chunk_bytes: (layout.slot_bytes - roce_coll::HEADER_BYTES) as f64,
        // One rank per simulated host, with its own core: no sharing.
        ranks_per_host: 1,
        host_cores: 0,
        wake_ns: 0.0,
    }
}

/// How often the driver looks at the ranks' deadlines while the fabric is
/// busy (a rank is woken by its completions, and one waiting for a peer
/// that went quiet gets none): 1 ms.
const DEADLINE_LOOK: Time = crate::scenario::PS_PER_S / 1000;

/// A normal draw (Box-Muller), cut at 0.
fn normal(rng: &mut SimRng, mean: Time, sigma: Time) -> Time {
    if sigma == 0 {
        return mean;
    }
    let u1 = rng.unit().max(f64::MIN_POSITIVE);
    let u2 = rng.unit();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (mean as f64 + z * sigma as f64).max(0.0) as Time
}

/// A rank's side of a call: the library's engine, or a member of the
/// switches' aggregation.
enum Caller {
    Host(Box<Engine>),
    Switch(Member),
}

impl Caller {
    fn start<T: roce_coll::Transport>(
        &mut self,
        t: &mut T,
        desc: OpDesc,
        b: &mut Buffers,
        r: usize,
    ) -> Result<(), CollSimError> {
        match self {
            Caller::Host(e) => e.start(t, desc, b).map_err(|e| CollSimError::Rank { rank: r, source: e }),
            Caller::Switch(m) => m
                .start(t, &desc, b)
                .map_err(|e| CollSimError::Aggregation { who: format!("rank {r}"), source: e }),
        }
    }

    fn progress<T: roce_coll::Transport>(
        &mut self,
        t: &mut T,
        b: &mut Buffers,
        r: usize,
    ) -> Result<Poll, CollSimError> {
        match self {
            Caller::Host(e) => e.progress(t, b).map_err(|e| CollSimError::Rank { rank: r, source: e }),
            Caller::Switch(m) => m
                .progress(t, b)
                .map_err(|e| CollSimError::Aggregation { who: format!("rank {r}"), source: e }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Computing,
    InCall,
    Finished,
}

/// Runs `[[collective]]` number `which` of `w`.
pub fn run(w: &Workload, which: usize, check: Option<&dyn DataCheck>) -> Result<CollResult, CollSimError> {
    let spec = w.collectives.get(which).ok_or(CollSimError::NoSuchCollective(which))?.clone();
    let (mut scn, host_nodes) = fabric_of(w)?;
    let n = spec.ranks.unwrap_or(host_nodes.len());
    if n < 2 || n > host_nodes.len() {
        return Err(CollSimError::Ranks { ranks: n, hosts: host_nodes.len() });
    }
    let mut nodes: Vec<NodeId> = host_nodes.clone();
    if w.fabric.random_placement {
        let mut rng = SimRng::new(w.seed).fork("placement");
        for i in (1..nodes.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            nodes.swap(i, j);
        }
    }
    nodes.truncate(n);
    // The node of rank `rank`, for a fault knob `what`.
    let node_of = |what: &'static str, rank: usize| {
        nodes.get(rank).copied().ok_or(CollSimError::FaultRank { what, rank, ranks: n })
    };
    for s in &w.fabric.slow_links {
        let l = link_of(&scn, node_of("slow_link", s.rank)?).expect("a host has a link");
        scn.links[l].rate_bps = ((scn.links[l].rate_bps as f64 * s.fraction) as u64).max(1);
    }
    for s in &w.fabric.lossy_links {
        let l = link_of(&scn, node_of("lossy_link", s.rank)?).expect("a host has a link");
        scn.links[l].loss = s.loss;
    }
    for s in &w.fabric.nic_stalls {
        let host = node_of("nic_stall", s.rank)?;
        scn.events.push(TimedEvent { at_ps: s.at_ps, kind: EventKind::NicStall { host } });
        if let Some(d) = s.for_ps {
            scn.events.push(TimedEvent { at_ps: s.at_ps + d, kind: EventKind::NicResume { host } });
        }
    }
    for &(r, _) in &spec.compute.delays {
        if r >= n {
            return Err(CollSimError::FaultRank { what: "delay", rank: r, ranks: n });
        }
    }
    let layout = Layout { channels: spec.qps_per_peer, slots: spec.slots, slot_bytes: spec.slot_bytes };
    // In-network aggregation: an aggregation node in each switch of the
    // tree, endpoints n.. after the ranks.
    let tree = match spec.algo {
        SimAlgo::Switch => Some(AggTree::build(&scn, &nodes)?),
        SimAlgo::Host(_) => None,
    };
    let agg_nodes = tree.as_ref().map(|t| t.attach(&mut scn)).unwrap_or_default();
    let agg_names: Vec<String> = tree
        .as_ref()
        .map(|t| t.switch.iter().map(|&s| scn.nodes[s].name.clone()).collect())
        .unwrap_or_default();
    let endpoints: Vec<NodeId> = nodes.iter().chain(&agg_nodes).copied().collect();
    // Hosts that only carry background traffic need engines too.
    let mut engine_nodes = endpoints.clone();
    for node in Background::nodes(&w.fabric.background, &host_nodes)? {
        if !engine_nodes.contains(&node) {
            engine_nodes.push(node);
        }
    }
    let mut engines: Vec<(NodeId, NicEngine)> = Vec::with_capacity(engine_nodes.len());
    for &node in &engine_nodes {
        let l = link_of(&scn, node).expect("a host has a link");
        engines.push((node, crate::sim::host_engine(&scn, node, scn.links[l].rate_bps)?));
    }
    let elide_ok = scn.links.iter().all(|l| l.faults.corrupt == 0.0);
    let topology = scn.name.clone();
    let names: Vec<String> = scn.nodes.iter().map(|v| v.name.clone()).collect();
    let hosts_total = host_nodes.len();
    let mesh = Mesh::on_fabric(scn, engines, SimRng::new(w.seed).fork("links"), NoHooks)?;
    let mut hosts = Hosts::new(mesh, &endpoints, layout, w.fabric.mtu);
    hosts.traffic_class = spec.priority << 5;
    let mut bg = Background::new(&mut hosts.mesh, &w.fabric.background, &host_nodes, w.fabric.mtu)?;
    let mut colls = Vec::with_capacity(n);
    let mut aggs = Vec::new();
    if let Some(t) = &tree {
        for r in 0..n {
            colls.push(Caller::Switch(Member::new(n + t.leaf_of[r], n, layout)));
        }
        for a in 0..t.len() {
            let children = t.children[a]
                .iter()
                .map(|&c| match c {
                    Child::Rank(r) => r,
                    Child::Node(b) => n + b,
                })
                .collect();
            aggs.push(Aggregator::new(children, t.parent[a].map(|p| n + p), layout));
        }
    } else {
        for r in 0..n {
            let mut cfg = Config::new(r, n);
            cfg.layout = layout;
            cfg.cost = cost_params(w, &layout);
            cfg.timeout_ns = 1_000_000_000;
            colls.push(Caller::Host(Box::new(Engine::new(cfg).map_err(CollSimError::Coll)?)));
        }
    }

    let mut rng = SimRng::new(w.seed).fork("compute");
    let mut last_in = vec![0u64; n];
    let mut rows = Vec::new();
    for &size in &spec.sizes {
        let es = spec.dtype.size();
        let elems = size as usize / es;
        let (count, shown) = match spec.op {
            OpKind::ReduceScatter | OpKind::AllGather | OpKind::AllToAll => (elems / n, elems / n * n),
            _ => (elems, elems),
        };
        let desc = OpDesc::new(spec.op, spec.dtype, count).redop(spec.redop).algo(match spec.algo {
            SimAlgo::Host(a) => a,
            SimAlgo::Switch => Algo::Auto,
        });
        let algo = match &colls[0] {
            Caller::Host(e) => SimAlgo::Host(e.resolve(&desc)),
            Caller::Switch(_) => SimAlgo::Switch,
        };
        let checked = check.is_some()
            && spec.check.unwrap_or((desc.send_bytes(n) + desc.recv_bytes(n)) * n <= 256 << 20);
        hosts.payload = checked;
        // Timing only: the engines move each message's header and not its
        // payload (packets keep their lengths), unless a link corrupts,
        // when the ICRC must cover every byte.
        let mode = if checked || !elide_ok {
            Payload::Carried
        } else {
            Payload::Elided { keep: HEADER_BYTES as u32 }
        };
        for &node in &engine_nodes {
            hosts.mesh.engine_mut(node).set_payload(mode);
        }
        for c in &mut colls {
            if let Caller::Switch(m) = c {
                m.payload = checked;
            }
        }
        for a in &mut aggs {
            a.compute = checked;
        }
        let mut halves = Vec::new();
        for in_place in [false, true] {
            if !in_place && spec.in_place_only {
                continue;
            }
            let mut d = Driver {
                hosts: &mut hosts,
                colls: &mut colls,
                aggs: &mut aggs,
                bg: &mut bg,
                agg_names: &agg_names,
                spec: &spec,
                desc,
                n,
                in_place,
                check: if checked { check } else { None },
                rng: &mut rng,
                last_in: &mut last_in,
            };
            halves.push(d.half()?);
        }
        let in_place = halves.pop().expect("the in-place half");
        rows.push(SizeRow { bytes: shown * es, count: shown, algo, out_of_place: halves.pop(), in_place });
    }
    let is_switch = |node: NodeId| {
        hosts.rank_of_node.get(node).is_none_or(|&r| r == usize::MAX) && !host_nodes.contains(&node)
    };
    let trunks: Vec<u64> = hosts
        .mesh
        .link_frames()
        .into_iter()
        .filter(|&(a, b, _)| is_switch(a) && is_switch(b))
        .map(|x| x.2)
        .collect();
    let max_trunk_frames = trunks.iter().copied().max().unwrap_or(0);
    let mean = trunks.iter().sum::<u64>() as f64 / trunks.len().max(1) as f64;
    let trunk_imbalance = if mean > 0.0 { max_trunk_frames as f64 / mean } else { 0.0 };
    let c = hosts.mesh.counters();
    let run_ps = hosts.mesh.now().max(1);
    let mut busy = hosts.mesh.link_busy();
    busy.sort_by(|a, b| b.2.cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
    let busiest_links = busy
        .iter()
        .take(3)
        .map(|&(a, b, t)| (names[a].clone(), names[b].clone(), t as f64 / run_ps as f64))
        .collect();
    Ok(CollResult {
        busiest_links,
        max_trunk_frames,
        trunk_imbalance,
        spec,
        ranks: n,
        topology,
        hosts: hosts_total,
        rows,
        last_in,
        end_ps: hosts.mesh.now(),
        events: c.events,
        packet_hops: c.packet_hops,
        qps: hosts.qps,
        dropped: c.dropped_buffer + c.dropped_link,
        pfc_pauses: c.pfc_pause_sent,
        aggregation: tree.as_ref().map(|t| (t.len(), t.depth())),
        background: bg.started.map(|t0| (bg.len(), bg.delivered(), hosts.mesh.now() - t0)),
    })
}

/// One half's run.
struct Driver<'a> {
    hosts: &'a mut Hosts,
    colls: &'a mut Vec<Caller>,
    /// The switches' aggregation nodes (endpoints `n..`), and their
    /// switches' names.
    aggs: &'a mut Vec<Aggregator>,
    agg_names: &'a [String],
    bg: &'a mut Background,
    spec: &'a CollSpec,
    desc: OpDesc,
    n: usize,
    in_place: bool,
    check: Option<&'a dyn DataCheck>,
    rng: &'a mut SimRng,
    last_in: &'a mut Vec<u64>,
}

/// The ranks' buffers: each its own (checked), or one shared by all
/// (timing only: the simulated time does not depend on the values, and
/// 128 ranks of 1 GiB would not fit in memory).
struct Bufs {
    send: Vec<Vec<u8>>,
    recv: Vec<Vec<u8>>,
}

impl Bufs {
    fn get(&mut self, r: usize, in_place: bool) -> Buffers<'_> {
        let i = r.min(self.recv.len() - 1);
        if in_place {
            Buffers::InPlace(&mut self.recv[i])
        } else {
            Buffers::OutOfPlace { send: &self.send[i], recv: &mut self.recv[i] }
        }
    }
}

impl Driver<'_> {
    fn compute(&mut self, r: usize) -> Time {
        let c = &self.spec.compute;
        let extra: Time = c.delays.iter().filter(|d| d.0 == r).map(|d| d.1).sum();
        normal(self.rng, c.mean_ps, c.sigma_ps) + extra
    }

    fn half(&mut self) -> Result<Half, CollSimError> {
        let (n, desc, in_place) = (self.n, self.desc, self.in_place);
        let iters = self.spec.iterations;
        let copies = if self.check.is_some() { n } else { 1 };
        let (sb, rb) =
            if in_place { (0, desc.inplace_bytes(n)) } else { (desc.send_bytes(n), desc.recv_bytes(n)) };
        let mut bufs = Bufs { send: vec![vec![0u8; sb]; copies], recv: vec![vec![0u8; rb]; copies] };
        if let Some(c) = self.check {
            for r in 0..n {
                if in_place {
                    bufs.recv[r].fill(0xff);
                    c.fill(&desc, n, r, true, &mut bufs.recv[r]);
                } else {
                    bufs.recv[r].fill(0xff);
                    c.fill(&desc, n, r, false, &mut bufs.send[r]);
                }
            }
        }
        let t0 = self.hosts.mesh.now();
        self.bg.start(&mut self.hosts.mesh);
        let mut next_look = t0 + DEADLINE_LOOK;
        let mut phase = vec![Phase::Idle; n];
        let mut iter = vec![0usize; n];
        let mut start = vec![vec![0 as Time; iters]; n];
        let mut end = vec![vec![0 as Time; iters]; n];
        let mut deadline = vec![u64::MAX; n];
        let mut wrong = 0u64;
        let mut finished = 0;
        let mut todo: Vec<usize> = Vec::new();
        for r in 0..n {
            let c = self.compute(r);
            phase[r] = Phase::Computing;
            if c == 0 {
                todo.push(r);
            } else {
                self.hosts.mesh.schedule_wake(t0 + c, r as u64);
            }
            start[r][0] = t0 + c;
        }
        let mut seen = vec![false; n + self.aggs.len()];
        while finished < n {
            todo.sort_unstable();
            todo.dedup();
            let now = self.hosts.mesh.now();
            for &r in &todo {
                if r >= n {
                    let a = r - n;
                    let mut t = self.hosts.view(r);
                    self.aggs[a].progress(&mut t).map_err(|e| CollSimError::Aggregation {
                        who: format!("the aggregation node of switch {}", self.agg_names[a]),
                        source: e,
                    })?;
                    continue;
                }
                loop {
                    let k = iter[r];
                    match phase[r] {
                        Phase::Computing if now >= start[r][k] => {
                            let mut t = self.hosts.view(r);
                            self.colls[r].start(&mut t, desc, &mut bufs.get(r, in_place), r)?;
                            start[r][k] = now;
                            phase[r] = Phase::InCall;
                        }
                        Phase::InCall => {}
                        _ => break,
                    }
                    let mut t = self.hosts.view(r);
                    match self.colls[r].progress(&mut t, &mut bufs.get(r, in_place), r) {
                        Ok(Poll::Pending { deadline_ns }) => {
                            deadline[r] = deadline_ns;
                            break;
                        }
                        Ok(Poll::Done) => {
                            end[r][k] = now;
                            if k == 0 {
                                if let Some(c) = self.check {
                                    let b = bufs.get(r, in_place);
                                    let res: &[u8] = match &b {
                                        Buffers::InPlace(x) => x,
                                        Buffers::OutOfPlace { recv, .. } => recv,
                                    };
                                    wrong += c.wrong(&desc, n, r, in_place, res);
                                }
                            }
                            iter[r] += 1;
                            deadline[r] = u64::MAX;
                            if iter[r] == iters {
                                phase[r] = Phase::Finished;
                                finished += 1;
                                break;
                            }
                            let c = self.compute(r);
                            phase[r] = Phase::Computing;
                            start[r][k + 1] = now + c;
                            if c > 0 {
                                self.hosts.mesh.schedule_wake(now + c, r as u64);
                                break;
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            todo.clear();
            if finished == n {
                break;
            }
            loop {
                match self.hosts.mesh.step(Time::MAX, u64::MAX) {
                    StepEnd::Ran => {}
                    _ => {
                        // Nothing left in the fabric: wake the ranks at the
                        // earliest engine deadline (a timeout names who).
                        let dl = (0..n).filter(|&r| phase[r] == Phase::InCall).map(|r| deadline[r]).min();
                        match dl {
                            Some(d) if d != u64::MAX => {
                                let at = (d * PS_PER_NS).max(self.hosts.mesh.now());
                                for r in (0..n).filter(|&r| phase[r] == Phase::InCall) {
                                    self.hosts.mesh.schedule_wake(at, r as u64);
                                }
                                continue;
                            }
                            _ => return Err(CollSimError::Stuck { at_ps: self.hosts.mesh.now() }),
                        }
                    }
                }
                for &tok in self.hosts.mesh.wakes() {
                    todo.push(tok as usize);
                }
                if !self.bg.is_empty() {
                    let touched: Vec<NodeId> =
                        self.hosts.mesh.touched().iter().copied().filter(|&v| self.bg.sends(v)).collect();
                    for v in touched {
                        self.bg.progress(&mut self.hosts.mesh, v)?;
                    }
                }
                let now = self.hosts.mesh.now();
                if now >= next_look {
                    next_look = now + DEADLINE_LOOK;
                    let due = (0..n).filter(|&r| {
                        phase[r] == Phase::InCall && deadline[r].saturating_mul(PS_PER_NS) <= now
                    });
                    todo.extend(due);
                }
                for &node in self.hosts.mesh.touched() {
                    if let Some(&r) = self.hosts.rank_of_node.get(node).filter(|&&r| r != usize::MAX) {
                        if !seen[r] && self.hosts.has_completions(r) {
                            seen[r] = true;
                            todo.push(r);
                        }
                    }
                }
                for &r in &todo {
                    seen[r] = false;
                }
                if !todo.is_empty() {
                    break;
                }
            }
        }
        // S_k, T_k
        let mut iter_us = Vec::with_capacity(iters);
        let mut coll_sum = 0.0;
        let mut prev = t0;
        for k in 0..iters {
            let (mut s, mut who) = (0, 0);
            for (r, st) in start.iter().enumerate() {
                if st[k] > s {
                    (s, who) = (st[k], r);
                }
            }
            self.last_in[who] += 1;
            let t = (0..n).map(|r| end[r][k]).max().unwrap_or(t0);
            coll_sum += (t - s) as f64 / 1e6;
            iter_us.push((t - prev) as f64 / 1e6);
            prev = t;
        }
        let spans =
            start.iter().zip(&end).map(|(s, e)| s.iter().copied().zip(e.iter().copied()).collect()).collect();
        Ok(Half { time_us: coll_sum / iters as f64, iter_us, wrong: self.check.map(|_| wrong), t0, spans })
    }
}
