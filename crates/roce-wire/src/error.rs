//! Every way a frame can fail to be a well-formed RoCEv2 packet, as one typed enum.

use core::net::IpAddr;

use thiserror::Error;

/// Which header a length error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header {
    Ethernet,
    Vlan,
    Ipv4,
    Ipv6,
    Grh,
    Udp,
    Bth,
    Rdeth,
    Deth,
    Reth,
    Aeth,
    AtomicEth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    Feth,
    Cnp,
    Icrc,
    /// The 24-byte MAD header (IBTA vol. 1 §13.4.3).
    Mad,
    /// A CM message in a MAD's data (IBTA vol. 1 §12.6).
    CmMessage,
    /// RDMA CM's 36-byte IP addressing header in private data (Annex A11).
    CmaHdr,
}

impl core::fmt::Display for Header {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = match self {
            Header::Ethernet => "Ethernet",
            Header::Vlan => "802.1Q tag",
            Header::Ipv4 => "IPv4",
            Header::Ipv6 => "IPv6",
            Header::Grh => "GRH",
            Header::Udp => "UDP",
            Header::Bth => "BTH",
            Header::Rdeth => "RDETH",
            Header::Deth => "DETH",
            Header::Reth => "RETH",
            Header::Aeth => "AETH",
            Header::AtomicEth => "AtomicETH",
            Header::AtomicAckEth => "AtomicAckETH",
            Header::ImmDt => "ImmDt",
            Header::Ieth => "IETH",
            Header::Feth => "FETH",
            Header::Cnp => "CNP padding",
            Header::Icrc => "ICRC",
            Header::Mad => "MAD header",
            Header::CmMessage => "CM message",
            Header::CmaHdr => "RDMA CM IP header",
        };
        f.write_str(s)
    }
}

/// A malformed or invalid packet. `kind()` gives a stable short name for each
/// variant (the names `roce-pcap-check` uses for the same faults).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("{header} truncated: need {need} bytes, have {have}")]
    Truncated { header: Header, need: usize, have: usize },
    #[error("BTH truncated: UDP payload is {have} bytes, BTH + ICRC need 16")]
    TruncatedBth { have: usize },
    #[error("{opcode_name} needs {need} bytes of headers + ICRC, only {have}")]
    TruncatedHeaders { opcode_name: &'static str, need: usize, have: usize },
    #[error("not a RoCE frame: EtherType 0x{0:04x}")]
    NotIp(u16),
    #[error("not UDP: IP protocol {0}")]
    NotUdp(u8),
    #[error("UDP destination port {0} is not the RoCEv2 port")]
    WrongPort(u16),
    #[error("IP version field {0} does not match the EtherType")]
    IpVersion(u8),
    #[error("IPv4 header length {0} bytes is below 20")]
    Ipv4HeaderLen(usize),
    #[error("IP length {ip_len} exceeds the {avail} bytes present")]
    IpLength { ip_len: usize, avail: usize },
    #[error("IPv4 header checksum 0x{0:04x} is wrong")]
    Ipv4Checksum(u16),
    #[error("fragmented IPv4 packet (RoCEv2 is never fragmented)")]
    IpFragment,
    #[error("IPv6 extension header {0} present; RoCEv2 ICRC rules do not cover it")]
    Ipv6ExtHeaders(u8),
    #[error("UDP length {udp_len} does not match the IP payload length {ip_payload}")]
    UdpLength { udp_len: usize, ip_payload: usize },
    #[error("UDP checksum 0x{0:04x} is wrong")]
    UdpChecksum(u16),
    #[error("BTH transport version {0}, expected 0")]
    BthTver(u8),
    #[error("reserved field not zero: {0}")]
    ReservedNonZero(&'static str),
    #[error("P_Key 0x{0:04x} is invalid")]
    PkeyInvalid(u16),
    #[error("opcode 0x{0:02x} is reserved or not supported")]
    OpcodeUnknown(u8),
    #[error("{opcode_name} carries no payload but {len} bytes follow its headers")]
    UnexpectedPayload { opcode_name: &'static str, len: usize },
    #[error("payload + pad of {len} bytes is not a multiple of 4")]
    PadAlignment { len: usize },
    #[error("pad count {pad} is invalid on {opcode_name}")]
    PadInvalid { pad: u8, opcode_name: &'static str },
    #[error("payload length {len}: {why}")]
    PayloadLen { len: usize, why: &'static str },
    #[error("RETH DMA length {dma_len} does not fit a {opcode_name} with {payload} payload bytes")]
    RethDmaLen { dma_len: u32, payload: usize, opcode_name: &'static str },
    #[error("atomic virtual address 0x{0:x} is not 8-byte aligned")]
    AtomicVaAlign(u64),
    #[error("AETH syndrome 0x{syndrome:02x} is not allowed here: {why}")]
    AethSyndrome { syndrome: u8, why: &'static str },
    #[error("ICRC 0x{got:08x} on the wire, computed 0x{want:08x}")]
    IcrcBad { got: u32, want: u32 },
    #[error("{0} is required by the opcode but missing")]
    MissingHeader(Header),
    #[error("{0} is not part of this opcode's layout")]
    ExtraHeader(Header),
    #[error("buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall { need: usize, have: usize },
    #[error("payload of {0} bytes does not fit in one packet")]
    PayloadTooLarge(usize),
    #[error("source {src} and destination {dst} mix IPv4 and IPv6")]
    MixedIpFamilies { src: IpAddr, dst: IpAddr },
    #[error("MAD: {0}")]
    Mad(&'static str),
    #[error("private data of {len} bytes exceeds the {max} the CM message holds")]
    PrivateDataTooLong { len: usize, max: usize },
}

impl WireError {
    /// Stable short name of the fault, as `roce-pcap-check` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            WireError::Truncated { header, .. } => match header {
                Header::Ethernet | Header::Vlan | Header::Ipv4 | Header::Ipv6 | Header::Grh => {
                    "truncated_frame"
                }
                Header::Udp => "truncated_udp",
                _ => "truncated_header",
            },
            WireError::TruncatedBth { .. } => "truncated_bth",
            WireError::TruncatedHeaders { .. } => "truncated_header",
            WireError::NotIp(_) | WireError::NotUdp(_) => "not_roce",
            WireError::WrongPort(_) => "udp_dport",
            WireError::IpVersion(_) | WireError::Ipv4HeaderLen(_) => "ip_header",
            WireError::IpLength { .. } => "ip_length",
            WireError::Ipv4Checksum(_) => "ipv4_checksum",
            WireError::IpFragment => "ip_fragment",
            WireError::Ipv6ExtHeaders(_) => "ipv6_ext_headers",
            WireError::UdpLength { .. } => "udp_length",
            WireError::UdpChecksum(_) => "udp_checksum",
            WireError::BthTver(_) => "bth_tver",
            WireError::ReservedNonZero(_) => "reserved_nonzero",
            WireError::PkeyInvalid(_) => "pkey_invalid",
            WireError::OpcodeUnknown(_) => "opcode_unknown",
            WireError::UnexpectedPayload { .. } => "unexpected_payload",
            WireError::PadAlignment { .. } => "pad_alignment",
            WireError::PadInvalid { .. } => "pad_invalid",
            WireError::PayloadLen { .. } => "payload_len",
            WireError::RethDmaLen { .. } => "reth_dmalen",
            WireError::AtomicVaAlign(_) => "atomic_va_align",
            WireError::AethSyndrome { .. } => "aeth_syndrome",
            WireError::IcrcBad { .. } => "icrc_bad",
            WireError::MissingHeader(_) => "missing_header",
            WireError::ExtraHeader(_) => "extra_header",
            WireError::BufferTooSmall { .. } => "buffer_too_small",
            WireError::PayloadTooLarge(_) => "payload_too_large",
            WireError::MixedIpFamilies { .. } => "ip_family_mismatch",
            WireError::Mad(_) => "mad",
            WireError::PrivateDataTooLong { .. } => "private_data_len",
        }
    }

    /// True when the frame is simply not RoCEv2 traffic (another protocol or
    /// port), as opposed to a RoCEv2 packet that is broken.
    pub fn is_not_roce(&self) -> bool {
        matches!(self, WireError::NotIp(_) | WireError::NotUdp(_) | WireError::WrongPort(_))
    }
}

pub type Result<T> = core::result::Result<T, WireError>;
