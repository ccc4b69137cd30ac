//! The communication manager's messages (IBTA vol. 1 §12.6, tables 99–120;
//! Linux `include/rdma/ibta_vol1_c12.h`): REQ, MRA, REJ, REP, RTU, DREQ,
//! DREP, SIDR_REQ and SIDR_REP, each the 232 bytes of class data of a CM
//! MAD (`crate::mad`). Offsets below are relative to the start of the
//! message (MAD byte 24); bit fields are numbered from the most
//! significant bit, as the tables give them.
//!
//! Every message has a zero-copy view (`Req<T>`, `Rep<T>`, ...) with named
//! accessors and a `Repr` (`ReqRepr`, ...) that parses from and emits into
//! it; [`CmMadRepr`] is a whole CM MAD (header and message), and its
//! `Display` names every field as `roce pcap decode` prints it.

use core::fmt;

use crate::error::{Header, Result, WireError};
use crate::mad::{self, Mad, MadRepr, DATA_LEN, MAD_LEN};

mod msgs;
mod path;

pub use msgs::*;
pub use path::{CmPath, PathRepr, PATH_LEN};

/// CM attribute IDs (IBTA vol. 1 table 98; Linux `CM_*_ATTR_ID`).
pub mod attr {
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001a;
}

/// Bytes of private data each message holds (Linux `IB_CM_*_PRIVATE_DATA_SIZE`).
pub mod private_len {
    pub const REQ: usize = 92;
    pub const MRA: usize = 222;
    pub const REJ: usize = 148;
    pub const REP: usize = 196;
    pub const RTU: usize = 224;
    pub const DREQ: usize = 220;
    pub const DREP: usize = 224;
    pub const SIDR_REQ: usize = 216;
    pub const SIDR_REP: usize = 136;
}

/// Copies `data` into the private-data field `dst`, zero-filling the rest.
pub(crate) fn put_private(dst: &mut [u8], data: &[u8]) -> Result<()> {
    if data.len() > dst.len() {
        return Err(WireError::PrivateDataTooLong { len: data.len(), max: dst.len() });
    }
    dst[..data.len()].copy_from_slice(data);
    dst[data.len()..].fill(0);
    Ok(())
}

/// One CM message, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMsgRepr<'a> {
    Req(ReqRepr<'a>),
    Mra(MraRepr<'a>),
    Rej(RejRepr<'a>),
    Rep(RepRepr<'a>),
    Rtu(RtuRepr<'a>),
    Dreq(DreqRepr<'a>),
    Drep(DrepRepr<'a>),
    SidrReq(SidrReqRepr<'a>),
    SidrRep(SidrRepRepr<'a>),
}

impl CmMsgRepr<'_> {
    /// The message's attribute ID.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMsgRepr::Req(_) => attr::REQ,
            CmMsgRepr::Mra(_) => attr::MRA,
            CmMsgRepr::Rej(_) => attr::REJ,
            CmMsgRepr::Rep(_) => attr::REP,
            CmMsgRepr::Rtu(_) => attr::RTU,
            CmMsgRepr::Dreq(_) => attr::DREQ,
            CmMsgRepr::Drep(_) => attr::DREP,
            CmMsgRepr::SidrReq(_) => attr::SIDR_REQ,
            CmMsgRepr::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's name as the IBTA spells it.
    pub fn name(&self) -> &'static str {
        match self {
            CmMsgRepr::Req(_) => "REQ",
            CmMsgRepr::Mra(_) => "MRA",
            CmMsgRepr::Rej(_) => "REJ",
            CmMsgRepr::Rep(_) => "REP",
            CmMsgRepr::Rtu(_) => "RTU",
            CmMsgRepr::Dreq(_) => "DREQ",
            CmMsgRepr::Drep(_) => "DREP",
            CmMsgRepr::SidrReq(_) => "SIDR_REQ",
            CmMsgRepr::SidrRep(_) => "SIDR_REP",
        }
    }
}

/// A whole CM MAD: the common header and one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmMadRepr<'a> {
    pub mad: MadRepr,
    pub msg: CmMsgRepr<'a>,
}

impl<'a> CmMadRepr<'a> {
    /// Parses a CM MAD (at least 256 bytes; more is ignored). Errors: not
    /// the CM class, class version or method Send (what Linux' MAD layer
    /// drops, `validate_mad`), or an attribute that is not one of the nine
    /// messages (LAP/APR are not supported).
    pub fn parse(bytes: &'a [u8]) -> Result<CmMadRepr<'a>> {
        if bytes.len() < MAD_LEN {
            return Err(WireError::Truncated { header: Header::CmMessage, need: MAD_LEN, have: bytes.len() });
        }
        let view = Mad::new_checked(&bytes[..MAD_LEN])?;
        let mad = MadRepr::parse(&view)?;
        if mad.mgmt_class != mad::MGMT_CLASS_CM {
            return Err(WireError::Mad("not the CM management class"));
        }
        if mad.class_version != mad::CM_CLASS_VERSION {
            return Err(WireError::Mad("CM class version is not 2"));
        }
        if mad.method != mad::METHOD_SEND {
            return Err(WireError::Mad("CM method is not Send"));
        }
        let d = &bytes[mad::HEADER_LEN..MAD_LEN];
        let msg = match mad.attr_id {
            attr::REQ => CmMsgRepr::Req(ReqRepr::parse(&Req::new_checked(d)?)?),
            attr::MRA => CmMsgRepr::Mra(MraRepr::parse(&Mra::new_checked(d)?)?),
            attr::REJ => CmMsgRepr::Rej(RejRepr::parse(&Rej::new_checked(d)?)?),
            attr::REP => CmMsgRepr::Rep(RepRepr::parse(&Rep::new_checked(d)?)?),
            attr::RTU => CmMsgRepr::Rtu(RtuRepr::parse(&Rtu::new_checked(d)?)?),
            attr::DREQ => CmMsgRepr::Dreq(DreqRepr::parse(&Dreq::new_checked(d)?)?),
            attr::DREP => CmMsgRepr::Drep(DrepRepr::parse(&Drep::new_checked(d)?)?),
            attr::SIDR_REQ => CmMsgRepr::SidrReq(SidrReqRepr::parse(&SidrReq::new_checked(d)?)?),
            attr::SIDR_REP => CmMsgRepr::SidrRep(SidrRepRepr::parse(&SidrRep::new_checked(d)?)?),
            _ => return Err(WireError::Mad("CM attribute not supported (LAP/APR/unknown)")),
        };
        Ok(CmMadRepr { mad, msg })
    }

    /// A CM MAD header for `msg` with this transaction ID.
    pub fn new(transaction_id: u64, msg: CmMsgRepr<'a>) -> CmMadRepr<'a> {
        CmMadRepr { mad: MadRepr::cm(msg.attr_id(), transaction_id), msg }
    }

    /// Writes the 256-byte MAD into `buf[..256]` (the header's attribute ID
    /// is the message's). Errors: a short buffer, private data too long.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < MAD_LEN {
            return Err(WireError::BufferTooSmall { need: MAD_LEN, have: buf.len() });
        }
        let buf = &mut buf[..MAD_LEN];
        buf.fill(0);
        let mut hdr = self.mad;
        hdr.attr_id = self.msg.attr_id();
        hdr.emit(&mut Mad::new_unchecked(&mut buf[..]));
        let d = &mut buf[mad::HEADER_LEN..];
        debug_assert_eq!(d.len(), DATA_LEN);
        match &self.msg {
            CmMsgRepr::Req(r) => r.emit(&mut Req::new_unchecked(d)),
            CmMsgRepr::Mra(r) => r.emit(&mut Mra::new_unchecked(d)),
            CmMsgRepr::Rej(r) => r.emit(&mut Rej::new_unchecked(d)),
            CmMsgRepr::Rep(r) => r.emit(&mut Rep::new_unchecked(d)),
            CmMsgRepr::Rtu(r) => r.emit(&mut Rtu::new_unchecked(d)),
            CmMsgRepr::Dreq(r) => r.emit(&mut Dreq::new_unchecked(d)),
            CmMsgRepr::Drep(r) => r.emit(&mut Drep::new_unchecked(d)),
            CmMsgRepr::SidrReq(r) => r.emit(&mut SidrReq::new_unchecked(d)),
            CmMsgRepr::SidrRep(r) => r.emit(&mut SidrRep::new_unchecked(d)),
        }
    }
}

/// The IPv4 or IPv6 address a GID holds (an IPv4-mapped GID as IPv4).
pub fn gid_ip(gid: &[u8; 16]) -> core::net::IpAddr {
    let v6 = core::net::Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => v4.into(),
        None => v6.into(),
    }
}

fn private_summary(f: &mut fmt::Formatter<'_>, pd: &[u8]) -> fmt::Result {
    let used = pd.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    write!(f, " private={used}B")
}

impl fmt::Display for CmMadRepr<'_> {
    /// One line: `CM REQ tid=... ` then the message's fields; a REQ or
    /// SIDR_REQ with an RDMA CM IP header in its private data shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CM {} tid={:#018x}", self.msg.name(), self.mad.transaction_id)?;
        match &self.msg {
            CmMsgRepr::Req(r) => {
                write!(
                    f,
                    " local_comm_id={:#010x} service_id={:#018x} qpn={:#08x} psn={:#08x} ca_guid={:#018x} \
                     resp_res={} init_depth={} transport={} mtu={} retry={} rnr_retry={} \
                     cm_timeouts={}/{} max_cm_retries={} pkey={:#06x} ack_timeout={} gids={}->{} flow_label={:#x} \
                     hop_limit={} tclass={}",
                    r.local_comm_id,
                    r.service_id,
                    r.local_qpn,
                    r.starting_psn,
                    r.local_ca_guid,
                    r.responder_resources,
                    r.initiator_depth,
                    r.transport_type,
                    r.path_mtu,
                    r.retry_count,
                    r.rnr_retry_count,
                    r.local_cm_response_timeout,
                    r.remote_cm_response_timeout,
                    r.max_cm_retries,
                    r.pkey,
                    r.primary_path.local_ack_timeout,
                    gid_ip(&r.primary_path.local_gid),
                    gid_ip(&r.primary_path.remote_gid),
                    r.primary_path.flow_label,
                    r.primary_path.hop_limit,
                    r.primary_path.traffic_class,
                )?;
                cma_summary(f, r.service_id, r.private_data)?;
                private_summary(f, r.private_data)
            }
            CmMsgRepr::Mra(r) => {
                write!(
                    f,
                    " local_comm_id={:#010x} remote_comm_id={:#010x} mraed={} service_timeout={}",
                    r.local_comm_id, r.remote_comm_id, r.message_mraed, r.service_timeout
                )?;
                private_summary(f, r.private_data)
            }
            CmMsgRepr::Rej(r) => {
                write!(
                    f,
                    " local_comm_id={:#010x} remote_comm_id={:#010x} rejected={} reason={} ({}) ari_len={}",
                    r.local_comm_id,
                    r.remote_comm_id,
                    r.message_rejected,
                    r.reason,
                    reject_reason_name(r.reason),
                    r.reject_info_len
                )?;
                private_summary(f, r.private_data)
            }
            CmMsgRepr::Rep(r) => {
                write!(
                    f,
                    " local_comm_id={:#010x} remote_comm_id={:#010x} qpn={:#08x} psn={:#08x} ca_guid={:#018x} \
                     resp_res={} init_depth={} target_ack_delay={} rnr_retry={} srq={}",
                    r.local_comm_id,
                    r.remote_comm_id,
                    r.local_qpn,
                    r.starting_psn,
                    r.local_ca_guid,
                    r.responder_resources,
                    r.initiator_depth,
                    r.target_ack_delay,
                    r.rnr_retry_count,
                    u8::from(r.srq)
                )?;
                private_summary(f, r.private_data)
            }
            CmMsgRepr::Rtu(r) => {
                write!(
                    f,
                    " local_comm_id={:#010x} remote_comm_id={:#010x}",
                    r.local_comm_id, r.remote_comm_id
                )?;
                private_summary(f, r.private_data)
            }
            CmMsgRepr::Dreq(r) => {
                write!(
                    f,
                    " local_comm_id={:#010x} remote_comm_id={:#010x} remote_qpn={:#08x}",
                    r.local_comm_id, r.remote_comm_id, r.remote_qpn
                )?;
                private_summary(f, r.private_data)
            }
            CmMsgRepr::Drep(r) => {
                write!(
                    f,
                    " local_comm_id={:#010x} remote_comm_id={:#010x}",
                    r.local_comm_id, r.remote_comm_id
                )?;
                private_summary(f, r.private_data)
            }
            CmMsgRepr::SidrReq(r) => {
                write!(
                    f,
                    " request_id={:#010x} pkey={:#06x} service_id={:#018x}",
                    r.request_id, r.pkey, r.service_id
                )?;
                cma_summary(f, r.service_id, r.private_data)?;
                private_summary(f, r.private_data)
            }
            CmMsgRepr::SidrRep(r) => {
                write!(
                    f,
                    " request_id={:#010x} status={} qpn={:#08x} qkey={:#010x} service_id={:#018x}",
                    r.request_id, r.status, r.qpn, r.qkey, r.service_id
                )?;
                private_summary(f, r.private_data)
            }
        }
    }
}

/// The RDMA CM IP header of a REQ's private data, when the service ID is
/// one of RDMA CM's port spaces.
fn cma_summary(f: &mut fmt::Formatter<'_>, service_id: u64, pd: &[u8]) -> fmt::Result {
    let Some((ps, port)) = crate::cma::split_service_id(service_id) else { return Ok(()) };
    write!(f, " ps={ps} port={port}")?;
    match crate::cma::CmaHdrRepr::parse(pd) {
        Ok(h) => write!(f, " ip={}:{}->{}:{}", h.src_ip, h.src_port, h.dst_ip, port),
        Err(_) => f.write_str(" ip=(no valid RDMA CM header)"),
    }
}

/// The name Linux gives a REJ reason (`enum ib_cm_rej_reason`).
pub fn reject_reason_name(reason: u16) -> &'static str {
    match reason {
        1 => "no QP",
        2 => "no EEC",
        3 => "no resources",
        4 => "timeout",
        5 => "unsupported request",
        6 => "invalid comm ID",
        7 => "invalid comm instance",
        8 => "invalid service ID",
        9 => "invalid transport type",
        10 => "stale connection",
        11 => "RDC not exist",
        12 => "invalid GID",
        13 => "invalid LID",
        14 => "invalid SL",
        15 => "invalid traffic class",
        16 => "invalid hop limit",
        17 => "invalid packet rate",
        18..=23 => "invalid alternate path",
        24 => "port CM redirect",
        25 => "port redirect",
        26 => "invalid MTU",
        27 => "insufficient responder resources",
        28 => "consumer defined",
        29 => "invalid RNR retry",
        30 => "duplicate local comm ID",
        31 => "invalid class version",
        32 => "invalid flow label",
        33 => "invalid alternate flow label",
        35 => "vendor option not supported",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests;
