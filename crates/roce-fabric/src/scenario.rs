//! What a fabric run is made of: nodes, links, flows, the switches' and
//! NICs' settings, timed events. Every input format (HPCC's run
//! directories, our TOML scenarios, the built-in scenarios) is turned into
//! a [`Scenario`]; the simulator reads nothing else.
//!
//! Time is in picoseconds ([`Time`]): 400 Gb/s puts a byte on the wire
//! every 20 ps, so every serialisation time of the usual rates (10, 25, 40,
//! 100, 200, 400, 800 Gb/s) is a whole number of picoseconds.

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
    /// of its link (HPCC: 3), at least one maximum frame.
    pub headroom_rtts: f64,
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
        }
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
