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

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;

use roce_proto::cc::{CcAlgorithm, DcqcnParams};
use roce_proto::config::CnpConfig;
use roce_proto::{
    Access, AddressVector, ConnectAttr, CqId, DatagramMeta, Engine, EngineConfig, IcrcCheck, Instant, MemBuf,
    MrKeys, MrSpec, PathMtu, PdId, QpCap, QpInitAttr, QpType, RecvWr, SendOp, SendWr, Sge, Transmit, Wc,
    WcOpcode, WcStatus, MAX_DATAGRAM,
};

use crate::datagram::Datagram;
use crate::faults::{self, Faults};
use crate::hooks::{self, Fate, LinkHooks, NoHooks, Verdict};
use crate::queue::EventQueue;
use crate::report::{Ending, FctRecord, PfcRecord, QueueRef, QueueSample, RateSample, Report};
use crate::rng::SimRng;
use crate::routing::{flow_hash, Adjacency, Routes};
use crate::scenario::{
    pause_quantum_ps, serialisation_ps, EventKind, FlowOp, NodeId, NodeKind, Scenario, Scheduling, Time,
    PRIORITIES, PS_PER_NS, PS_PER_S,
};
use crate::switch::Mmu;

/// Why a scenario cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("invalid scenario: {0}")]
    Invalid(String),
    #[error("engine of host {host}: {what}")]
    Engine { host: NodeId, what: String },
}

/// Told how far a run has got, now and then (for a progress bar).
pub trait Progress {
    /// `now`: simulated time; `done` of `total` flows finished.
    fn update(&mut self, now: Time, done: usize, total: usize);
}

/// Work requests a flow keeps posted at once: enough that the whole of
/// any usual flow is posted at its start (HPCC's NIC has no window; the
/// engine's send window is `NicConfig::max_unacked_psns`).
const FLOW_WINDOW: u64 = 1 << 13;
/// Scatter-gather elements of a flow's WR: its source is a region of a
/// 1/`SRC_SGES` of `chunk_bytes` (at least 4 KiB), gathered that many
/// times. The payload is the same zeros; 320 hosts' 4 KiB sources stay in
/// cache where 64 KiB ones did not.
const SRC_SGES: usize = 16;

/// The bytes of a host's source region for WRs of `chunk` bytes.
fn src_region(chunk: usize) -> usize {
    chunk.div_ceil(SRC_SGES).max(4096).min(chunk)
}
/// ACK timeout code of the flows' QPs (4.096 us x 2^12 = 16.8 ms).
const ACK_TIMEOUT: u8 = 12;
/// Bytes of frames a NIC takes from its engine ahead of the wire (the
/// frames waiting for a paused priority count).
const NIC_QUEUE_CAP: u64 = 256 * 1024;
/// RoCEv2 opcodes the NIC sends at the ACK priority.
const OPCODE_ACK: u8 = 0x11;
const OPCODE_CNP: u8 = 0x81;
/// Events between progress reports.
const PROGRESS_EVERY: u64 = 1 << 16;

/// The PFC frames a port sends for a priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PfcSend {
    /// XOFF: a pause starts.
    Xoff,
    /// XOFF again before the last one's quanta run out.
    Refresh,
    /// XON: the pause ends.
    Xon,
}

/// A frame's record in its `Slot`: what only its ends read (the hops
/// carry a `Hop`).
#[derive(Clone, Copy)]
struct Frame {
    /// A PFC frame.
    pfc: bool,
    /// Bytes on the wire.
    wire: u32,
    /// Data: source and destination IPv4 and UDP ports.
    src_ip: u32,
    dst_ip: u32,
    sport: u16,
    dport: u16,
}

/// What a hop reads of a frame, carried by value in its arrival event and
/// in the queues: a switch forwards a frame without reading its slot,
/// which is out of cache by the time the frame arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hop {
    fid: u32,
    /// Data: the flow hash (ECMP); PFC: the pause quanta (0: XON).
    hash: u32,
    /// Data: the destination host.
    dst: u16,
    /// Bytes on the wire.
    wire: u16,
    /// At a switch: the ingress port it came in by (0-based), for the
    /// buffer accounting.
    in_port: u16,
    /// Bits 0-2: the priority (PFC: the priority paused); bits 3-4: the
    /// IP header's ECN codepoint (3 = CE); bit 5: a PFC frame.
    bits: u8,
}

impl Hop {
    const PFC: u8 = 1 << 5;

    fn prio(self) -> u8 {
        self.bits & 7
    }
    fn ecn(self) -> u8 {
        (self.bits >> 3) & 3
    }
    fn set_ecn(&mut self, ecn: u8) {
        self.bits = (self.bits & !(3 << 3)) | (ecn & 3) << 3;
    }
    fn pfc(self) -> bool {
        self.bits & Hop::PFC != 0
    }
}

/// A frame and its datagram in 128 aligned bytes, read by the frame's
/// receiving host (the hops carry a `Hop`) in one fetch: a CPU fetches a
/// 128-byte pair of lines when one misses.
#[repr(C, align(128))]
struct Slot {
    /// `None` when the slot is free.
    frame: Option<Frame>,
    /// The frame's datagram (none for a PFC frame).
    bytes: Datagram,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 128);

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

/// One side of a link. `repr(C)` keeps the declaration order: what every
/// hop reads comes first, in the first two cache lines (a port is some
/// 800 bytes, and a fabric's ports do not all stay in cache).
#[repr(C)]
pub(crate) struct Port {
    /// The end of the frame on the wire (the port is busy before it).
    busy_until: Time,
    delay: Time,
    ps_per_byte: Option<u64>,
    pub node: NodeId,
    pub peer: usize,
    link: usize,
    /// Its node is a host (read at every hop: cheaper here than in the
    /// large host records).
    at_host: bool,
    /// A `TxDone` is queued for `busy_until`: only when more waits to go,
    /// so an idle fabric spends no event on the end of each frame.
    txdone_queued: bool,
    /// Priorities the peer has paused (bit mask).
    pub paused: u8,
    /// Priorities whose queue holds frames (bit mask): what a hop asks of
    /// the eight queues, without reading them.
    queued: u8,
    /// Priorities whose queue the watchdog is dropping.
    pub wd_active: u8,
    ctrl: VecDeque<Hop>,
    /// The link's faults (loss included), if it has any; most links have
    /// none, and the box keeps them out of the hot lines.
    faults: Option<Box<Faults>>,
    pub qbytes: [u64; PRIORITIES],
    pub queues: [VecDeque<Hop>; PRIORITIES],
    /// Frames sent per priority (progress, for the deadlock detector).
    pub sent: [u64; PRIORITIES],
    /// The latest in-order arrival on the link (jitter keeps order).
    last_fifo: Time,
    rate_bps: u64,
    /// 1-based number within its node.
    pub number: u32,
    pause_epoch: [u32; PRIORITIES],
    /// When the XOFF this port sent for a priority is due for refresh
    /// (with pause quanta).
    refresh_at: [Option<Time>; PRIORITIES],
    /// Bumped only when a priority's paused state changes (not on a refresh).
    wd_epoch: [u32; PRIORITIES],
    deficit: [i64; PRIORITIES],
    rr_next: usize,
}

impl Port {
    fn ser(&self, wire: u32) -> Time {
        match self.ps_per_byte {
            Some(p) => wire as u64 * p,
            None => serialisation_ps(wire as u64, self.rate_bps),
        }
    }
    fn total_bytes(&self) -> u64 {
        self.qbytes.iter().sum()
    }

    #[inline]
    fn enqueue(&mut self, q: usize, hop: Hop) {
        self.queues[q].push_back(hop);
        self.queued |= 1 << q;
    }

    #[inline]
    fn dequeue(&mut self, q: usize) -> Option<Hop> {
        let f = self.queues[q].pop_front();
        if self.queues[q].is_empty() {
            self.queued &= !(1 << q);
        }
        f
    }

    /// The highest priority in `mask`, if any.
    #[inline]
    fn highest(mask: u8) -> Option<usize> {
        (mask != 0).then(|| 7 - mask.leading_zeros() as usize)
    }

    /// Sets the line rate, with the picoseconds per byte when exact.
    pub(crate) fn set_rate(&mut self, rate_bps: u64, ps_per_byte: Option<u64>) {
        self.rate_bps = rate_bps;
        self.ps_per_byte = ps_per_byte;
    }

    /// Sets the propagation delay.
    pub(crate) fn set_delay(&mut self, delay: Time) {
        self.delay = delay;
    }

    pub(crate) fn set_faults(&mut self, f: Faults) {
        self.faults = f.any().then(|| Box::new(f));
    }
}

struct Host {
    /// The NIC's (first) port.
    port: usize,
    /// With more than one port: the port towards each node (a mesh's
    /// hosts); empty: every frame leaves by `port`.
    egress: Vec<u32>,
    engine: Engine,
    /// What the scenario's flows use on this host (`None` for a host a
    /// client drives).
    fl: Option<FlowHost>,
    timer_at: Option<Time>,
    /// Bytes waiting in the NIC's egress queues.
    nic_queued: u64,
    stalled: bool,
    rx_backlog: VecDeque<Hop>,
    rx_bytes: u64,
    xoff_sent: bool,
}

impl Host {
    fn new(port: usize, egress: Vec<u32>, engine: Engine, fl: Option<FlowHost>) -> Host {
        Host {
            port,
            egress,
            engine,
            fl,
            timer_at: None,
            nic_queued: 0,
            stalled: false,
            rx_backlog: VecDeque::new(),
            rx_bytes: 0,
            xoff_sent: false,
        }
    }
}

/// A host's verbs objects for the scenario's flows.
struct FlowHost {
    pd: PdId,
    cq: CqId,
    src: MrKeys,
    dst: MrKeys,
    /// QPN -> flow.
    qp_flow: HashMap<u32, usize>,
    /// Flows sent from here whose UDP source port is not yet known.
    sports_unknown: usize,
}

#[derive(Default, Clone)]
struct FlowState {
    src_qpn: u32,
    dst_qpn: u32,
    wrs: u64,
    posted: u64,
    completed: u64,
    recvs_posted: u64,
    recvs_done: u64,
    started: bool,
    done: bool,
    sport: u16,
}

/// A host's IPv4 address, the HPCC simulator's: `0x0b000001 + (node <<
/// 8)`, i.e. `11.(node >> 8).(node & 0xff).1` (nodes number below 2^16).
pub fn host_ip(node: NodeId) -> u32 {
    0x0b00_0001 + ((node as u32) << 8)
}

/// The node whose address [`host_ip`] gives.
pub fn ip_node(ip: u32) -> NodeId {
    ((ip >> 8) & 0xffff) as NodeId
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
    addrs: HashMap<IpAddr, NodeId>,
    /// A client's wake-up tokens due at the time of the last step.
    pub(crate) wakes: Vec<u64>,
    /// (port, priority) pairs paused by their peer, over all ports.
    paused_queues: usize,
    now: Time,
    heap: EventQueue<Ev>,
    /// Flows in order of start; the next to start is queued.
    start_order: Vec<usize>,
    next_start: usize,
    real_pending: usize,
    pub ports: Vec<Port>,
    /// Global index of each node's first port.
    pub first_port: Vec<usize>,
    /// Frames, by id.
    slots: Vec<Slot>,
    free_frames: Vec<u32>,
    /// Buffers of datagrams kept whole (not compact, see `datagram`) that
    /// were delivered, for reuse.
    bufs: Vec<Vec<u8>>,
    /// What an engine writes a datagram into, and a compact datagram is
    /// rebuilt into for the receiving engine (`MAX_DATAGRAM` bytes).
    scratch: Vec<u8>,
    pub mmu: Vec<Option<Mmu>>,
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
    crate::scenario::validate(scn).map_err(|e| FabricError::Invalid(e.to_string()))
}

fn cc_of(scn: &Scenario, rate: u64) -> Result<(CcAlgorithm, CnpConfig), FabricError> {
    let nic = &scn.nic;
    match nic.cc.as_str() {
        "none" => Ok((CcAlgorithm::None, CnpConfig::default())),
        "dcqcn" => {
            let mut p = if nic.dcqcn_set.eq_ignore_ascii_case("hpcc") {
                DcqcnParams::hpcc_at(rate)
            } else {
                DcqcnParams::named(&nic.dcqcn_set)
                    .map_err(|e| FabricError::Invalid(format!("DCQCN set: {e}")))?
            };
            for kv in &nic.dcqcn_params {
                p.set_kv(kv).map_err(|e| FabricError::Invalid(format!("DCQCN parameter {kv}: {e}")))?;
            }
            p.validate().map_err(|e| FabricError::Invalid(format!("DCQCN parameters: {e}")))?;
            let cnp =
                CnpConfig { enabled: true, min_interval: p.min_time_between_cnps, dscp: Some(p.cnp_dscp) };
            Ok((CcAlgorithm::Dcqcn(p), cnp))
        }
        other => Err(FabricError::Invalid(format!("congestion control {other:?}: none or dcqcn"))),
    }
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
    /// The fabric of `scn`: ports, links, switches; no hosts yet.
    pub(crate) fn build(scn: Rc<Scenario>, hooks: H) -> Result<Sim<H>, FabricError> {
        let adj = Adjacency::new(&scn);
        // A `Hop` names nodes, ports and wire lengths in 16 bits.
        let nports: usize = adj.ports.iter().map(Vec::len).sum();
        if scn.nodes.len() > 1 << 16 || nports > 1 << 16 {
            return Err(FabricError::Invalid(format!(
                "{} nodes and {nports} ports: at most 65536 of each",
                scn.nodes.len()
            )));
        }
        // The largest datagram, in IPv6 (40 bytes) and UDP (8).
        let largest = scn.framing.data_wire_len(MAX_DATAGRAM + 40 + 8);
        if largest > u16::MAX as u32 {
            return Err(FabricError::Invalid(format!("a {largest}-byte frame on the wire: at most 65535")));
        }
        let routes = Routes::build(&scn, &adj).map_err(FabricError::Invalid)?;
        let mut ports = Vec::new();
        let mut first_port = Vec::with_capacity(scn.nodes.len());
        for (node, plist) in adj.ports.iter().enumerate() {
            first_port.push(ports.len());
            for (k, &(_, link)) in plist.iter().enumerate() {
                let l = &scn.links[link];
                let exact = (8 * PS_PER_S) % l.rate_bps == 0;
                ports.push(Port {
                    node,
                    at_host: scn.nodes[node].kind == NodeKind::Host,
                    number: k as u32 + 1,
                    peer: usize::MAX,
                    link,
                    rate_bps: l.rate_bps,
                    ps_per_byte: exact.then(|| 8 * PS_PER_S / l.rate_bps),
                    delay: l.delay_ps,
                    faults: {
                        let f = Faults {
                            jitter: l.faults.jitter_ps,
                            loss: l.loss,
                            reorder: l.faults.reorder,
                            reorder_delay: l.faults.reorder_delay_ps,
                            duplicate: l.faults.duplicate,
                            corrupt: l.faults.corrupt,
                        };
                        f.any().then(|| Box::new(f))
                    },
                    last_fifo: 0,
                    busy_until: 0,
                    txdone_queued: false,
                    ctrl: VecDeque::new(),
                    queues: Default::default(),
                    qbytes: [0; PRIORITIES],
                    paused: 0,
                    queued: 0,
                    pause_epoch: [0; PRIORITIES],
                    refresh_at: [None; PRIORITIES],
                    wd_epoch: [0; PRIORITIES],
                    wd_active: 0,
                    sent: [0; PRIORITIES],
                    deficit: [0; PRIORITIES],
                    rr_next: 0,
                });
            }
        }
        // Peers: the port at the other end of the same link.
        let mut by_link: Vec<Vec<usize>> = vec![Vec::new(); scn.links.len()];
        for (i, p) in ports.iter().enumerate() {
            by_link[p.link].push(i);
        }
        for ends in &by_link {
            let (x, y) = (ends[0], ends[1]);
            ports[x].peer = y;
            ports[y].peer = x;
        }
        let mut mmu = Vec::with_capacity(scn.nodes.len());
        for (node, spec) in scn.nodes.iter().enumerate() {
            mmu.push(match spec.kind {
                NodeKind::Switch => Some(Mmu::new(
                    &scn.switch,
                    &ports[first_port[node]..first_port[node] + adj.ports[node].len()]
                        .iter()
                        .map(|p| (p.rate_bps, p.delay))
                        .collect::<Vec<_>>(),
                    scn.framing.data_wire_len(MAX_DATAGRAM + 28) as u64,
                )),
                NodeKind::Host => None,
            });
        }
        let seed = scn.seed;
        let (nflows, nlinks) = (scn.flows.len(), scn.links.len());
        Ok(Sim {
            scn,
            hooks,
            txs: Vec::new(),
            addrs: HashMap::new(),
            wakes: Vec::new(),
            paused_queues: 0,
            now: 0,
            heap: EventQueue::default(),
            start_order: Vec::new(),
            next_start: 0,
            real_pending: 0,
            ports,
            first_port,
            slots: Vec::new(),
            free_frames: Vec::new(),
            bufs: Vec::new(),
            scratch: vec![0u8; MAX_DATAGRAM],
            mmu,
            hosts: Vec::new(),
            routes,
            flows: vec![FlowState::default(); nflows],
            flows_done: 0,
            report: Report::default(),
            rng_links: SimRng::new(seed).fork("links"),
            rng_ecn: SimRng::new(seed).fork("ecn"),
            link_up: vec![true; nlinks],
            wc: vec![Wc::EMPTY; 64],
            deadlock_suspect: None,
            ending: None,
        })
    }

    fn make_hosts(&mut self) -> Result<(), FabricError> {
        let scn = self.scn.clone();
        self.hosts = (0..scn.nodes.len()).map(|_| None).collect();
        let chunk = scn.nic.chunk_bytes as usize;
        for node in scn.hosts().collect::<Vec<_>>() {
            let port = self.first_port[node];
            let rate = self.ports[port].rate_bps;
            let ip = host_ip(node);
            let mut cfg = EngineConfig::new(vec![IpAddr::V4(Ipv4Addr::from(ip))]);
            let (cc, cnp) = cc_of(&scn, rate)?;
            cfg.cc = cc;
            cfg.cnp = cnp;
            cfg.line_rate_bps = rate;
            cfg.ecn = true;
            cfg.max_unacked_psns = scn.nic.max_unacked_psns;
            cfg.ack_req_every = scn.nic.ack_req_every;
            let err = |what: String| FabricError::Engine { host: node, what };
            let seed = scn.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (node as u64);
            let mut engine = Engine::new(cfg, seed);
            let pd: PdId = engine.alloc_pd();
            let cq = engine.create_cq(1 << 16).map_err(|e| err(e.to_string()))?;
            let reg = |engine: &mut Engine, len: usize| {
                engine.reg_mr(
                    pd,
                    MrSpec { buf: MemBuf::new(len), offset: 0, length: len, iova: None, access: Access::ALL },
                )
            };
            let src = reg(&mut engine, src_region(chunk)).map_err(|e| err(e.to_string()))?;
            let dst = reg(&mut engine, chunk).map_err(|e| err(e.to_string()))?;
            let fl = FlowHost { pd, cq, src, dst, qp_flow: HashMap::new(), sports_unknown: 0 };
            self.hosts[node] = Some(Host::new(port, Vec::new(), engine, Some(fl)));
        }
        Ok(())
    }

    fn make_flows(&mut self) -> Result<(), FabricError> {
        let scn = self.scn.clone();
        let mtu = PathMtu::from_bytes(scn.nic.mtu as usize).expect("validated");
        let chunk = scn.nic.chunk_bytes as u64;
        for (i, f) in scn.flows.iter().enumerate() {
            let mut qpn = [0u32; 2];
            let mut psn = [roce_wire::Psn::ZERO; 2];
            for (side, node) in [f.src, f.dst].into_iter().enumerate() {
                let h = self.hosts[node].as_mut().expect("flow ends are hosts");
                let fl = h.fl.as_mut().expect("a flow host");
                let init = QpInitAttr {
                    qp_type: QpType::Rc,
                    pd: fl.pd,
                    send_cq: fl.cq,
                    recv_cq: fl.cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: FLOW_WINDOW as u32,
                        max_recv_wr: 2 * FLOW_WINDOW as u32,
                        max_send_sge: SRC_SGES as u32,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                };
                qpn[side] = h
                    .engine
                    .create_qp(init)
                    .map_err(|e| FabricError::Engine { host: node, what: format!("create_qp: {e}") })?;
                psn[side] = h.engine.random_psn();
                let fl = h.fl.as_mut().expect("a flow host");
                fl.qp_flow.insert(qpn[side], i);
                if side == 0 {
                    fl.sports_unknown += 1;
                }
            }
            for (side, node) in [f.src, f.dst].into_iter().enumerate() {
                let peer = [f.dst, f.src][side];
                let mut av = AddressVector::new(IpAddr::V4(Ipv4Addr::from(host_ip(peer))));
                av.traffic_class = f.priority << 5;
                let mut c = ConnectAttr::new(av, qpn[1 - side], psn[1 - side], psn[side]);
                c.mtu = mtu;
                c.timeout = ACK_TIMEOUT;
                let h = self.hosts[node].as_mut().expect("host");
                h.engine
                    .connect_qp(qpn[side], &c)
                    .map_err(|e| FabricError::Engine { host: node, what: format!("connect_qp: {e}") })?;
            }
            let st = &mut self.flows[i];
            st.src_qpn = qpn[0];
            st.dst_qpn = qpn[1];
            st.wrs = f.size.div_ceil(chunk);
            if f.op == FlowOp::Send {
                self.post_recvs(i);
            }
        }
        let mut order: Vec<usize> = (0..scn.flows.len()).collect();
        order.sort_by_key(|&i| scn.flows[i].start_ps);
        if let Some(&first) = order.first() {
            self.push(scn.flows[first].start_ps, Ev::FlowStart(first as u32));
        }
        self.start_order = order;
        Ok(())
    }

    // ------------------------------------------------------------ events

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
            Ev::PauseExpire(p, q, epoch) => {
                let port = &mut self.ports[p as usize];
                if port.pause_epoch[q as usize] == epoch && port.paused & (1 << q) != 0 {
                    port.paused &= !(1 << q);
                    self.paused_queues -= 1;
                    port.pause_epoch[q as usize] = epoch.wrapping_add(1);
                    port.wd_epoch[q as usize] = port.wd_epoch[q as usize].wrapping_add(1);
                    self.start_tx(p as usize);
                }
            }
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
        let Some(t) = self.heap.peek_time() else { return StepEnd::Idle };
        if t >= until {
            return StepEnd::TimeLimit;
        }
        if self.report.counters.events >= max_events {
            return StepEnd::EventLimit;
        }
        while self.heap.peek_time() == Some(t) {
            let (t, ev) = self.heap.pop().expect("peeked");
            self.handle(t, ev);
        }
        StepEnd::Ran
    }

    // ------------------------------------------------------------ clients

    /// Puts a client's host on `node` (a host node): its engine, and the
    /// port towards each node (`egress[node]`; its own entry unused).
    pub(crate) fn add_client_host(&mut self, node: NodeId, engine: Engine, egress: Vec<u32>) {
        self.hosts.resize_with(self.scn.nodes.len(), || None);
        self.hosts[node] = Some(Host::new(self.first_port[node], egress, engine, None));
    }

    /// Who has which address, for a client's hosts.
    pub(crate) fn set_addresses(&mut self, addrs: HashMap<IpAddr, NodeId>) {
        self.addrs = addrs;
    }

    pub(crate) fn host_of(&self, a: IpAddr) -> Option<NodeId> {
        self.addrs.get(&a).copied()
    }

    pub(crate) fn engine(&self, node: NodeId) -> &Engine {
        &self.hosts[node].as_ref().expect("a host").engine
    }

    pub(crate) fn engine_mut(&mut self, node: NodeId) -> &mut Engine {
        &mut self.hosts[node].as_mut().expect("a host").engine
    }

    pub(crate) fn now(&self) -> Time {
        self.now
    }

    pub(crate) fn counters(&self) -> &crate::report::Counters {
        &self.report.counters
    }

    pub(crate) fn pending(&self) -> usize {
        self.heap.len()
    }

    pub(crate) fn schedule_wake(&mut self, at: Time, token: u64) {
        self.push(at.max(self.now), Ev::Wake(token));
    }

    /// Every host's ports start what they can and its engine's timer is
    /// re-armed (after a client posted work). Every host has a port.
    pub(crate) fn kick(&mut self) {
        for node in 0..self.hosts.len() {
            if self.hosts[node].is_none() {
                continue;
            }
            let ports =
                self.first_port[node]..self.first_port.get(node + 1).copied().unwrap_or(self.ports.len());
            for p in ports {
                self.start_tx(p);
            }
            self.arm_timer(node);
        }
    }

    fn finish(mut self) -> Report {
        self.report.end_ps = self.now;
        // Every live data frame is inside: queued, on a link, or held by a
        // stalled NIC.
        self.report.bytes_in_fabric =
            self.slots.iter().filter_map(|s| s.frame).filter(|f| !f.pfc).map(|f| f.wire as u64).sum();
        self.report.ending = self.ending.take();
        for h in self.hosts.iter().flatten() {
            let c = h.engine.counters();
            self.report.counters.retry_timeouts += c.completer_retry_err;
            self.report.counters.seq_naks += c.rcvd_seq_err;
        }
        self.report
    }

    // ------------------------------------------------------------ frames

    fn alloc_frame(&mut self, f: Frame, bytes: Datagram) -> u32 {
        if let Some(i) = self.free_frames.pop() {
            self.slots[i as usize] = Slot { frame: Some(f), bytes };
            i
        } else {
            self.slots.push(Slot { frame: Some(f), bytes });
            if H::ACTIVE {
                self.txs.push(None);
            }
            (self.slots.len() - 1) as u32
        }
    }

    /// Drops a frame, counting a data frame's bytes.
    fn drop_frame(&mut self, hop: Hop) {
        if !hop.pfc() {
            self.report.counters.dropped_bytes += hop.wire as u64;
        }
        self.free_frame(hop.fid);
    }

    fn free_frame(&mut self, id: u32) {
        let slot = &mut self.slots[id as usize];
        if slot.frame.take().is_some() {
            std::mem::replace(&mut slot.bytes, Datagram::none()).recycle(&mut self.bufs);
        }
        self.free_frames.push(id);
    }

    fn frame(&self, id: u32) -> &Frame {
        self.slots[id as usize].frame.as_ref().expect("live frame")
    }

    fn pfc_frame(&mut self, prio: u8, quanta: u16) -> Hop {
        let wire = self.scn.framing.pfc_wire_len();
        let f = Frame { pfc: true, wire, src_ip: 0, dst_ip: 0, sport: 0, dport: 0 };
        let fid = self.alloc_frame(f, Datagram::none());
        Hop { fid, hash: quanta as u32, dst: 0, wire: wire as u16, in_port: 0, bits: Hop::PFC | (prio & 7) }
    }

    /// Sends a PFC frame out of port `p` (ahead of any data): an XOFF
    /// (`pause`) or an XON. With pause quanta, an XOFF is refreshed every
    /// half of its pause while its cause remains; an XON cancels that.
    fn send_pfc(&mut self, p: usize, prio: u8, what: PfcSend) {
        let pause = what != PfcSend::Xon;
        let quanta = match (pause, self.scn.switch.pause_quanta) {
            (false, _) => 0,
            (true, Some(q)) => q.max(1),
            (true, None) => u16::MAX,
        };
        let f = self.pfc_frame(prio, quanta);
        let c = &mut self.report.counters;
        match what {
            PfcSend::Xoff => c.pfc_pause_sent += 1,
            PfcSend::Refresh => c.pfc_refresh_sent += 1,
            PfcSend::Xon => c.pfc_resume_sent += 1,
        }
        self.ports[p].refresh_at[prio as usize] = None;
        if pause {
            if let Some(q) = self.scn.switch.pause_quanta {
                let half = pause_quantum_ps(self.ports[p].rate_bps) * q.max(1) as Time / 2;
                let at = self.now + half.max(1);
                self.ports[p].refresh_at[prio as usize] = Some(at);
                self.push(at, Ev::PauseRefresh(p as u32, prio));
            }
        }
        self.ports[p].ctrl.push_back(f);
        self.start_tx(p);
    }

    /// The refresh of the XOFF sent on port `p` for `prio` is due: sent
    /// again if its cause remains (a congested switch ingress, a stalled
    /// NIC). A refresh cancelled by an XON, or replaced by a later XOFF's,
    /// does nothing.
    fn pause_refresh(&mut self, p: usize, prio: u8) {
        if self.ports[p].refresh_at[prio as usize] != Some(self.now) {
            return;
        }
        let node = self.ports[p].node;
        let still = match (&self.mmu[node], &self.hosts[node]) {
            (Some(mmu), _) => mmu.is_paused(p - self.first_port[node], prio),
            (None, Some(h)) => h.xoff_sent,
            _ => false,
        };
        if still {
            self.send_pfc(p, prio, PfcSend::Refresh);
        }
    }

    /// Starts the next frame on port `p` if it is idle.
    fn start_tx(&mut self, p: usize) {
        if self.now < self.ports[p].busy_until {
            self.wake_at_tx_end(p);
            return;
        }
        let (node, host) = (self.ports[p].node, self.ports[p].at_host);
        let hop = if host { self.host_dequeue(node, p) } else { self.switch_dequeue(p) };
        if let Some(hop) = hop {
            self.transmit(p, hop);
        }
    }

    /// Puts a frame on idle port `p`'s wire, now.
    fn transmit(&mut self, p: usize, hop: Hop) {
        let (node, host) = (self.ports[p].node, self.ports[p].at_host);
        let wire = hop.wire as u32;
        let port = &mut self.ports[p];
        let ser = port.ser(wire);
        port.busy_until = self.now + ser;
        let (delay, link, faulty) = (port.delay, port.link, port.faults.is_some());
        let more = !port.ctrl.is_empty()
            || port.queued != 0
            || (host && self.hosts[node].as_ref().is_some_and(|h| h.engine.has_transmit()));
        if more {
            self.wake_at_tx_end(p);
        }
        self.report.counters.packet_hops += 1;
        let arrive = self.now + ser + delay;
        if !self.link_up[link] {
            self.report.counters.dropped_link += 1;
            self.drop_frame(hop);
            return;
        }
        let hooked = H::ACTIVE && !hop.pfc();
        if !faulty && !hooked {
            self.on_the_wire(p, arrive, hop);
            return;
        }
        self.send_copies(p, hop, arrive, hooked);
    }

    /// Puts a frame on port `p`'s faulty or watched link, due to arrive at
    /// `arrive` were the link perfect: the client's verdict, else the
    /// link's faults, decide what copies arrive when.
    fn send_copies(&mut self, p: usize, hop: Hop, arrive: Time, hooked: bool) {
        let fid = hop.fid;
        let (from, to) = (self.ports[p].node, self.ports[self.ports[p].peer].node);
        let n = self.slots[fid as usize].bytes.len();
        let mut verdict = Verdict::Pass;
        // The frame whose bytes `scratch` holds, as they are now.
        let mut in_scratch = None;
        if hooked {
            self.slots[fid as usize].bytes.write_to(&mut self.scratch);
            in_scratch = Some(fid);
            verdict = self.hooks.judge(self.now, from, to, &self.scratch[..n]);
        }
        let intact = |at| faults::Copy { arrive: Some(at), flip_bit: None };
        // Each copy: when it arrives (if it does), and a flipped bit.
        let copies: [Option<faults::Copy>; 2] = match verdict {
            Verdict::Drop => [Some(faults::Copy { arrive: None, flip_bit: None }), None],
            Verdict::Delay(d) => [Some(intact(arrive + d)), None],
            Verdict::Duplicate => [Some(intact(arrive)), Some(intact(arrive))],
            Verdict::Pass => match self.ports[p].faults.as_deref().copied() {
                None => [Some(intact(arrive)), None],
                Some(faults) => {
                    let mut last_fifo = self.ports[p].last_fifo;
                    let dealt = faults.deal(&mut self.rng_links, arrive, n, &mut last_fifo);
                    self.ports[p].last_fifo = last_fifo;
                    dealt
                }
            },
        };
        // Arriving copies: the first is the frame, a second its copy (made
        // before any bit of the first is flipped). A lost copy takes none.
        let arriving = copies.iter().flatten().filter(|c| c.arrive.is_some()).count();
        let second = (arriving == 2).then(|| self.clone_frame(fid));
        let mut next = [fid, second.unwrap_or(fid)].into_iter();
        for (i, copy) in copies.into_iter().flatten().enumerate() {
            if i == 1 {
                self.report.counters.duplicated += 1;
            }
            let id =
                if copy.arrive.is_some() { next.next().expect("one frame per arriving copy") } else { fid };
            if let Some(bit) = copy.flip_bit {
                self.slots[id as usize].bytes.flip_bit(bit as usize, &mut self.bufs);
                self.report.counters.corrupted += 1;
                if in_scratch == Some(id) {
                    in_scratch = None;
                }
            }
            if hooked {
                let fate = match (copy.arrive, copy.flip_bit) {
                    (None, _) => Fate::Lost,
                    (Some(_), Some(bit)) => Fate::Corrupted { bit },
                    (Some(_), None) => Fate::Delivered,
                };
                if in_scratch != Some(id) {
                    self.slots[id as usize].bytes.write_to(&mut self.scratch);
                    in_scratch = Some(id);
                }
                let tx = self.txs[id as usize].as_ref().expect("a host's frame has its transmit");
                self.hooks.on_copy(&hooks::Copy {
                    sent: self.now,
                    arrive: copy.arrive,
                    from,
                    to: Some(to),
                    copy: i as u8,
                    fate,
                    tx,
                    bytes: &self.scratch[..n],
                });
            }
            let Some(at) = copy.arrive else {
                self.report.counters.dropped_link += 1;
                if !hop.pfc() {
                    self.report.counters.dropped_bytes += hop.wire as u64;
                }
                continue;
            };
            self.on_the_wire(p, at, Hop { fid: id, ..hop });
        }
        if arriving == 0 {
            self.free_frame(fid);
        }
    }

    /// A frame reaches the far end of port `p`'s link at `at`: an event of
    /// its own (one per frame on the wire; the queue reads its events in
    /// order, cheaper than a per-link queue read at random).
    fn on_the_wire(&mut self, p: usize, at: Time, hop: Hop) {
        let port = self.ports[p].peer as u16;
        let Hop { fid, hash, dst, wire, bits, .. } = hop;
        self.push(at, Ev::Arrive { port, dst, wire, bits, fid, hash });
    }

    /// A copy of frame `fid` (a duplicate on a faulty link).
    fn clone_frame(&mut self, fid: u32) -> u32 {
        let copy = *self.frame(fid);
        let bytes = self.slots[fid as usize].bytes.copy(&mut self.bufs);
        let id = self.alloc_frame(copy, bytes);
        if H::ACTIVE {
            self.txs[id as usize] = self.txs[fid as usize];
        }
        id
    }

    /// Queues a `TxDone` for the end of port `p`'s frame if none is.
    fn wake_at_tx_end(&mut self, p: usize) {
        let port = &mut self.ports[p];
        if !port.txdone_queued {
            port.txdone_queued = true;
            let at = port.busy_until;
            self.push(at, Ev::TxDone(p as u32));
        }
    }

    fn arrive(&mut self, p: usize, hop: Hop) {
        if hop.pfc() {
            self.free_frame(hop.fid);
            self.pfc_received(p, hop.prio(), hop.hash as u16);
            return;
        }
        let (node, host) = (self.ports[p].node, self.ports[p].at_host);
        if host {
            self.host_receive(node, hop);
        } else {
            self.switch_receive(p, hop);
        }
    }

    /// A PFC frame reached port `p`: its sender stops or resumes `prio`
    /// (XOFF/XON: the pause time is not used as a timer).
    fn pfc_received(&mut self, p: usize, prio: u8, quanta: u16) {
        let pause = quanta > 0;
        let bit = 1u8 << prio;
        if pause && self.scn.switch.pause_quanta.is_some() {
            // The pause lasts `quanta` from now, whether it starts or
            // refreshes one.
            let port = &mut self.ports[p];
            port.pause_epoch[prio as usize] = port.pause_epoch[prio as usize].wrapping_add(1);
            let epoch = port.pause_epoch[prio as usize];
            let until = self.now + pause_quantum_ps(port.rate_bps) * quanta as Time;
            self.push(until, Ev::PauseExpire(p as u32, prio, epoch));
        }
        let port = &mut self.ports[p];
        let was = port.paused & bit != 0;
        if was == pause {
            return;
        }
        if pause {
            port.paused |= bit;
            self.paused_queues += 1;
        } else {
            port.paused &= !bit;
            self.paused_queues -= 1;
        }
        if !(pause && self.scn.switch.pause_quanta.is_some()) {
            port.pause_epoch[prio as usize] = port.pause_epoch[prio as usize].wrapping_add(1);
        }
        port.wd_epoch[prio as usize] = port.wd_epoch[prio as usize].wrapping_add(1);
        let epoch = port.wd_epoch[prio as usize];
        let (node, number) = (port.node, port.number);
        let wd_active = port.wd_active & bit != 0;
        self.report.pfc.push(PfcRecord {
            time_ps: self.now,
            node,
            is_switch: self.hosts[node].is_none(),
            port: number,
            priority: prio,
            pause,
        });
        if let Some(wd) = self.scn.watchdog {
            if self.hosts[node].is_none() {
                if pause {
                    self.push(self.now + wd.timeout_ps, Ev::WatchdogCheck(p as u32, prio, epoch));
                } else if wd_active {
                    self.push(self.now + wd.restore_ps, Ev::WatchdogRestore(p as u32, prio, epoch));
                }
            }
        }
        if !pause {
            self.start_tx(p);
        }
    }

    // ------------------------------------------------------------ switches

    fn switch_receive(&mut self, p: usize, mut hop: Hop) {
        let node = self.ports[p].node;
        let (dst, hash, prio, wire) = (hop.dst as NodeId, hop.hash, hop.prio(), hop.wire);
        let Some(k) = self.routes.next_hop(node, dst, hash) else {
            self.report.counters.dropped_unroutable += 1;
            self.drop_frame(hop);
            return;
        };
        let eg = self.first_port[node] + k;
        let ip = p - self.first_port[node];
        let lossless = self.scn.switch.pfc_enabled && self.scn.switch.lossless_mask & (1 << prio) != 0;
        let mmu = self.mmu[node].as_mut().expect("switch");
        if !mmu.admit(ip, prio, wire as u64, lossless) {
            self.report.counters.dropped_buffer += 1;
            self.drop_frame(hop);
            return;
        }
        mmu.charge(ip, prio, wire as u64);
        let pause = lossless && mmu.should_pause(ip, prio);
        if pause {
            mmu.set_paused(ip, prio, true);
        }
        hop.in_port = ip as u16;
        if pause {
            self.send_pfc(p, prio, PfcSend::Xoff);
        }
        let port = &mut self.ports[eg];
        port.qbytes[prio as usize] += wire as u64;
        // An idle port with nothing queued and the priority free sends the
        // frame at once: what queueing it and taking it back would do.
        let free = (port.paused & !port.wd_active) & (1 << prio) == 0;
        let strict = matches!(self.scn.switch.scheduling, Scheduling::Strict);
        if strict && free && port.queued == 0 && port.ctrl.is_empty() && self.now >= port.busy_until {
            self.switch_release(eg, prio as usize, &mut hop, true);
            self.transmit(eg, hop);
            return;
        }
        port.enqueue(prio as usize, hop);
        self.start_tx(eg);
    }

    /// The next frame switch port `p` sends: PFC frames first, then the
    /// scheduler's pick among the priorities the peer has not paused.
    fn switch_dequeue(&mut self, p: usize) -> Option<Hop> {
        if let Some(f) = self.ports[p].ctrl.pop_front() {
            return Some(f);
        }
        let q = self.pick_queue(p)?;
        let mut hop = self.ports[p].dequeue(q).expect("non-empty");
        self.switch_release(p, q, &mut hop, true);
        Some(hop)
    }

    fn pick_queue(&mut self, p: usize) -> Option<usize> {
        let port = &mut self.ports[p];
        // Holding frames, and not paused (or paused but being drained).
        let sendable = port.queued & !(port.paused & !port.wd_active);
        let ready = |q: usize| sendable & (1 << q) != 0;
        match &self.scn.switch.scheduling {
            Scheduling::Strict => Port::highest(sendable),
            Scheduling::Dwrr { weights } => {
                if let Some(q) = (0..PRIORITIES).rev().find(|&q| weights[q] == 0 && ready(q)) {
                    return Some(q);
                }
                if !(0..PRIORITIES).any(|q| weights[q] > 0 && ready(q)) {
                    return None;
                }
                loop {
                    let q = port.rr_next;
                    if weights[q] > 0 && ready(q) {
                        let wire = port.queues[q][0].wire as i64;
                        if port.deficit[q] >= wire {
                            port.deficit[q] -= wire;
                            return Some(q);
                        }
                        port.deficit[q] += weights[q] as i64;
                    } else {
                        port.deficit[q] = 0;
                    }
                    port.rr_next = (q + 1) % PRIORITIES;
                }
            }
        }
    }

    /// Takes a frame (priority `q`) out of switch port `p`'s queue
    /// accounting: the buffer, ECN marking (when `transmit`), and an XON to
    /// its ingress port when that port's queue has drained enough.
    fn switch_release(&mut self, p: usize, q: usize, hop: &mut Hop, transmit: bool) {
        let node = self.ports[p].node;
        let (wire, in_port) = (hop.wire as u64, hop.in_port as usize);
        self.ports[p].qbytes[q] -= wire;
        let k = p - self.first_port[node];
        let qbytes = self.ports[p].qbytes[q];
        let mmu = self.mmu[node].as_mut().expect("switch");
        mmu.discharge(in_port, q as u8, wire);
        let resume = mmu.is_paused(in_port, q as u8) && mmu.should_resume(in_port, q as u8);
        if resume {
            mmu.set_paused(in_port, q as u8, false);
        }
        if transmit {
            self.ports[p].sent[q] += 1;
            let sw = &self.scn.switch;
            if sw.ecn_enabled && sw.lossless_mask & (1 << q) != 0 {
                let mmu = self.mmu[node].as_ref().expect("switch");
                let (kmin, kmax, pmax) = mmu.ecn[k];
                let ect = hop.ecn() != 0;
                let mark = ect
                    && (qbytes > kmax
                        || (qbytes > kmin
                            && self.rng_ecn.chance(pmax * (qbytes - kmin) as f64 / (kmax - kmin) as f64)));
                if mark {
                    hop.set_ecn(3);
                    self.report.counters.ecn_marked += 1;
                }
            }
        }
        if resume {
            let ip = self.first_port[node] + in_port;
            self.send_pfc(ip, q as u8, PfcSend::Xon);
        }
    }

    // ------------------------------------------------------------ watchdog

    fn watchdog_check(&mut self, p: usize, q: u8, epoch: u32) {
        let Some(wd) = self.scn.watchdog else { return };
        let port = &self.ports[p];
        if port.wd_epoch[q as usize] != epoch || port.paused & (1 << q) == 0 {
            return;
        }
        if port.queues[q as usize].is_empty() {
            // Paused but holding nothing yet: look again later.
            self.push(self.now + wd.timeout_ps, Ev::WatchdogCheck(p as u32, q, epoch));
            return;
        }
        if port.wd_active & (1 << q) != 0 {
            return;
        }
        let qref = QueueRef { node: port.node, port: port.number, priority: q };
        self.ports[p].wd_active |= 1 << q;
        self.report.counters.watchdog_fired += 1;
        self.report.watchdog_log.push((self.now, qref));
        while let Some(mut hop) = self.ports[p].dequeue(q as usize) {
            self.switch_release(p, q as usize, &mut hop, false);
            self.report.counters.dropped_watchdog += 1;
            self.drop_frame(hop);
        }
        self.start_tx(p);
    }

    fn watchdog_restore(&mut self, p: usize, q: u8, epoch: u32) {
        let port = &mut self.ports[p];
        if port.wd_epoch[q as usize] == epoch && port.paused & (1 << q) == 0 {
            port.wd_active &= !(1 << q);
        }
    }

    // ------------------------------------------------------------ hosts

    /// The next frame a host NIC sends: a PFC frame, else the highest
    /// unpaused priority's, else whatever the engine has now (frames for a
    /// paused priority wait in their queue).
    ///
    /// A NIC with several ports (a mesh's host) puts what the engine gives
    /// in the queue of the port towards its destination, and starts that
    /// port.
    fn host_dequeue(&mut self, node: NodeId, p: usize) -> Option<Hop> {
        if let Some(f) = self.ports[p].ctrl.pop_front() {
            return Some(f);
        }
        loop {
            let port = &mut self.ports[p];
            if let Some(q) = Port::highest(port.queued & !port.paused) {
                let hop = port.dequeue(q).expect("non-empty");
                let wire = hop.wire as u64;
                port.qbytes[q] -= wire;
                port.sent[q] += 1;
                self.hosts[node].as_mut().expect("host").nic_queued -= wire;
                return Some(hop);
            }
            if self.hosts[node].as_ref().expect("host").nic_queued >= NIC_QUEUE_CAP {
                return None;
            }
            let hop = self.poll_engine(node)?;
            let (q, wire, dst) = (hop.prio() as usize, hop.wire as u64, hop.dst as usize);
            let h = self.hosts[node].as_mut().expect("host");
            let out = if h.egress.is_empty() { p } else { h.egress[dst] as usize };
            let port = &mut self.ports[out];
            if out == p && port.queued == 0 && port.paused & (1 << q) == 0 {
                // Nothing ahead of it: it goes now, without queueing.
                port.sent[q] += 1;
                return Some(hop);
            }
            h.nic_queued += wire;
            port.enqueue(q, hop);
            port.qbytes[q] += wire;
            if out != p {
                self.start_tx(out);
            }
        }
    }

    /// One datagram from the engine as a frame, classified by priority.
    fn poll_engine(&mut self, node: NodeId) -> Option<Hop> {
        let now = Instant::from_nanos(self.now / PS_PER_NS);
        let (t, dst_host) = loop {
            let h = self.hosts[node].as_mut().expect("host");
            let t = h.engine.poll_transmit(now, &mut self.scratch)?;
            if self.addrs.is_empty() {
                break (t, None);
            }
            // A client's hosts: the destination by its address.
            if let Some(&dst) = self.addrs.get(&t.meta.dst) {
                break (t, Some(dst));
            }
            self.report.counters.dropped_unroutable += 1;
            if H::ACTIVE {
                self.hooks.on_copy(&hooks::Copy {
                    sent: self.now,
                    arrive: None,
                    from: node,
                    to: None,
                    copy: 0,
                    fate: Fate::Unroutable,
                    tx: &t,
                    bytes: &self.scratch[..t.len],
                });
            }
        };
        let h = self.hosts[node].as_mut().expect("host");
        let bytes = Datagram::store(&self.scratch[..t.len], &mut self.bufs);
        let opcode = self.scratch[0];
        let ack = opcode == OPCODE_ACK || opcode == OPCODE_CNP;
        if opcode == OPCODE_CNP {
            self.report.counters.cnps += 1;
        }
        let prio = match (ack, self.scn.nic.ack_priority) {
            (true, Some(p)) => p,
            _ => (t.traffic_class >> 5) & 7,
        };
        let (src_ip, dst_ip) = match (t.meta.src, t.meta.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (u32::from(s), u32::from(d)),
            _ => (0, 0),
        };
        if let Some(fl) = h.fl.as_mut().filter(|f| !ack && f.sports_unknown > 0) {
            if let Some(&flow) = fl.qp_flow.get(&t.qpn) {
                if self.flows[flow].sport == 0 && self.scn.flows[flow].src == node {
                    self.flows[flow].sport = t.meta.src_port;
                    fl.sports_unknown -= 1;
                }
            }
        }
        let ip_header = if t.meta.dst.is_ipv4() { 20 } else { 40 };
        let wire = self.scn.framing.data_wire_len(ip_header + 8 + t.len);
        self.report.counters.host_tx_frames += 1;
        self.report.counters.host_tx_bytes += wire as u64;
        let fid = self.alloc_frame(
            Frame { pfc: false, wire, src_ip, dst_ip, sport: t.meta.src_port, dport: t.meta.dst_port },
            bytes,
        );
        if H::ACTIVE {
            self.txs[fid as usize] = Some(t);
        }
        Some(Hop {
            fid,
            hash: flow_hash(src_ip, dst_ip, t.meta.src_port, t.meta.dst_port),
            // Node numbers and wire lengths fit 16 bits (`validate`).
            dst: dst_host.unwrap_or_else(|| ip_node(dst_ip)) as u16,
            wire: wire as u16,
            in_port: 0,
            bits: (prio & 7) | (t.traffic_class & 3) << 3,
        })
    }

    fn host_receive(&mut self, node: NodeId, hop: Hop) {
        let h = self.hosts[node].as_mut().expect("host");
        if h.stalled {
            let wire = hop.wire as u64;
            if h.rx_bytes + wire > 2 * self.scn.nic.rx_xoff_bytes {
                // Past the XOFF point by more than a headroom's worth: a
                // sender that ignores the pause loses frames here.
                self.report.counters.dropped_nic_rx += 1;
                self.drop_frame(hop);
                return;
            }
            h.rx_backlog.push_back(hop);
            h.rx_bytes += wire;
            if h.rx_bytes >= self.scn.nic.rx_xoff_bytes && !h.xoff_sent {
                h.xoff_sent = true;
                let p = h.port;
                self.send_pfc(p, hop.prio(), PfcSend::Xoff);
            }
            return;
        }
        self.deliver(node, hop);
        self.host_after_input(node);
    }

    fn deliver(&mut self, node: NodeId, hop: Hop) {
        let fid = hop.fid;
        let f = self.slots[fid as usize].frame.as_ref().expect("frame");
        let ecn = hop.ecn();
        let meta = match self.txs.get(fid as usize).copied().flatten() {
            // A client's host: the engine's addresses, v4 or v6.
            Some(tx) => DatagramMeta { ecn, ipv4_id: tx.meta.ipv4_id.or(Some(0)), ..tx.meta },
            None => DatagramMeta {
                src: IpAddr::V4(Ipv4Addr::from(f.src_ip)),
                dst: IpAddr::V4(Ipv4Addr::from(f.dst_ip)),
                src_port: f.sport,
                dst_port: f.dport,
                ecn,
                ipv4_id: Some(0),
            },
        };
        let now = Instant::from_nanos(self.now / PS_PER_NS);
        let h = self.hosts[node].as_mut().expect("host");
        self.report.counters.host_rx_frames += 1;
        self.report.counters.host_rx_bytes += f.wire as u64;
        let d = &self.slots[fid as usize].bytes;
        let n = d.len();
        d.write_to(&mut self.scratch);
        let check = h.engine.handle_datagram(now, &meta, &self.scratch[..n]);
        if matches!(check, IcrcCheck::Failed | IcrcCheck::Malformed) {
            self.report.counters.engine_rx_errors += 1;
        }
        self.free_frame(fid);
    }

    /// After the engine took input: reap completions, keep the flows
    /// posted, start the wire, re-arm the engine's timer.
    fn host_after_input(&mut self, node: NodeId) {
        self.reap(node);
        let p = self.hosts[node].as_ref().expect("host").port;
        self.start_tx(p);
        self.arm_timer(node);
    }

    fn arm_timer(&mut self, node: NodeId) {
        let p = self.hosts[node].as_ref().expect("host").port;
        let busy = self.now < self.ports[p].busy_until;
        let h = self.hosts[node].as_mut().expect("host");
        let Some(dl) = h.engine.poll_timeout() else {
            h.timer_at = None;
            return;
        };
        let now_ns = self.now / PS_PER_NS;
        let at = if dl.as_nanos() > now_ns {
            dl.as_nanos() * PS_PER_NS
        } else if busy {
            // Due now, but the wire is busy: the end of the frame wakes
            // the NIC, and the engine with it.
            self.wake_at_tx_end(p);
            return;
        } else {
            (now_ns + 1) * PS_PER_NS
        };
        // `timer_at` is the earliest wake-up queued: a later one is not
        // queued (that wake-up re-arms), an earlier one replaces it.
        if h.timer_at.is_none_or(|q| at < q) {
            h.timer_at = Some(at);
            self.push(at, Ev::HostTimer(node as u32));
        }
    }

    fn reap(&mut self, node: NodeId) {
        loop {
            let h = self.hosts[node].as_mut().expect("host");
            // A client's host: the client polls.
            let Some(fl) = &h.fl else { return };
            let n = h.engine.poll_cq(fl.cq, &mut self.wc).unwrap_or_default();
            if n == 0 {
                return;
            }
            for i in 0..n {
                let wc = self.wc[i];
                let flow = wc.wr_id as usize;
                if flow >= self.flows.len() || self.flows[flow].done {
                    continue;
                }
                if wc.status != WcStatus::Success {
                    self.flows[flow].done = true;
                    self.flows_done += 1;
                    self.report.counters.flows_failed += 1;
                    continue;
                }
                if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                    self.flows[flow].recvs_done += 1;
                    self.post_recvs(flow);
                    continue;
                }
                let st = &mut self.flows[flow];
                st.completed += 1;
                if st.completed == st.wrs {
                    st.done = true;
                    self.flows_done += 1;
                    let spec = &self.scn.flows[flow];
                    self.report.fct.push(FctRecord {
                        flow,
                        src: spec.src,
                        dst: spec.dst,
                        sport: st.sport,
                        dport: roce_wire::ROCE_PORT,
                        size: spec.size,
                        start_ps: spec.start_ps,
                        fct_ps: self.now - spec.start_ps,
                    });
                } else {
                    self.post_sends(flow);
                }
            }
        }
    }

    fn flow_start(&mut self, i: usize) {
        self.next_start += 1;
        if let Some(&next) = self.start_order.get(self.next_start) {
            self.push(self.scn.flows[next].start_ps, Ev::FlowStart(next as u32));
        }
        self.flows[i].started = true;
        self.post_sends(i);
        let src = self.scn.flows[i].src;
        self.host_after_input(src);
    }

    fn post_sends(&mut self, i: usize) {
        let spec = &self.scn.flows[i];
        let chunk = self.scn.nic.chunk_bytes as u64;
        let (src_qpn, dst) = (self.flows[i].src_qpn, spec.dst);
        let remote = {
            let d = self.hosts[dst].as_ref().expect("host");
            d.fl.as_ref().expect("a flow host").dst
        };
        let h = self.hosts[spec.src].as_mut().expect("host");
        let src = h.fl.as_ref().expect("a flow host").src;
        let st = &mut self.flows[i];
        while st.posted < st.wrs && st.posted - st.completed < FLOW_WINDOW {
            let len = if st.posted + 1 == st.wrs { spec.size - chunk * (st.wrs - 1) } else { chunk };
            let region = src_region(chunk as usize) as u64;
            let sges = (0..len.div_ceil(region))
                .map(|k| Sge {
                    addr: src.addr,
                    length: (len - k * region).min(region) as u32,
                    lkey: src.lkey,
                })
                .collect();
            let op = match spec.op {
                FlowOp::Write => SendOp::Write { remote_addr: remote.addr, rkey: remote.rkey },
                FlowOp::Send => SendOp::Send,
            };
            let mut wr = SendWr::new(i as u64, op, sges);
            wr.signaled = true;
            if h.engine.post_send(src_qpn, wr).is_err() {
                // The QP failed; its completions say so.
                return;
            }
            st.posted += 1;
        }
    }

    fn post_recvs(&mut self, i: usize) {
        let spec = &self.scn.flows[i];
        let h = self.hosts[spec.dst].as_mut().expect("host");
        let dst = h.fl.as_ref().expect("a flow host").dst;
        let st = &mut self.flows[i];
        let chunk = self.scn.nic.chunk_bytes;
        while st.recvs_posted < st.wrs && st.recvs_posted - st.recvs_done < 2 * FLOW_WINDOW {
            let wr = RecvWr {
                wr_id: i as u64,
                sg_list: vec![Sge { addr: dst.addr, length: chunk, lkey: dst.lkey }],
            };
            if h.engine.post_recv(st.dst_qpn, wr).is_err() {
                return;
            }
            st.recvs_posted += 1;
        }
    }

    // ------------------------------------------------------------ scripted

    fn scripted(&mut self, i: usize) {
        match self.scn.events[i].kind {
            EventKind::LinkDown { link } => self.link_up[link] = false,
            EventKind::LinkUp { link } => self.link_up[link] = true,
            EventKind::NicStall { host } => self.hosts[host].as_mut().expect("host").stalled = true,
            EventKind::NicResume { host } => {
                let h = self.hosts[host].as_mut().expect("host");
                h.stalled = false;
                let backlog: Vec<Hop> = h.rx_backlog.drain(..).collect();
                h.rx_bytes = 0;
                let xoff = std::mem::replace(&mut h.xoff_sent, false);
                let p = h.port;
                for hop in backlog {
                    self.deliver(host, hop);
                }
                if xoff {
                    for q in 0..PRIORITIES as u8 {
                        if self.scn.switch.lossless_mask & (1 << q) != 0 {
                            self.send_pfc(p, q, PfcSend::Xon);
                        }
                    }
                }
                self.host_after_input(host);
            }
        }
    }

    // ------------------------------------------------------------ monitor

    fn sample(&mut self) {
        for &(node, number) in &self.scn.monitor.ports {
            let Some(&first) = self.first_port.get(node) else { continue };
            let p = first + number as usize - 1;
            let Some(port) = self.ports.get(p).filter(|x| x.node == node) else { continue };
            self.report.queues.push(QueueSample {
                time_ps: self.now,
                node,
                port: number,
                bytes: port.total_bytes(),
                paused: port.paused,
            });
        }
        if self.scn.monitor.flow_rates {
            for (i, st) in self.flows.iter().enumerate() {
                if !st.started || st.done {
                    continue;
                }
                let src = self.scn.flows[i].src;
                let h = self.hosts[src].as_ref().expect("host");
                let rate = h.engine.qp_rate(st.src_qpn).map(|r| r.rate_bps as f64).unwrap_or(0.0);
                self.report.rates.push(RateSample { time_ps: self.now, flow: i, rate_bps: rate });
            }
        }
    }

    /// Looks for a cycle of paused, non-empty switch egress queues in which
    /// each waits for the next: queue (X, port to Y, q) is paused by Y
    /// because Y's ingress from X holds frames of priority q that wait in
    /// Y's egress queue (Y, port to Z, q), itself paused. A cycle seen at
    /// two checks in a row with no frame sent from any of its queues in
    /// between is a deadlock.
    fn deadlock_check(&mut self) -> Option<Vec<QueueRef>> {
        if self.paused_queues == 0 {
            // No queue is paused: no cycle, and no need to look at every port.
            return None;
        }
        let cycle = crate::deadlock::find_cycle(self)?;
        let now: Vec<(QueueRef, u64)> = cycle
            .iter()
            .map(|&(p, q)| {
                let port = &self.ports[p];
                (QueueRef { node: port.node, port: port.number, priority: q as u8 }, port.sent[q])
            })
            .collect();
        let confirmed = self.deadlock_suspect.as_ref() == Some(&now);
        if confirmed {
            return Some(now.into_iter().map(|(r, _)| r).collect());
        }
        self.deadlock_suspect = Some(now);
        None
    }
}

/// Frame accessors for the deadlock detector.
impl<H: LinkHooks> Sim<H> {
    pub(crate) fn is_switch(&self, node: NodeId) -> bool {
        self.hosts.get(node).is_some_and(|h| h.is_none())
    }

    /// Whether switch port `p`'s queue `q` holds a frame that came in by
    /// port `ingress` of the same switch (0-based).
    pub(crate) fn holds_from(&self, p: usize, q: usize, ingress: usize) -> bool {
        self.ports[p].queues[q].iter().any(|h| h.in_port as usize == ingress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::*;

    fn one_host() -> Scenario {
        Scenario {
            name: "t".into(),
            seed: 1,
            nodes: vec![
                NodeSpec { kind: NodeKind::Switch, name: "s".into() },
                NodeSpec { kind: NodeKind::Host, name: "h".into() },
            ],
            links: vec![LinkSpec {
                a: 0,
                b: 1,
                rate_bps: 100_000_000_000,
                delay_ps: PS_PER_US,
                loss: 0.0,
                faults: LinkFaults::default(),
            }],
            flows: vec![],
            switch: SwitchConfig { pause_quanta: Some(100), ..SwitchConfig::hpcc() },
            nic: NicConfig::hpcc(),
            framing: Framing::Ethernet,
            routes: vec![],
            // Something due later keeps the sampling going.
            events: vec![TimedEvent { at_ps: 2 * PS_PER_US, kind: EventKind::NicResume { host: 1 } }],
            watchdog: None,
            stop_ps: Some(2 * PS_PER_US),
            deadlock_check_ps: 0,
            monitor: MonitorConfig { ports: vec![(0, 1)], interval_ps: PS_PER_NS, flow_rates: false },
        }
    }

    /// An XOFF of 100 quanta pauses a 100G port for 100 x 512 bit times =
    /// 512 ns, then it resumes by itself (IEEE 802.1Qbb).
    #[test]
    fn a_pause_runs_out_after_its_quanta() {
        let scn = one_host();
        let mut sim = Sim::new(&scn).unwrap();
        sim.pfc_received(0, 3, 100);
        sim.run(None);
        let r = sim.finish();
        let paused_at =
            |ns: u64| r.queues.iter().find(|q| q.time_ps == ns * PS_PER_NS).unwrap().paused & 8 != 0;
        assert!(paused_at(0) && paused_at(511));
        assert!(!paused_at(513) && !paused_at(1500));
        // A refresh before it runs out extends it by a full pause.
        let mut sim = Sim::new(&scn).unwrap();
        sim.pfc_received(0, 3, 100);
        sim.now = 300 * PS_PER_NS;
        sim.pfc_received(0, 3, 100);
        sim.run(None);
        let r = sim.finish();
        let paused_at =
            |ns: u64| r.queues.iter().find(|q| q.time_ps == ns * PS_PER_NS).unwrap().paused & 8 != 0;
        assert!(paused_at(511) && paused_at(811));
        assert!(!paused_at(813));
        // XON ends it at once; only state changes are recorded.
        assert_eq!(r.pfc.len(), 1);
    }

    /// A hop names nodes and ports in 16 bits: a bigger fabric is refused
    /// with a reason, not truncated.
    #[test]
    fn a_fabric_beyond_16_bit_names_is_refused() {
        let mut scn = one_host();
        let extra = (1 << 16) - scn.nodes.len() + 1;
        scn.nodes.extend((0..extra).map(|i| NodeSpec { kind: NodeKind::Host, name: format!("x{i}") }));
        let Err(FabricError::Invalid(why)) = Sim::build(Rc::new(scn), NoHooks) else {
            panic!("65537 nodes were accepted");
        };
        assert!(why.contains("65537 nodes"), "{why}");
        assert!(Sim::build(Rc::new(one_host()), NoHooks).is_ok());
    }
}
