//! What the driver counts of its socket, beside the engine's counters.

use std::io;
use std::net::SocketAddr;

use crate::udp::SocketBuffers;

/// A datagram the kernel refused to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendError {
    pub dst: SocketAddr,
    /// Bytes of the datagram (each one, for a GSO run).
    pub len: usize,
    pub kind: io::ErrorKind,
    pub os_error: Option<i32>,
    /// The system's description of the error.
    pub message: String,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sending a {}-byte datagram to {} failed: {}", self.len, self.dst, self.message)
    }
}

/// What the driver counts of its socket, beside the engine's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Datagrams given up because the socket buffer stayed full (the
    /// transport retransmits them).
    pub tx_dropped: u64,
    /// Datagrams the kernel refused with an error.
    pub tx_errors: u64,
    /// The first of those errors.
    pub first_tx_error: Option<SendError>,
    /// UDP GSO / GRO in use.
    pub gso: bool,
    pub gro: bool,
    /// Why GSO was turned off after the device opened, if it was (the
    /// kernel refused a segmented send; the datagrams went out one by one).
    pub gso_refused: Option<String>,
    /// Times an application thread polling a CQ with a pipeline of sends
    /// outstanding took the socket over from the driver thread
    /// (`Cq::poll_or_drive`); it gives it back once it stops.
    pub drive_takeovers: u64,
    /// Receive calls (`recvmmsg`) the kernel failed with an error other
    /// than "nothing waiting".
    pub rx_errors: u64,
    /// The first of those errors, as the system describes it.
    pub first_rx_error: Option<String>,
    /// Times the driver thread's timerfd could not be made or armed; each
    /// time it falls back to `epoll`'s millisecond timeouts (timers and
    /// pacing then run up to a millisecond late).
    pub timerfd_failures: u64,
    /// Why the driver thread runs timers at millisecond resolution, if it
    /// does (the first timerfd failure).
    pub timer_fallback: Option<String>,
    /// The socket buffers asked for and what the kernel granted.
    pub socket_buffers: SocketBuffers,
    /// Datagrams the kernel dropped at the socket because its receive
    /// buffer was full (`SO_RXQ_OVFL`; `SO_MEMINFO` when read): each is a
    /// loss the transport recovers only by retransmission.
    pub rx_dropped: u64,
    /// Bytes the device's QPs can have in flight towards its socket, as
    /// last estimated (see `Core::note_qp`): the send windows of their
    /// peers, plus the largest RDMA READ posted (its responses come back
    /// in one burst).
    pub rx_in_flight_max: u64,
    /// Said once, when `rx_in_flight_max` first outgrew the room in the
    /// receive buffer (also printed to stderr then).
    pub socket_buffer_warning: Option<String>,
}
