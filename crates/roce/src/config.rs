//! How to open a device, and how it checks what it receives.

use std::net::SocketAddr;
use std::path::PathBuf;

use roce_proto::cc::CcAlgorithm;
use roce_proto::{CnpConfig, MrAddressing};

/// How to open a device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Address and UDP port to bind; the IP is the device's GID. Port 4791
    /// is RoCEv2's; other ports let several devices share a host.
    pub bind: SocketAddr,
    /// Busy-poll mode: the application's threads receive, by calling
    /// `Cq::poll`, `Cq::wait` or `Device::progress` in their loops, and what
    /// a receive produces (ACKs) leaves with the next post or call; the
    /// driver thread only keeps the timers. An application that stops
    /// calling them for long makes its peers time out. Lowest latency.
    pub busy_poll: bool,
    /// Write every packet sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Seed of the engine's identifiers, for reproducible runs only: 64
    /// bits anyone who sees enough QPNs and keys can search. `None` (the
    /// default) draws 256 bits from the OS and fails if it cannot.
    pub seed: Option<u64>,
    /// DSCP for outgoing packets, 0..=63 (`Device::open` refuses more with
    /// `Error::Dscp`); QPs may override it through their address vector.
    pub dscp: u8,
    /// Mark outgoing packets ECN-capable (ECT(0)).
    pub ecn: bool,
    /// Use UDP GSO where the kernel offers it (several datagrams in one
    /// send). Off: one datagram per message.
    pub gso: bool,
    /// The address regions advertise to peers (default: the memory's own
    /// address, as ibverbs does; `ZeroBased` or `Random` keep the process's
    /// memory layout from peers).
    pub mr_addressing: MrAddressing,
    /// Hold each connected QP's peer to the UDP source port of its first
    /// packet (see `EngineConfig::pin_peer_port`).
    pub pin_peer_port: bool,
    /// Congestion control of connected QPs (default none: line rate).
    pub cc: CcAlgorithm,
    /// The rate congestion control starts from, bits/s.
    pub line_rate_bps: u64,
    /// How CE marks are answered with CNPs.
    pub cnp: CnpConfig,
    /// Bytes of socket receive buffer to ask for (default 32 MiB, see
    /// `udp::DEFAULT_RECV_BUFFER`). What the
    /// kernel granted is in `DriverStats::socket_buffers`; a device warns
    /// once when it is less than its QPs can have in flight.
    pub recv_buffer: usize,
    /// Bytes of socket send buffer to ask for (default 8 MiB).
    pub send_buffer: usize,
    /// Ask with `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` where the process may
    /// (CAP_NET_ADMIN), past `net.core.rmem_max`/`wmem_max` (default on;
    /// off: the plain options, which the kernel caps silently).
    pub force_buffers: bool,
}

/// How a device checks the ICRC of the packets it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RxIcrcCheck {
    /// Every bit (IPv6: the socket shows every field the ICRC covers).
    Full,
    /// IPv4 on a UDP socket, which does not show the Identification field:
    /// the ICRC is checked for the one ID that makes it right, so 16 of its
    /// 32 bits find the ID and a corrupt packet passes with probability
    /// 2^-16 (the IPv4 header checksum still protects the ID).
    Ipv4IdInferred,
}

impl std::fmt::Display for RxIcrcCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RxIcrcCheck::Full => "full (32 bits)",
            RxIcrcCheck::Ipv4IdInferred => {
                "IPv4 ID inferred from the ICRC (a UDP socket cannot see it): 16 of 32 bits check the packet"
            }
        })
    }
}

impl DeviceConfig {
    pub fn new(bind: SocketAddr) -> DeviceConfig {
        DeviceConfig {
            bind,
            busy_poll: false,
            pcap: None,
            seed: None,
            dscp: 0,
            ecn: true,
            gso: true,
            mr_addressing: MrAddressing::Pointer,
            pin_peer_port: false,
            cc: CcAlgorithm::None,
            line_rate_bps: roce_proto::limits::LINE_RATE_BPS,
            cnp: CnpConfig::default(),
            recv_buffer: crate::udp::DEFAULT_RECV_BUFFER,
            send_buffer: crate::udp::DEFAULT_SEND_BUFFER,
            force_buffers: true,
        }
    }
}
