//! What a run produces: one record per finished flow, one per PFC frame
//! received, samples of the monitored queues and flows, counters, and how
//! the run ended. Writers of the HPCC files, the JSON summary and the
//! plots read these.

use serde::{Deserialize, Serialize};

use crate::scenario::{NodeId, Time};

/// A finished flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FctRecord {
    /// Index in [`crate::Scenario::flows`].
    pub flow: usize,
    pub src: NodeId,
    pub dst: NodeId,
    /// UDP ports of the flow's packets (the sender QP's source port, 4791).
    pub sport: u16,
    pub dport: u16,
    pub size: u64,
    pub start_ps: Time,
    /// From the start to the sender's completion of its last request.
    pub fct_ps: Time,
}

/// A PFC frame received: the receiver stops (`pause`) or resumes sending
/// the priorities it names on port `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PfcRecord {
    pub time_ps: Time,
    pub node: NodeId,
    pub is_switch: bool,
    /// Port of the receiver (from 1).
    pub port: u32,
    pub priority: u8,
    pub pause: bool,
}

/// A switch ingress port whose headroom took bytes or that refused frames
/// (for want of buffer: a full headroom on a lossless priority, or a lossy
/// one over its threshold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadroomUse {
    pub node: NodeId,
    /// Port (from 1).
    pub port: u32,
    /// The port's headroom per lossless priority.
    pub headroom_bytes: u64,
    /// The most of it one priority held at once.
    pub peak_bytes: u64,
    pub refused: u64,
}

/// An egress queue of a monitored port at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSample {
    pub time_ps: Time,
    pub node: NodeId,
    pub port: u32,
    /// Bytes waiting in the port's egress queues, all priorities.
    pub bytes: u64,
    /// Priorities the port is paused on (bit mask).
    pub paused: u8,
}

/// A flow's sending rate (its QP's DCQCN current rate, or the line rate)
/// at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateSample {
    pub time_ps: Time,
    pub flow: usize,
    pub rate_bps: f64,
}

/// An egress queue, as the deadlock detector and watchdog name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueueRef {
    pub node: NodeId,
    pub port: u32,
    pub priority: u8,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Ending {
    /// Every flow completed.
    Completed,
    /// The stop time came first.
    StopTime,
    /// Nothing could move: a cycle of paused egress queues, each waiting
    /// for the next (cyclic buffer dependency).
    Deadlock { at_ps: Time, cycle: Vec<QueueRef> },
    /// Nothing left to happen, yet some flows did not complete (their
    /// QPs failed, e.g. retries exhausted behind a dead link).
    Stalled,
}

/// Counters of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counters {
    /// Discrete events processed.
    pub events: u64,
    /// Frames that left a port (each hop counts once).
    pub packet_hops: u64,
    /// Data frames the hosts sent / received.
    pub host_tx_frames: u64,
    pub host_rx_frames: u64,
    /// Wire bytes of the data frames hosts sent / received.
    pub host_tx_bytes: u64,
    pub host_rx_bytes: u64,
    /// Wire bytes of the data frames dropped anywhere.
    pub dropped_bytes: u64,
    /// PFC frames sent (XOFF and XON).
    pub pfc_pause_sent: u64,
    pub pfc_resume_sent: u64,
    /// XOFFs sent again before the last one ran out (with pause quanta).
    pub pfc_refresh_sent: u64,
    /// Frames marked CE by switches.
    pub ecn_marked: u64,
    /// CNPs the hosts sent.
    pub cnps: u64,
    /// Frames dropped because a lossless queue's headroom overflowed, or a
    /// lossy priority found no buffer.
    pub dropped_buffer: u64,
    /// Frames lost on the wire (link loss or a link down).
    pub dropped_link: u64,
    /// Extra copies a faulty link made, and frames it corrupted.
    pub duplicated: u64,
    pub corrupted: u64,
    /// Frames the watchdog dropped, and times it fired.
    pub dropped_watchdog: u64,
    pub watchdog_fired: u64,
    /// Frames a stalled NIC had no room for (sent to it despite its pause).
    pub dropped_nic_rx: u64,
    /// Frames with no route.
    pub dropped_unroutable: u64,
    /// Datagrams the engines refused (ICRC, malformed).
    pub engine_rx_errors: u64,
    /// Flows whose QP failed (completion with an error).
    pub flows_failed: u64,
    /// Times a requester's ACK timer ran out and it went back to resend
    /// (rxe's `completer_retry_err`), and sequence NAKs it received
    /// (`rcvd_seq_err`: a gap the responder saw, resent at once).
    pub retry_timeouts: u64,
    pub seq_naks: u64,
}

impl Counters {
    /// Frames lost for any reason: refused for want of buffer, lost on a
    /// link, flushed by a watchdog, unroutable, or dropped by a stalled
    /// NIC's receive buffer.
    pub fn frames_lost(&self) -> u64 {
        self.dropped_buffer
            + self.dropped_link
            + self.dropped_watchdog
            + self.dropped_unroutable
            + self.dropped_nic_rx
    }
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Report {
    pub fct: Vec<FctRecord>,
    pub pfc: Vec<PfcRecord>,
    pub queues: Vec<QueueSample>,
    pub rates: Vec<RateSample>,
    pub counters: Counters,
    pub ending: Option<Ending>,
    /// Simulated time at the end.
    pub end_ps: Time,
    /// Wire bytes of the data frames still in the fabric at the end: in
    /// NIC and switch queues, on links, in a stalled NIC's buffer.
    /// Conservation: `host_tx_bytes = host_rx_bytes + dropped_bytes +
    /// bytes_in_fabric`.
    pub bytes_in_fabric: u64,
    /// Watchdog firings: (time, queue).
    pub watchdog_log: Vec<(Time, QueueRef)>,
    /// Deadlocks the detector confirmed while a watchdog was on (the run
    /// goes on): (time, cycle). Without a watchdog the first one ends the
    /// run ([`Ending::Deadlock`]).
    pub deadlocks: Vec<(Time, Vec<QueueRef>)>,
    /// Switch ingress ports whose headroom was used or that refused
    /// frames, in node and port order.
    #[serde(default)]
    pub headroom: Vec<HeadroomUse>,
}
