//! Datagrams between the engine and its driver: where one came from or goes
//! to, and the IP/UDP encapsulation its ICRC covers.
//!
//! A datagram is the UDP payload of a RoCEv2 packet (BTH through ICRC); the
//! driver tells the engine the addresses, ports and ECN bits it came with.
//! Since the ICRC covers the IP and UDP headers, the engine rebuilds them from
//! that metadata: IPv4 with DF set, no options, and the Identification the
//! driver reports.
//!
//! * Sending, the engine computes the ICRC for ID 0, the ID an unconnected
//!   Linux UDP socket with DF set writes (`ip_select_ident`); a driver whose
//!   packets leave with another ID (the segments of a GSO send) fixes the
//!   ICRC with [`roce_wire::icrc::Ipv4IdIcrc::delta`].
//! * Receiving, a driver on a UDP socket cannot see the ID (`ipv4_id:
//!   None`). The engine then checks the ICRC for *some* ID and learns which
//!   one ([`IcrcCheck::Ipv4IdInferred`]): a check 16 bits weaker than the
//!   full ICRC (see `roce_wire::icrc::Ipv4IdIcrc`). A driver that sees the
//!   real header passes the ID and gets the full check.

use core::net::IpAddr;

use roce_wire::EncapRepr;

/// Where a datagram came from / goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DatagramMeta {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// ECN codepoint of the IP header (0..=3; 3 is CE).
    pub ecn: u8,
    /// IPv4 Identification, if the driver knows it (see module docs).
    pub ipv4_id: Option<u16>,
}

impl DatagramMeta {
    /// The IP and UDP headers the datagram travels in, as far as the ICRC
    /// sees them: addresses, ports and the IPv4 Identification (0 when not
    /// known). The fields the ICRC masks (TOS, TTL, flow label, UDP
    /// checksum) are left 0; a caller that knows them sets them.
    pub fn encap(&self) -> EncapRepr {
        EncapRepr {
            src: self.src,
            dst: self.dst,
            src_port: self.src_port,
            dst_port: self.dst_port,
            ident: self.ipv4_id.unwrap_or(0),
            tos: 0,
            ttl: 0,
            flow_label: 0,
            udp_checksum: false,
        }
    }
}

/// What the ICRC check of a received datagram found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IcrcCheck {
    /// The ICRC matches the headers as the driver described them (IPv6, or
    /// IPv4 with the Identification given).
    Verified,
    /// IPv4 whose Identification the driver could not see: the ICRC is
    /// right for this ID and for no other (16 of its 32 bits spent on
    /// finding the ID).
    Ipv4IdInferred(u16),
    /// The ICRC does not match: dropped and counted in `icrc_errors`.
    Failed,
    /// Too short to hold a BTH and ICRC, or the addresses mix IPv4 and IPv6:
    /// dropped and counted in `malformed_dropped`.
    Malformed,
}

/// The largest datagram the engine produces (BTH, the longest extension
/// headers, a 4096-byte payload, pad and ICRC), with room to spare: every
/// buffer given to `poll_transmit` must hold one.
pub const MAX_DATAGRAM: usize = 4096 + 128;

/// Datagrams the engine wants sent: `len` bytes at the start of the buffer
/// given to `poll_transmit`. One datagram, or (from
/// `poll_transmit_batch`) several of `segment_size` bytes laid end to end,
/// the last possibly shorter, all with the same addresses: a UDP GSO send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transmit {
    pub meta: DatagramMeta,
    /// DSCP << 2 | ECN, for IP_TOS / IPV6_TCLASS.
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    /// Bytes in the buffer: the datagram, or all of the batch.
    pub len: usize,
    /// Bytes of each datagram (of each but the last, in a batch).
    pub segment_size: usize,
    /// The source QP (for drivers that shard or trace by QP).
    pub qpn: u32,
    /// Of a single datagram, the bytes at its start that carry anything:
    /// `len`, unless the engine elides payload (`config::Payload`), when
    /// the bytes from here to the ICRC are zeros that stand for payload not
    /// carried, and that an engine in the same mode does not read. `len`
    /// for a batch.
    pub carried: usize,
}

impl Transmit {
    /// Number of datagrams in the buffer.
    pub fn segments(&self) -> usize {
        self.len.div_ceil(self.segment_size.max(1))
    }
}

/// Payload a datagram leaves in registered memory
/// ([`crate::Engine::poll_transmit_batch_refs`]): the bytes
/// `[at, at + src.len())` of the buffer the engine filled are not written
/// (their content is unspecified) and are to be sent from `src` instead.
#[derive(Debug, Clone)]
pub struct Hole {
    /// Where the bytes go, from the start of the buffer.
    pub at: usize,
    pub src: crate::mem::PayloadRef,
}

impl Hole {
    /// One past the last byte the hole stands for.
    pub fn end(&self) -> usize {
        self.at + self.src.len()
    }
}

/// The ICRC of a RoCEv2 datagram with this metadata: over the IP and UDP
/// headers it travels in, rebuilt from `meta` (see the module docs), and
/// `body` (BTH through pad). `None` if the addresses mix IPv4 and IPv6 or
/// the datagram is too long for IP.
pub fn datagram_icrc(meta: &DatagramMeta, body: &[u8]) -> Option<u32> {
    meta.encap().icrc(body).ok()
}

/// [`datagram_icrc`] of a body of `len` bytes (BTH through pad) whose
/// bytes `holes` (each after the BTH, in order, inside the body) are in
/// registered memory rather than in `buf`.
pub(crate) fn datagram_icrc_holes(
    meta: &DatagramMeta,
    buf: &[u8],
    len: usize,
    holes: &[Hole],
) -> Option<u32> {
    let bth = roce_wire::bth::HEADER_LEN;
    if len < bth || holes.iter().any(|h| h.at < bth || h.end() > len) {
        return None;
    }
    meta.encap()
        .icrc_with(len, &buf[..bth], |h| {
            let mut from = bth;
            for hole in holes {
                h.update(&buf[from..hole.at]);
                hole.src.nic_icrc(h);
                from = hole.end();
            }
            h.update(&buf[from..len]);
        })
        .ok()
}

/// What of `body` (BTH through pad) the ICRC covers: all of it, or, when
/// the engine elides payload ([`crate::config::Payload::Elided`]), the BTH
/// and its opcode's extension headers alone. `None`: an unknown opcode, or
/// a body shorter than its headers.
pub(crate) fn icrc_body(payload: crate::config::Payload, body: &[u8]) -> Option<&[u8]> {
    match payload {
        crate::config::Payload::Carried => Some(body),
        crate::config::Payload::Elided { .. } => {
            let bth = roce_wire::bth::Bth::new_checked(body).ok()?;
            let info = roce_wire::opcode::lookup(bth.opcode())?;
            body.get(..info.header_len())
        }
    }
}
