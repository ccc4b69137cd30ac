//! What a fabric run is made of: nodes, links, flows, the switches' and
//! NICs' settings, timed events. Every input format (HPCC's run
//! directories, our TOML scenarios, the built-in scenarios) is turned into
//! a [`Scenario`]; the simulator reads nothing else.
//!
//! Time is in picoseconds ([`Time`]): 400 Gb/s puts a byte on the wire
//! every 20 ps, so every serialisation time of the usual rates (10, 25, 40,
//! 100, 200, 400, 800 Gb/s) is a whole number of picoseconds.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Simulated time in picoseconds.
pub type Time = u64;

/// Picoseconds per nanosecond / microsecond / millisecond / second.
pub const PS_PER_NS: Time = 1_000;
pub const PS_PER_US: Time = 1_000_000;
pub const PS_PER_MS: Time = 1_000_000_000;
pub const PS_PER_S: Time = 1_000_000_000_000;

/// Time to put `wire_bytes` on a link of `rate_bps`: bytes x 8 / rate,
/// rounded down to the picosecond (exact for the usual rates: 100 Gb/s is
/// 80 ps a byte, 400 Gb/s 20 ps).
pub fn serialisation_ps(wire_bytes: u64, rate_bps: u64) -> Time {
    ((wire_bytes as u128 * 8 * PS_PER_S as u128) / rate_bps as u128) as Time
}

/// One PFC pause quantum: 512 bit times at `rate_bps` (IEEE 802.1Qbb),
/// rounded down to the picosecond (5.12 ns at 100 Gb/s).
pub fn pause_quantum_ps(rate_bps: u64) -> Time {
    ((512 * PS_PER_S as u128) / rate_bps as u128) as Time
}

/// Index of a node (host or switch) in [`Scenario::nodes`].
pub type NodeId = usize;

/// Number of 802.1p priorities.
pub const PRIORITIES: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Host,
    Switch,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub kind: NodeKind,
    /// A name for reports and plots ("h3", "tor0"...).
    pub name: String,
}

/// A full-duplex point-to-point link; both directions have the same rate
/// and delay. Ports are numbered per node from 1 in the order the node's
/// links are listed (as ns-3 numbers devices after the loopback 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    pub a: NodeId,
    pub b: NodeId,
    pub rate_bps: u64,
    /// One-way propagation delay.
    pub delay_ps: Time,
    /// Probability that a frame is lost on the wire (each direction).
    #[serde(default)]
    pub loss: f64,
    /// Further faults of the wire (each direction): jitter, reordering,
    /// duplication, corruption (the fault-injection harness's model,
    /// `crate::faults`).
    #[serde(default)]
    pub faults: LinkFaults,
}

/// A link's faults besides loss, in picoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LinkFaults {
    /// Extra delay uniform in `[0, jitter]`; frames stay in order.
    #[serde(default)]
    pub jitter_ps: Time,
    /// Fraction of frames delayed a further `[0, reorder_delay]` out of
    /// order.
    #[serde(default)]
    pub reorder: f64,
    #[serde(default)]
    pub reorder_delay_ps: Time,
    /// Fraction of frames that arrive twice.
    #[serde(default)]
    pub duplicate: f64,
    /// Fraction of data frames with one bit of the datagram flipped
    /// (never in BTH byte 4, which the ICRC does not cover): the
    /// receiving engine's ICRC check must refuse them.
    #[serde(default)]
    pub corrupt: f64,
}

/// The operation a flow performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FlowOp {
    /// RDMA WRITEs of the flow's bytes into the destination.
    #[default]
    Write,
    /// SENDs into receives the destination posted.
    Send,
}

/// One flow: `size` bytes from host `src` to host `dst` over an RC QP pair
/// of its own, starting at `start_ps`. Its completion time is when the
/// sender sees the completion of its last work request (the last ACK), as
/// the HPCC simulator measures it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowSpec {
    pub src: NodeId,
    pub dst: NodeId,
    /// 802.1p priority of the flow's data (and of its ACKs unless the NIC
    /// sends ACKs at [`NicConfig::ack_priority`]).
    pub priority: u8,
    pub size: u64,
    pub start_ps: Time,
    #[serde(default)]
    pub op: FlowOp,
    /// The flow's destination port as HPCC's flow lists give it, written
    /// in `fct.txt`'s dport column (the packets themselves go to UDP port
    /// 4791). Default [`HPCC_FLOW_DPORT`].
    #[serde(default = "default_flow_dport")]
    pub dport: u16,
}

/// The destination port HPCC's traffic generator (`traffic_gen.py`) writes
/// for every flow, and the one its `analysis/fct_analysis.py` selects by
/// default (`$4 == 100`; its incast mode selects 200).
pub const HPCC_FLOW_DPORT: u16 = 100;

fn default_flow_dport() -> u16 {
    HPCC_FLOW_DPORT
}

/// How a frame's size on the wire is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Framing {
    /// Real Ethernet: IP packet + 14 B header + 4 B 802.1Q tag (the
    /// priority) + 4 B FCS + 8 B preamble + 12 B inter-frame gap; a PFC
    /// frame is 64 B + 20 = 84 B on the wire.
    #[default]
    Ethernet,
    /// The HPCC ns-3 simulator's point-to-point links: IP packet + 2 B
    /// (PPP), no preamble or gap; a PFC frame is 64 B. Used to put runs
    /// side by side with that simulator's.
    Ppp,
}

impl Framing {
    /// Bytes a frame carrying an IP packet of `ip_len` bytes takes on the wire.
    pub fn data_wire_len(self, ip_len: usize) -> u32 {
        match self {
            Framing::Ethernet => (ip_len + 14 + 4 + 4 + 8 + 12) as u32,
            Framing::Ppp => (ip_len + 2) as u32,
        }
    }

    /// Bytes a PFC frame takes on the wire.
    pub fn pfc_wire_len(self) -> u32 {
        match self {
            Framing::Ethernet => 64 + 8 + 12,
            Framing::Ppp => 64,
        }
    }
}

/// How a switch decides when an ingress (port, priority) pauses its peer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum PfcThreshold {
    /// XOFF when the port-priority's shared use reaches `xoff` bytes,
    /// XON when it falls to `xon`.
    Static { xoff: u64, xon: u64 },
    /// Choudhury-Hahne dynamic threshold: XOFF when the shared use reaches
    /// `(free shared buffer) >> shift`, where the port's `shift` is
    /// `base_shift` at `base_rate_bps` and one less per doubling of the
    /// port's rate (HPCC's MMU: 3 at 100 Gb/s, alpha 1/8). XON when the
    /// headroom is empty and the shared use is `resume_offset` below the
    /// threshold (or zero).
    Dynamic { base_shift: u32, base_rate_bps: u64, resume_offset: u64 },
}

/// The shift of a port of `rate_bps` under a dynamic threshold: `base_shift`
/// at `base_rate_bps`, one less per doubling of the rate (rounded), within
/// 0..=31 (HPCC's MMU: alpha 1/8 at the NIC rate, 1/2 at 4 times it).
pub fn dynamic_shift(base_shift: u32, base_rate_bps: u64, rate_bps: u64) -> u32 {
    let doublings = (rate_bps as f64 / base_rate_bps as f64).log2().round() as i64;
    (base_shift as i64 - doublings).clamp(0, 31) as u32
}

/// RED-style ECN marking of one port rate class (IEEE/DCQCN CP): mark CE
/// with probability 0 below `kmin` bytes of egress queue, `pmax` scaled
/// linearly up to `kmax`, 1 above `kmax`. Decided at dequeue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EcnRule {
    /// Applies to ports of this rate (the rule with the nearest rate
    /// at or above the port's rate wins; the last one otherwise).
    pub rate_bps: u64,
    pub kmin: u64,
    pub kmax: u64,
    pub pmax: f64,
}

/// Headroom a port of one rate class gets beyond its cable's
/// ([`SwitchConfig::headroom_rtts`] x rate x one-way delay): what IEEE
/// 802.1Qbb's headroom adds to the round trip on the cable — the largest
/// frame the switch may be sending when it decides XOFF, the PFC frame,
/// the interface delays, the peer's response time and the largest frame
/// the peer may be sending when the XOFF arrives — as `roce fabric plan`
/// computes it (`plan::headroom`). The rule with the nearest rate at or
/// above the port's wins, the last one otherwise (as [`EcnRule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadroomRule {
    pub rate_bps: u64,
    pub extra_bytes: u64,
}

/// Egress scheduling among the 8 priorities of a port. PFC frames always
/// go first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Scheduling {
    /// Higher priority first.
    Strict,
    /// Deficit weighted round robin with these weights (bytes of quantum
    /// per round, one per priority; a weight of 0 puts that priority in
    /// strict priority above the DWRR ones).
    Dwrr { weights: [u32; PRIORITIES] },
}

/// A switch's buffer, PFC, ECN and scheduling settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchConfig {
    /// Shared buffer of the switch, bytes.
    pub buffer_bytes: u64,
    /// Bytes reserved per ingress (port, priority).
    pub reserve_bytes: u64,
    /// Headroom per ingress port: `headroom_rtts` x rate x one-way delay
    /// of its link (HPCC: 3), plus the port's [`HeadroomRule`] if any, at
    /// least one maximum frame ([`SwitchConfig::headroom_bytes`]).
    pub headroom_rtts: f64,
    /// Headroom beyond the cable's, per port rate (none: HPCC's model).
    #[serde(default)]
    pub headroom_extra: Vec<HeadroomRule>,
    pub pfc: PfcThreshold,
    /// Priorities that are lossless (PFC-enabled), as a bit mask.
    pub lossless_mask: u8,
    /// Whether PFC is on at all (off: lossless priorities drop at the
    /// headroom like the rest).
    pub pfc_enabled: bool,
    pub ecn_enabled: bool,
    pub ecn: Vec<EcnRule>,
    pub scheduling: Scheduling,
    /// The pause time an XOFF carries, in quanta of 512 bit times at the
    /// receiving link's rate (IEEE 802.1Qbb); the receiver resumes by
    /// itself when it runs out, so the sender refreshes the XOFF every
    /// half of it while the congestion lasts, and an XON (0 quanta) ends
    /// the pause early. `None`: XOFF/XON only, the pause time not used as
    /// a timer (the HPCC simulator's model).
    #[serde(default)]
    pub pause_quanta: Option<u16>,
    /// Which priority switches queue ACKs, NAKs and CNPs at.
    #[serde(default)]
    pub ack_class: AckClass,
}

/// Where switches queue the NICs' ACKs, NAKs and CNPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckClass {
    /// At the priority the NIC sent them at ([`NicConfig::ack_priority`]):
    /// a RoCE NIC marks its ACKs and CNPs with that priority (PCP/DSCP)
    /// and switches classify by it.
    #[default]
    Nic,
    /// At the class the packet itself carries: an ACK its QP's (with its
    /// flow's data), a CNP its `cnp_dscp`'s; the NIC still sends them
    /// first. The HPCC artifact's switches do this: its `ACK_HIGH_PRIO`
    /// reaches only the NICs (`SwitchNode::m_ackHighPrio` is never set,
    /// `switch-node.cc`), so ACKs wait behind data at every switch.
    Packet,
}

/// The host NIC: the roce-proto engine behind a line-rate port with one
/// egress queue per priority.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicConfig {
    /// IB path MTU (256, 512, 1024, 2048 or 4096).
    pub mtu: u32,
    /// Congestion control: `none` or `dcqcn`.
    pub cc: String,
    /// DCQCN parameter set name (`hpcc`, `nvidia`, `paper`) and
    /// `key=value` overrides, as `roce perf --cc-param` takes them.
    pub dcqcn_set: String,
    #[serde(default)]
    pub dcqcn_params: Vec<String>,
    /// Priority of ACKs/NAKs and CNPs; `None` sends them at the QP's.
    pub ack_priority: Option<u8>,
    /// Messages a flow is cut into (bytes): the work requests it posts,
    /// each from the same small reused region.
    pub chunk_bytes: u32,
    /// Most request PSNs a QP has unacknowledged (its send window); the
    /// IBTA allows up to 2^23. HPCC's NIC has no window (`HAS_WIN 0`).
    #[serde(default = "default_window")]
    pub max_unacked_psns: u32,
    /// The requester asks for an ACK at least every this many packets of
    /// a message (the AckReq bit; the responder also ACKs each message's
    /// last packet). 1: an ACK per packet, as the HPCC NIC sends
    /// (`L2_ACK_INTERVAL 1`).
    #[serde(default = "default_ack_every")]
    pub ack_req_every: u32,
    /// Receive buffer of the NIC when it stops draining (a storm source):
    /// it pauses its switch when this many bytes are waiting.
    pub rx_xoff_bytes: u64,
}

/// A PFC watchdog (switch vendors' storm protection): a switch egress
/// queue that has been paused continuously for `timeout_ps` with frames
/// waiting is flushed (its frames dropped and counted) and then stops
/// honouring pauses, forwarding what arrives for it, until its peer has
/// not paused it for `restore_ps`. A receiver that really cannot take the
/// frames (a stalled NIC) drops them; a cycle of paused queues (a
/// deadlock) drains.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WatchdogConfig {
    pub timeout_ps: Time,
    pub restore_ps: Time,
}

/// Something that happens at a set time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum EventKind {
    /// Link `link` (index in [`Scenario::links`]) goes down: frames on it
    /// and sent into it are lost until it comes up.
    LinkDown {
        link: usize,
    },
    LinkUp {
        link: usize,
    },
    /// Host `host`'s NIC stops draining what it receives (a stuck
    /// receiver: its buffer fills and it keeps pausing its switch).
    NicStall {
        host: NodeId,
    },
    NicResume {
        host: NodeId,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimedEvent {
    pub at_ps: Time,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// A static route: at `switch`, frames for host `dst` leave by the link to
/// `via` (overrides the shortest-path ECMP table for that destination).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteSpec {
    pub switch: NodeId,
    pub dst: NodeId,
    pub via: NodeId,
}

/// Which ports' queues to sample over time, and how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MonitorConfig {
    /// (node, port) pairs; ports number from 1.
    pub ports: Vec<(NodeId, u32)>,
    /// Sampling interval; 0 = no sampling.
    pub interval_ps: Time,
    /// Sample each flow's sending rate (for the rate plot).
    pub flow_rates: bool,
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    pub nodes: Vec<NodeSpec>,
    pub links: Vec<LinkSpec>,
    pub flows: Vec<FlowSpec>,
    pub switch: SwitchConfig,
    pub nic: NicConfig,
    pub framing: Framing,
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    #[serde(default)]
    pub events: Vec<TimedEvent>,
    pub watchdog: Option<WatchdogConfig>,
    /// Run no further than this (`None`: until every flow completes, or a
    /// deadlock is found).
    pub stop_ps: Option<Time>,
    /// How often the deadlock detector looks for a cycle of paused
    /// queues; 0 = never.
    pub deadlock_check_ps: Time,
    #[serde(default)]
    pub monitor: MonitorConfig,
}

impl SwitchConfig {
    /// The HPCC artifact's MMU: 32 MB buffer, 4 KB reserve, headroom 3 x
    /// rate x delay, dynamic thresholds (alpha 1/8 at 100 Gb/s), resume 3 KB
    /// below the threshold, priority 3 lossless, ECN 400/1600 KB at
    /// 100 Gb/s scaled with rate, Pmax 0.2, strict priority.
    pub fn hpcc() -> SwitchConfig {
        SwitchConfig {
            buffer_bytes: 32 * 1024 * 1024,
            reserve_bytes: 4 * 1024,
            headroom_rtts: 3.0,
            pfc: PfcThreshold::Dynamic {
                base_shift: 3,
                base_rate_bps: 100_000_000_000,
                resume_offset: 3 * 1024,
            },
            lossless_mask: 1 << 3,
            pfc_enabled: true,
            ecn_enabled: true,
            ecn: vec![
                EcnRule { rate_bps: 100_000_000_000, kmin: 400_000, kmax: 1_600_000, pmax: 0.2 },
                EcnRule { rate_bps: 400_000_000_000, kmin: 1_600_000, kmax: 6_400_000, pmax: 0.2 },
            ],
            scheduling: Scheduling::Strict,
            pause_quanta: None,
            headroom_extra: Vec::new(),
            ack_class: AckClass::Nic,
        }
    }

    /// The headroom of an ingress port of `rate_bps` whose link has a
    /// one-way delay of `delay_ps`: `headroom_rtts` x rate x delay plus the
    /// [`HeadroomRule`] for the rate, at least `max_frame` bytes.
    pub fn headroom_bytes(&self, rate_bps: u64, delay_ps: Time, max_frame: u64) -> u64 {
        let cable = self.headroom_rtts * (rate_bps as f64 / 8.0) * (delay_ps as f64 / PS_PER_S as f64);
        let extra = self
            .headroom_extra
            .iter()
            .filter(|r| r.rate_bps >= rate_bps)
            .min_by_key(|r| r.rate_bps)
            .or(self.headroom_extra.last())
            .map_or(0, |r| r.extra_bytes);
        (cable as u64 + extra).max(max_frame)
    }
}

fn default_ack_every() -> u32 {
    roce_proto::limits::ACK_REQ_EVERY
}

fn default_window() -> u32 {
    1 << 22
}

impl NicConfig {
    /// MTU 1024, DCQCN with the HPCC artifact's parameters, ACKs and CNPs at
    /// priority 7, 64 KiB messages.
    pub fn hpcc() -> NicConfig {
        NicConfig {
            mtu: 1024,
            cc: "dcqcn".into(),
            dcqcn_set: "hpcc".into(),
            dcqcn_params: Vec::new(),
            ack_priority: Some(7),
            chunk_bytes: 64 * 1024,
            rx_xoff_bytes: 64 * 1024,
            max_unacked_psns: default_window(),
            ack_req_every: default_ack_every(),
        }
    }
}

impl Scenario {
    /// Hosts' node ids, in order.
    pub fn hosts(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().enumerate().filter(|(_, n)| n.kind == NodeKind::Host).map(|(i, _)| i)
    }
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

// ---------------------------------------------------------------------------
// The rules of every scenario, however made: the simulator, the plots and
// the summary read them here, not from a file format.

/// Why a scenario is not acceptable: a rule of [`validate`] broken, or
/// (reading a TOML scenario, [`crate::toml_scenario`]) a file that cannot
/// be read or parsed. Every variant names the key and the value.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The TOML does not parse, has an unknown key, or a value of the wrong
    /// type (the message names the line and key).
    #[error("{0}")]
    Syntax(String),
    #[error("{key}: cannot read {value:?}: {reason}")]
    BadValue { key: String, value: String, reason: String },
    #[error("{key}: no node named {name:?}")]
    UnknownNode { key: String, name: String },
    #[error("{key}: {name:?} is a {found}, expected a {expected}")]
    WrongKind { key: String, name: String, expected: &'static str, found: &'static str },
    #[error("node name {0:?} is declared twice")]
    DuplicateName(String),
    #[error("{key}: link from {node:?} to itself")]
    SelfLink { key: String, node: String },
    #[error("host {host:?} has {links} links; a host has exactly one (its NIC port)")]
    HostLinks { host: String, links: usize },
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: String },
}

pub(crate) fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid { key: key.into(), reason: reason.into() }
}

pub(crate) fn bad_value(key: &str, value: &str, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::BadValue { key: key.to_string(), value: value.to_string(), reason: reason.into() }
}

pub(crate) fn priority(key: &str, p: u8) -> Result<u8, ScenarioError> {
    if p as usize >= PRIORITIES {
        return Err(bad_value(key, &p.to_string(), "a priority is 0..=7"));
    }
    Ok(p)
}

pub(crate) fn kind_name(k: NodeKind) -> &'static str {
    match k {
        NodeKind::Host => "host",
        NodeKind::Switch => "switch",
    }
}

pub(crate) fn loss(key: &str, l: f64) -> Result<f64, ScenarioError> {
    if !(0.0..=1.0).contains(&l) {
        return Err(bad_value(key, &l.to_string(), "loss is a probability within [0, 1]"));
    }
    Ok(l)
}

/// Nodes a scenario may have: a host's address holds its id in 16 bits
/// ([`host_ip`]).
pub const MAX_NODES: usize = 0xffff;

/// Checks the rules of every [`Scenario`] however it was made (TOML,
/// built-in, imported; the TOML format's documentation lists them,
/// [`crate::toml_scenario`]): node indices in range, unique
/// names, one link per host, no self links, rates above zero, losses and
/// pmax within [0, 1], kmin <= kmax, xon <= xoff, priorities 0..=7,
/// flows between two different hosts with at least one byte, a known MTU
/// and congestion control (with DCQCN, a known parameter set and
/// parameters), routes from a switch to a host via a neighbour, events on
/// existing links and hosts, monitored ports that exist. Keys name the
/// scenario's own lists (`links[3]`).
pub fn validate(s: &Scenario) -> Result<(), ScenarioError> {
    let n = s.nodes.len();
    if n > MAX_NODES {
        return Err(invalid(
            "nodes",
            format!("{n} nodes: at most {MAX_NODES} (a host's address holds its id in 16 bits)"),
        ));
    }
    let mut seen = HashMap::new();
    for (i, node) in s.nodes.iter().enumerate() {
        if node.name.is_empty() {
            return Err(invalid(format!("nodes[{i}].name"), "empty node name"));
        }
        if seen.insert(node.name.as_str(), i).is_some() {
            return Err(ScenarioError::DuplicateName(node.name.clone()));
        }
    }
    let node_ok = |key: String, id: NodeId, kind: Option<NodeKind>| -> Result<(), ScenarioError> {
        if id >= n {
            return Err(invalid(key, format!("node {id} does not exist ({n} nodes)")));
        }
        if let Some(k) = kind {
            if s.nodes[id].kind != k {
                return Err(ScenarioError::WrongKind {
                    key,
                    name: s.nodes[id].name.clone(),
                    expected: kind_name(k),
                    found: kind_name(s.nodes[id].kind),
                });
            }
        }
        Ok(())
    };
    let mut degree = vec![0usize; n];
    for (i, l) in s.links.iter().enumerate() {
        let key = format!("links[{i}]");
        node_ok(format!("{key}.a"), l.a, None)?;
        node_ok(format!("{key}.b"), l.b, None)?;
        if l.a == l.b {
            return Err(ScenarioError::SelfLink { key, node: s.nodes[l.a].name.clone() });
        }
        if l.rate_bps == 0 {
            return Err(bad_value(&format!("{key}.rate"), "0", "a rate must be above zero"));
        }
        loss(&format!("{key}.loss"), l.loss)?;
        let f = &l.faults;
        for (name, p) in [("reorder", f.reorder), ("duplicate", f.duplicate), ("corrupt", f.corrupt)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(bad_value(
                    &format!("{key}.faults.{name}"),
                    &p.to_string(),
                    "a probability, 0 to 1",
                ));
            }
        }
        degree[l.a] += 1;
        degree[l.b] += 1;
    }
    for h in s.hosts() {
        if degree[h] != 1 {
            return Err(ScenarioError::HostLinks { host: s.nodes[h].name.clone(), links: degree[h] });
        }
    }
    for (i, f) in s.flows.iter().enumerate() {
        let key = format!("flows[{i}]");
        node_ok(format!("{key}.src"), f.src, Some(NodeKind::Host))?;
        node_ok(format!("{key}.dst"), f.dst, Some(NodeKind::Host))?;
        if f.src == f.dst {
            return Err(invalid(key, format!("a flow from {:?} to itself", s.nodes[f.src].name)));
        }
        priority(&format!("{key}.priority"), f.priority)?;
        if f.size == 0 {
            return Err(bad_value(&format!("{key}.size"), "0", "a flow carries at least one byte"));
        }
    }
    let sw = &s.switch;
    if sw.buffer_bytes == 0 {
        return Err(bad_value("switch.buffer", "0", "the buffer must be above zero"));
    }
    if !(sw.headroom_rtts.is_finite() && sw.headroom_rtts >= 0.0) {
        return Err(bad_value("switch.headroom_rtts", &sw.headroom_rtts.to_string(), "a finite number >= 0"));
    }
    match sw.pfc {
        PfcThreshold::Static { xoff, xon } if xon > xoff => {
            return Err(invalid("switch.pfc_threshold", format!("xon ({xon} B) above xoff ({xoff} B)")));
        }
        PfcThreshold::Static { xoff: 0, .. } => {
            return Err(bad_value("switch.pfc_threshold.xoff", "0", "xoff must be above zero"));
        }
        PfcThreshold::Dynamic { base_shift, base_rate_bps, .. } => {
            if base_shift > 31 {
                return Err(bad_value(
                    "switch.pfc_threshold.base_shift",
                    &base_shift.to_string(),
                    "at most 31",
                ));
            }
            if base_rate_bps == 0 {
                return Err(bad_value("switch.pfc_threshold.base_rate", "0", "a rate must be above zero"));
            }
        }
        PfcThreshold::Static { .. } => {}
    }
    for (i, r) in sw.ecn.iter().enumerate() {
        let key = format!("switch.ecn_rules[{i}]");
        if r.rate_bps == 0 {
            return Err(bad_value(&format!("{key}.rate"), "0", "a rate must be above zero"));
        }
        if r.kmin > r.kmax {
            return Err(invalid(key, format!("kmin ({} B) above kmax ({} B)", r.kmin, r.kmax)));
        }
        if !(0.0..=1.0).contains(&r.pmax) {
            return Err(bad_value(
                &format!("{key}.pmax"),
                &r.pmax.to_string(),
                "a probability within [0, 1]",
            ));
        }
        if i > 0 && sw.ecn[i - 1].rate_bps >= r.rate_bps {
            return Err(invalid(format!("{key}.rate"), "ECN rules are listed by ascending rate"));
        }
    }
    if sw.ecn_enabled && sw.ecn.is_empty() {
        return Err(invalid("switch.ecn_rules", "ECN is on but there is no rule"));
    }
    if let Scheduling::Dwrr { weights } = sw.scheduling {
        if weights.iter().all(|&w| w == 0) {
            return Err(invalid("switch.dwrr_weights", "at least one weight above zero"));
        }
    }
    let nic = &s.nic;
    if ![256, 512, 1024, 2048, 4096].contains(&nic.mtu) {
        return Err(bad_value("nic.mtu", &nic.mtu.to_string(), "expected 256, 512, 1024, 2048 or 4096"));
    }
    if let Some(p) = nic.ack_priority {
        priority("nic.ack_priority", p)?;
    }
    if nic.max_unacked_psns == 0 || nic.max_unacked_psns > 1 << 23 {
        return Err(bad_value(
            "nic.max_unacked_psns",
            &nic.max_unacked_psns.to_string(),
            "a send window of 1..=2^23 PSNs",
        ));
    }
    if nic.chunk_bytes == 0 {
        return Err(bad_value("nic.chunk", "0", "must be above zero"));
    }
    if nic.ack_req_every == 0 {
        return Err(bad_value("nic.ack_req_every", "0", "at least 1 (an ACK per packet)"));
    }
    match nic.cc.as_str() {
        "none" => {}
        "dcqcn" => {
            let mut p = roce_proto::cc::DcqcnParams::named(&nic.dcqcn_set)
                .map_err(|e| bad_value("nic.dcqcn_set", &nic.dcqcn_set, e.to_string()))?;
            for (i, kv) in nic.dcqcn_params.iter().enumerate() {
                p.set_kv(kv).map_err(|e| bad_value(&format!("nic.dcqcn_params[{i}]"), kv, e.to_string()))?;
            }
            p.validate().map_err(|e| invalid("nic.dcqcn_params", e.to_string()))?;
        }
        other => return Err(bad_value("nic.cc", other, "expected none or dcqcn")),
    }
    let linked =
        |a: NodeId, b: NodeId| s.links.iter().any(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a));
    for (i, r) in s.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        node_ok(format!("{key}.switch"), r.switch, Some(NodeKind::Switch))?;
        node_ok(format!("{key}.dst"), r.dst, Some(NodeKind::Host))?;
        node_ok(format!("{key}.via"), r.via, None)?;
        if !linked(r.switch, r.via) {
            return Err(invalid(
                format!("{key}.via"),
                format!("{:?} has no link to {:?}", s.nodes[r.switch].name, s.nodes[r.via].name),
            ));
        }
    }
    for (i, e) in s.events.iter().enumerate() {
        let key = format!("events[{i}]");
        match e.kind {
            EventKind::LinkDown { link } | EventKind::LinkUp { link } if link >= s.links.len() => {
                return Err(invalid(key, format!("link {link} does not exist ({} links)", s.links.len())));
            }
            EventKind::NicStall { host } | EventKind::NicResume { host } => {
                node_ok(format!("{key}.host"), host, Some(NodeKind::Host))?;
            }
            _ => {}
        }
    }
    if let Some(w) = s.watchdog {
        if w.timeout_ps == 0 {
            return Err(bad_value("watchdog.timeout", "0", "the timeout must be above zero"));
        }
    }
    for (i, &(node, port)) in s.monitor.ports.iter().enumerate() {
        let key = format!("monitor.ports[{i}]");
        node_ok(key.clone(), node, None)?;
        if port == 0 || port as usize > degree[node] {
            return Err(bad_value(
                &key,
                &format!("{}:{port}", s.nodes[node].name),
                format!("{:?} has ports 1..={}", s.nodes[node].name, degree[node]),
            ));
        }
    }
    Ok(())
}

/// The port of `node` whose link leads to `peer` (from 1), if any.
pub fn port_towards(s: &Scenario, node: NodeId, peer: NodeId) -> Option<u32> {
    s.links
        .iter()
        .filter(|l| l.a == node || l.b == node)
        .position(|l| l.a == peer || l.b == peer)
        .map(|k| k as u32 + 1)
}

/// The node at the other end of `node`'s port `port` (from 1), if any.
pub fn peer_of(s: &Scenario, node: NodeId, port: u32) -> Option<NodeId> {
    let l = s.links.iter().filter(|l| l.a == node || l.b == node).nth((port as usize).checked_sub(1)?)?;
    Some(if l.a == node { l.b } else { l.a })
}
