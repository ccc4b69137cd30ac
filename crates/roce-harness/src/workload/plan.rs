//! A workload as plain data: hosts and their memory, QPs, and timed lists of
//! work requests. Everything is symbolic (memory as MR index + offset, peers
//! as QP indices) so a plan is pure data derived from the seed; `setup`
//! turns it into engine objects and real keys.

use std::net::IpAddr;

use roce_fabric::mesh::switched_scenario;
use roce_fabric::scenario::{EcnRule, Scenario, SwitchConfig, PS_PER_NS, PS_PER_US};
use roce_proto::cc::{CcAlgorithm, DcqcnParams};
use roce_proto::config::CnpConfig;
use roce_proto::{Access, Duration, Instant, PathMtu, QpCap, QpKeys, QpType, WcOpcode, WcStatus};

use crate::net::{HostId, LinkParams};

/// Index of a QP in [`Plan::qps`].
pub type QpIdx = usize;

/// A memory region of a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MrRef {
    pub host: HostId,
    /// Index in [`HostPlan::mrs`].
    pub mr: usize,
}

/// Bytes `[off, off + len)` of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seg {
    pub mr: MrRef,
    pub off: u64,
    pub len: u32,
}

/// What a region is for (and so which rights it is registered with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MrKind {
    /// Constant random bytes: the source of SEND/WRITE data and of remote READs.
    Src,
    /// Targets of incoming RDMA WRITEs, one window per stream.
    Tgt,
    /// Where READ responses and atomic originals land, one range per WR.
    Land,
    /// Receive buffers, one range per receive WR.
    Recv,
    /// 64-bit words for atomics (8-byte aligned).
    Atom,
    /// A region registered only to be remotely invalidated.
    Inv,
    /// The bytes of outgoing UD messages (each begins with its id).
    UdOut,
    /// A small region with Remote Write only, for probes that overrun it or
    /// use rights it lacks (8-byte aligned).
    Fixed,
}

impl MrKind {
    pub fn access(self) -> Access {
        match self {
            MrKind::Src => Access::REMOTE_READ,
            MrKind::Tgt | MrKind::Inv | MrKind::Fixed => Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            MrKind::Land | MrKind::Recv => Access::LOCAL_WRITE,
            MrKind::Atom => Access::LOCAL_WRITE | Access::REMOTE_ATOMIC,
            MrKind::UdOut => Access::NONE,
        }
    }
}

/// A region: placement in the host's buffer and its I/O virtual address.
#[derive(Debug, Clone)]
pub struct MrPlan {
    pub kind: MrKind,
    pub len: usize,
    /// Offset in the host's buffer (set by the layout pass).
    pub buf_off: usize,
    pub iova: u64,
}

/// Device settings a plan varies per host.
#[derive(Debug, Clone, Copy)]
pub struct DeviceTweaks {
    pub ack_req_every: u32,
    pub max_unacked_psns: u32,
    pub ecn: bool,
}

/// A host: its addresses, device, memory and queues.
#[derive(Debug, Clone)]
pub struct HostPlan {
    /// GID table (IPv4 first if present).
    pub gids: Vec<IpAddr>,
    pub engine_seed: u64,
    pub device: DeviceTweaks,
    pub mrs: Vec<MrPlan>,
    /// Size of the host's one buffer; every MR lies inside it.
    pub mem_len: usize,
    /// The buffer's initial content (also the shadow model's start).
    pub init: Vec<u8>,
    pub cqs: usize,
    /// Shared receive queues: (max_wr, max_sge).
    pub srqs: Vec<(u32, u32)>,
}

impl HostPlan {
    /// GID index of the address of the same family as `peer`.
    pub fn gid_index_for(&self, peer: IpAddr) -> Option<u8> {
        self.gids.iter().position(|g| g.is_ipv4() == peer.is_ipv4()).map(|i| i as u8)
    }
}

/// How a QP's initial send PSN is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsnPick {
    /// `Engine::random_psn` on the QP's host.
    Engine,
    Fixed(u32),
}

/// The connection of an RC QP to its peer.
#[derive(Debug, Clone, Copy)]
pub struct RcConn {
    pub peer: QpIdx,
    pub sgid_index: u8,
    pub dgid: IpAddr,
    pub mtu: PathMtu,
    pub sq_psn: PsnPick,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
}

/// A queue pair.
#[derive(Debug, Clone)]
pub struct QpPlan {
    pub host: HostId,
    pub qp_type: QpType,
    pub send_cq: usize,
    pub recv_cq: usize,
    pub srq: Option<usize>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    /// RC only.
    pub conn: Option<RcConn>,
    /// UD only: the Q_Key.
    pub qkey: u32,
}

/// Where a UD send goes.
#[derive(Debug, Clone, Copy)]
pub struct UdTarget {
    pub qp: QpIdx,
    pub sgid_index: u8,
    pub dgid: IpAddr,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
}

/// The operation of a planned send WR.
#[derive(Debug, Clone, Copy)]
pub enum OpKind {
    Send,
    SendImm {
        imm: u32,
    },
    /// SEND with Invalidate of the peer's region `target`.
    SendInv {
        target: MrRef,
    },
    Write {
        dst: Seg,
    },
    WriteImm {
        dst: Seg,
        imm: u32,
    },
    /// READ of `src` (on the peer) into the WR's SGEs.
    Read {
        src: Seg,
    },
    CmpSwap {
        word: Seg,
        compare: u64,
        swap: u64,
    },
    /// `counter`: index in [`Plan::counters`] if the word is shared.
    FetchAdd {
        word: Seg,
        add: u64,
        counter: Option<usize>,
    },
    /// UD SEND (with immediate if `imm`); `id` names the message.
    UdSend {
        to: UdTarget,
        imm: Option<u32>,
        id: u64,
    },
}

impl OpKind {
    /// The opcode of the requester's completion.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            OpKind::Send | OpKind::SendImm { .. } | OpKind::SendInv { .. } | OpKind::UdSend { .. } => {
                WcOpcode::Send
            }
            OpKind::Write { .. } | OpKind::WriteImm { .. } => WcOpcode::RdmaWrite,
            OpKind::Read { .. } => WcOpcode::RdmaRead,
            OpKind::CmpSwap { .. } => WcOpcode::CompSwap,
            OpKind::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }

    /// True if the responder consumes a receive WR for it.
    pub fn consumes_recv(&self) -> bool {
        matches!(
            self,
            OpKind::Send
                | OpKind::SendImm { .. }
                | OpKind::SendInv { .. }
                | OpKind::WriteImm { .. }
                | OpKind::UdSend { .. }
        )
    }

    /// True if the message data lands in the receive WR's buffers.
    pub fn carries_recv_data(&self) -> bool {
        self.consumes_recv() && !matches!(self, OpKind::WriteImm { .. })
    }
}

/// A planned send work request.
#[derive(Debug, Clone)]
pub struct Op {
    pub wr_id: u64,
    pub kind: OpKind,
    /// Local SGEs (source of SEND/WRITE data, destination of READ/atomics).
    pub sges: Vec<Seg>,
    /// Message length in bytes.
    pub len: u32,
    /// The WR's own `signaled` flag (the QP's `sq_sig_all` may add to it).
    pub signaled: bool,
    pub inline: bool,
    pub fence: bool,
    pub solicited: bool,
    pub post_at: Instant,
}

/// The remote error a probe provokes (IBTA §9.7.5.1.3 remote access checks,
/// or a receive buffer too short): the responder NAKs, both QPs go to
/// the error state, and the requester's later WRs are flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// RDMA WRITE with an R_Key the same stream invalidated by SEND with
    /// Invalidate before.
    InvalidatedRkey,
    /// RDMA WRITE running past the end of a region.
    OutOfBounds,
    /// RDMA READ of a region registered without Remote Read.
    NoReadAccess,
    /// FETCH_ADD on a region registered without Remote Atomic.
    NoAtomicAccess,
    /// SEND longer than the receive WR that takes it.
    RecvTooSmall,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 5] = [
        ProbeKind::InvalidatedRkey,
        ProbeKind::OutOfBounds,
        ProbeKind::NoReadAccess,
        ProbeKind::NoAtomicAccess,
        ProbeKind::RecvTooSmall,
    ];

    /// The requester's completion status for the bad WR (when the NAK
    /// arrives; if it is lost, transport retries run out instead).
    pub fn status(self) -> WcStatus {
        match self {
            ProbeKind::RecvTooSmall => WcStatus::RemInvReqErr,
            _ => WcStatus::RemAccessErr,
        }
    }
}

/// A fault the plan provokes on purpose at the end of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Index of the op that must fail.
    pub bad_op: usize,
    pub kind: ProbeKind,
}

/// The send WRs one QP posts, in posting order.
#[derive(Debug, Clone)]
pub struct Stream {
    pub qp: QpIdx,
    pub ops: Vec<Op>,
    pub probe: Option<Probe>,
}

/// Where receive WRs are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvQueue {
    Qp(QpIdx),
    Srq { host: HostId, srq: usize },
}

/// A planned receive work request.
#[derive(Debug, Clone)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: Vec<Seg>,
    pub post_at: Instant,
}

impl RecvWqe {
    pub fn capacity(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.len)).sum()
    }
}

/// The receive WRs of one queue, in posting order.
#[derive(Debug, Clone)]
pub struct RecvList {
    pub queue: RecvQueue,
    pub wqes: Vec<RecvWqe>,
}

/// A 64-bit word that several QPs FETCH_ADD.
#[derive(Debug, Clone, Copy)]
pub struct SharedCounter {
    pub word: Seg,
    pub init: u64,
}

/// A whole workload.
#[derive(Debug, Clone)]
pub struct Plan {
    pub hosts: Vec<HostPlan>,
    /// Link parameters per ordered host pair.
    pub links: Vec<((HostId, HostId), LinkParams)>,
    pub qps: Vec<QpPlan>,
    pub streams: Vec<Stream>,
    pub recvs: Vec<RecvList>,
    pub counters: Vec<SharedCounter>,
    /// What the seed drew beside the workload (see `mix`; empty until
    /// `mix::draw`).
    pub mix: Mix,
}

impl Plan {
    pub fn mr(&self, r: MrRef) -> &MrPlan {
        &self.hosts[r.host].mrs[r.mr]
    }

    /// Offset in the host buffer of a segment's first byte.
    pub fn buf_off(&self, s: &Seg) -> usize {
        self.mr(s.mr).buf_off + s.off as usize
    }

    /// The bytes of `sges` concatenated, from the host's initial image.
    pub fn gather_init(&self, sges: &[Seg]) -> Vec<u8> {
        let mut v = Vec::new();
        for s in sges {
            let o = self.buf_off(s);
            v.extend_from_slice(&self.hosts[s.mr.host].init[o..o + s.len as usize]);
        }
        v
    }

    pub fn num_wrs(&self) -> usize {
        self.streams.iter().map(|s| s.ops.len()).sum::<usize>()
            + self.recvs.iter().map(|r| r.wqes.len()).sum::<usize>()
    }
}

/// A host's congestion control.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCc {
    /// The named set the parameters start from.
    pub set: &'static str,
    pub params: DcqcnParams,
    pub line_rate_bps: u64,
    pub cnp: CnpConfig,
}

impl HostCc {
    pub fn algorithm(&self) -> CcAlgorithm {
        CcAlgorithm::Dcqcn(self.params.clone())
    }
}

/// The switched fabric a seed's hosts run on instead of the mesh
/// (`roce_fabric::mesh::switched_scenario`): PFC on every priority, with
/// the headroom what may still arrive after an XOFF needs, so no switch
/// drops a frame (the harness's counters see only the hosts' own links; a
/// drop inside a switch fails the run), and ECN marking with
/// RED-like thresholds on each switch egress queue (DCQCN's CP, Annex
/// A17.9.1).
#[derive(Debug, Clone, PartialEq)]
pub struct Switched {
    /// Hosts on each switch, in host order: one switch (a star) or two.
    pub split: Vec<usize>,
    pub host_rate_bps: u64,
    /// The link between the two switches (at most the host rate).
    pub trunk_rate_bps: u64,
    /// One-way delay of every link.
    pub delay: Duration,
    /// ECN: no mark below `kmin` bytes queued, probability rising to
    /// `pmax` at `kmax`, every packet above.
    pub kmin: u64,
    pub kmax: u64,
    pub pmax: f64,
    /// Each switch's shared buffer: the HPCC artifact's 32 MiB (whose
    /// PFC thresholds the harness's small workloads seldom reach) or a
    /// small one, where a few frames queued at an ingress pause its peer
    /// (the dynamic threshold is a share of what the buffer has free).
    pub buffer_bytes: u64,
    /// PFC headroom of each switch ingress, in round trips of its link
    /// (`SwitchConfig::headroom_rtts`): enough for what may still arrive
    /// once the switch sent XOFF (see `mix`).
    pub headroom_rtts: f64,
}

impl Switched {
    pub fn switches(&self) -> usize {
        self.split.len()
    }

    /// The fabric: host `i` on node `i`, the switches after the hosts,
    /// every priority lossless, one ECN rule for every port, the
    /// deadlock check every 100 us.
    pub fn scenario(&self) -> Scenario {
        let switch = SwitchConfig {
            buffer_bytes: self.buffer_bytes,
            headroom_rtts: self.headroom_rtts,
            lossless_mask: 0xff,
            pfc_enabled: true,
            ecn_enabled: true,
            ecn: vec![EcnRule {
                rate_bps: self.host_rate_bps,
                kmin: self.kmin,
                kmax: self.kmax,
                pmax: self.pmax,
            }],
            ..SwitchConfig::hpcc()
        };
        let delay = self.delay.0 * PS_PER_NS;
        let mut scn =
            switched_scenario(&self.split, (self.host_rate_bps, delay), (self.trunk_rate_bps, delay), switch);
        scn.deadlock_check_ps = 100 * PS_PER_US;
        scn
    }

    /// The slowest link.
    pub fn slowest_bps(&self) -> u64 {
        if self.split.len() > 1 {
            self.host_rate_bps.min(self.trunk_rate_bps)
        } else {
            self.host_rate_bps
        }
    }
}

/// A directed link that loses every packet in `[from, until)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blackout {
    pub link: (HostId, HostId),
    pub from: Instant,
    pub until: Instant,
}

/// A CNP the network brings to a requester QP at `at`, as a congested
/// switch on its path would make its peer send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CnpInjection {
    pub at: Instant,
    pub qp: QpIdx,
}

/// Everything a seed drew beside its workload.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mix {
    /// Per host: its congestion control (`None`: line rate).
    pub cc: Vec<Option<HostCc>>,
    /// Encrypted RC QPs with their keys (both QPs of a pair are listed).
    pub crypto: Vec<(QpIdx, QpKeys)>,
    pub cnps: Vec<CnpInjection>,
    pub blackouts: Vec<Blackout>,
    /// When the links' random faults end (`None`: the links are clean
    /// throughout).
    pub heal_at: Option<Instant>,
    /// Every posted WR must have completed, and the network be quiet, by
    /// then (without a heal phase: never, the run's time limit applies).
    pub deadline: Instant,
    /// The switched fabric the hosts run on (`None`: the mesh).
    pub fabric: Option<Switched>,
    /// Per host: its device's cap on unacknowledged request bytes
    /// (`EngineConfig::tx_budget_bytes`; `None`: uncapped), empty when the
    /// seed drew none.
    pub tx_caps: Vec<Option<u64>>,
}

impl Mix {
    /// The first time after which no fault, drawn or directed, strikes.
    pub fn faults_end(&self) -> Instant {
        let dark = self.blackouts.iter().map(|b| b.until).max().unwrap_or(Instant::ZERO);
        self.heal_at.unwrap_or(Instant::ZERO).max(dark)
    }

    pub fn cc_hosts(&self) -> usize {
        self.cc.iter().flatten().count()
    }

    /// The cap on unacknowledged request bytes of host `h`'s device.
    pub fn tx_cap(&self, h: usize) -> Option<u64> {
        self.tx_caps.get(h).copied().flatten()
    }
}
