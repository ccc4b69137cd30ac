//! The nine CM messages: views (named offsets, IBTA vol. 1 tables 99–120)
//! and Reprs. Private data is borrowed from the buffer when parsing (all of
//! the field: the kernel reports fixed lengths too) and zero-filled behind
//! what is given when emitting.

use crate::cm::{path::CmPath, path::PathRepr, path::PATH_LEN, private_len, put_private};
use crate::error::{Header, Result};
use crate::field::accessors;
use crate::mad::DATA_LEN;
use crate::view::header_view;

macro_rules! message_view {
    ($(#[$m:meta])* $name:ident, $pd_at:expr) => {
        header_view!($(#[$m])* $name, DATA_LEN, Header::CmMessage);
        impl<T: AsRef<[u8]>> $name<T> {
            /// The private-data field (all of it).
            pub fn private_data(&self) -> &[u8] {
                &self.buffer.as_ref()[$pd_at..DATA_LEN]
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// The private-data field, writable.
            pub fn private_data_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[$pd_at..DATA_LEN]
            }
        }
    };
}

// ------------------------------------------------------------------ REQ

/// REQ offsets (table 99).
pub mod req_field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const ECE_VENDOR_ID: usize = 5;
    pub const SERVICE_ID: usize = 8;
    pub const LOCAL_CA_GUID: usize = 16;
    pub const LOCAL_QKEY: usize = 28;
    pub const LOCAL_QPN: usize = 32;
    pub const RESPONDER_RESOURCES: usize = 35;
    pub const LOCAL_EECN: usize = 36;
    pub const INITIATOR_DEPTH: usize = 39;
    pub const REMOTE_EECN: usize = 40;
    /// Remote CM Response Timeout(5) / Transport Service Type(2) / End-to-End Flow Control(1).
    pub const BYTE_43: usize = 43;
    pub const STARTING_PSN: usize = 44;
    /// Local CM Response Timeout(5) / Retry Count(3).
    pub const BYTE_47: usize = 47;
    pub const PKEY: usize = 48;
    /// Path MTU(4) / RDC Exists(1) / RNR Retry Count(3).
    pub const BYTE_50: usize = 50;
    /// Max CM Retries(4) / SRQ(1) / Extended Transport Type(3).
    pub const BYTE_51: usize = 51;
    pub const PRIMARY_PATH: usize = 52;
    pub const ALTERNATE_PATH: usize = 96;
    /// SAP Supported: bit 5 of the alternate path's ACK-timeout byte.
    pub const SAP: usize = 139;
    pub const PRIVATE_DATA: usize = 140;
}

message_view!(
    /// Zero-copy view of a REQ.
    Req,
    req_field::PRIVATE_DATA
);

accessors!(Req {
    local_comm_id, set_local_comm_id: u32(req_field::LOCAL_COMM_ID);
    ece_vendor_id, set_ece_vendor_id: u24(req_field::ECE_VENDOR_ID);
    service_id, set_service_id: u64(req_field::SERVICE_ID);
    local_ca_guid, set_local_ca_guid: u64(req_field::LOCAL_CA_GUID);
    local_qkey, set_local_qkey: u32(req_field::LOCAL_QKEY);
    local_qpn, set_local_qpn: u24(req_field::LOCAL_QPN);
    responder_resources, set_responder_resources: u8(req_field::RESPONDER_RESOURCES);
    local_eecn, set_local_eecn: u24(req_field::LOCAL_EECN);
    initiator_depth, set_initiator_depth: u8(req_field::INITIATOR_DEPTH);
    remote_eecn, set_remote_eecn: u24(req_field::REMOTE_EECN);
    remote_cm_response_timeout, set_remote_cm_response_timeout: bits(req_field::BYTE_43, 0, 5);
    /// 0 RC, 1 UC, 2 RD, 3 extended (XRC).
    transport_type, set_transport_type: bits(req_field::BYTE_43, 5, 2);
    end_to_end_flow_control, set_end_to_end_flow_control: flag(req_field::BYTE_43, 7);
    starting_psn, set_starting_psn: u24(req_field::STARTING_PSN);
    local_cm_response_timeout, set_local_cm_response_timeout: bits(req_field::BYTE_47, 0, 5);
    retry_count, set_retry_count: bits(req_field::BYTE_47, 5, 3);
    pkey, set_pkey: u16(req_field::PKEY);
    /// IBTA MTU enum: 1 = 256 ... 5 = 4096.
    path_mtu, set_path_mtu: bits(req_field::BYTE_50, 0, 4);
    rdc_exists, set_rdc_exists: flag(req_field::BYTE_50, 4);
    rnr_retry_count, set_rnr_retry_count: bits(req_field::BYTE_50, 5, 3);
    max_cm_retries, set_max_cm_retries: bits(req_field::BYTE_51, 0, 4);
    srq, set_srq: flag(req_field::BYTE_51, 4);
    extended_transport_type, set_extended_transport_type: bits(req_field::BYTE_51, 5, 3);
    sap_supported, set_sap_supported: flag(req_field::SAP, 5);
});

impl<T: AsRef<[u8]>> Req<T> {
    pub fn primary_path(&self) -> CmPath<&[u8]> {
        let at = req_field::PRIMARY_PATH;
        CmPath::new_unchecked(&self.buffer.as_ref()[at..at + PATH_LEN])
    }
    pub fn alternate_path(&self) -> CmPath<&[u8]> {
        let at = req_field::ALTERNATE_PATH;
        CmPath::new_unchecked(&self.buffer.as_ref()[at..at + PATH_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Req<T> {
    pub fn primary_path_mut(&mut self) -> CmPath<&mut [u8]> {
        let at = req_field::PRIMARY_PATH;
        CmPath::new_unchecked(&mut self.buffer.as_mut()[at..at + PATH_LEN])
    }
    pub fn alternate_path_mut(&mut self) -> CmPath<&mut [u8]> {
        let at = req_field::ALTERNATE_PATH;
        CmPath::new_unchecked(&mut self.buffer.as_mut()[at..at + PATH_LEN])
    }
}

/// Parsed REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReqRepr<'a> {
    pub local_comm_id: u32,
    pub ece_vendor_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    pub local_qpn: u32,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    pub remote_cm_response_timeout: u8,
    pub transport_type: u8,
    pub end_to_end_flow_control: bool,
    pub starting_psn: u32,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub pkey: u16,
    pub path_mtu: u8,
    pub rdc_exists: bool,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    pub extended_transport_type: u8,
    pub primary_path: PathRepr,
    /// All zero when there is none (Linux tests the local LID: `cm_req_has_alt_path`).
    pub alternate_path: PathRepr,
    pub sap_supported: bool,
    pub private_data: &'a [u8],
}

impl<'a> ReqRepr<'a> {
    pub fn parse(v: &Req<&'a [u8]>) -> Result<ReqRepr<'a>> {
        let b: &'a [u8] = v.buffer;
        let v = Req::new_unchecked(b);
        Ok(ReqRepr {
            local_comm_id: v.local_comm_id(),
            ece_vendor_id: v.ece_vendor_id(),
            service_id: v.service_id(),
            local_ca_guid: v.local_ca_guid(),
            local_qkey: v.local_qkey(),
            local_qpn: v.local_qpn(),
            responder_resources: v.responder_resources(),
            local_eecn: v.local_eecn(),
            initiator_depth: v.initiator_depth(),
            remote_eecn: v.remote_eecn(),
            remote_cm_response_timeout: v.remote_cm_response_timeout(),
            transport_type: v.transport_type(),
            end_to_end_flow_control: v.end_to_end_flow_control(),
            starting_psn: v.starting_psn(),
            local_cm_response_timeout: v.local_cm_response_timeout(),
            retry_count: v.retry_count(),
            pkey: v.pkey(),
            path_mtu: v.path_mtu(),
            rdc_exists: v.rdc_exists(),
            rnr_retry_count: v.rnr_retry_count(),
            max_cm_retries: v.max_cm_retries(),
            srq: v.srq(),
            extended_transport_type: v.extended_transport_type(),
            primary_path: PathRepr::parse(&v.primary_path())?,
            alternate_path: PathRepr::parse(&v.alternate_path())?,
            sap_supported: v.sap_supported(),
            private_data: &b[req_field::PRIVATE_DATA..DATA_LEN],
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Req<T>) -> Result<()> {
        v.set_local_comm_id(self.local_comm_id);
        v.set_ece_vendor_id(self.ece_vendor_id);
        v.set_service_id(self.service_id);
        v.set_local_ca_guid(self.local_ca_guid);
        v.set_local_qkey(self.local_qkey);
        v.set_local_qpn(self.local_qpn);
        v.set_responder_resources(self.responder_resources);
        v.set_local_eecn(self.local_eecn);
        v.set_initiator_depth(self.initiator_depth);
        v.set_remote_eecn(self.remote_eecn);
        v.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        v.set_transport_type(self.transport_type);
        v.set_end_to_end_flow_control(self.end_to_end_flow_control);
        v.set_starting_psn(self.starting_psn);
        v.set_local_cm_response_timeout(self.local_cm_response_timeout);
        v.set_retry_count(self.retry_count);
        v.set_pkey(self.pkey);
        v.set_path_mtu(self.path_mtu);
        v.set_rdc_exists(self.rdc_exists);
        v.set_rnr_retry_count(self.rnr_retry_count);
        v.set_max_cm_retries(self.max_cm_retries);
        v.set_srq(self.srq);
        v.set_extended_transport_type(self.extended_transport_type);
        self.primary_path.emit(&mut v.primary_path_mut());
        self.alternate_path.emit(&mut v.alternate_path_mut());
        v.set_sap_supported(self.sap_supported);
        put_private(v.private_data_mut(), self.private_data)
    }
}

// ------------------------------------------------------------------ MRA

/// MRA offsets (table 103).
pub mod mra_field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    /// Message MRAed(2): 0 REQ, 1 REP, 2 LAP.
    pub const MESSAGE_MRAED: usize = 8;
    /// Service Timeout(5).
    pub const SERVICE_TIMEOUT: usize = 9;
    pub const PRIVATE_DATA: usize = 10;
}

message_view!(
    /// Zero-copy view of an MRA.
    Mra,
    mra_field::PRIVATE_DATA
);

accessors!(Mra {
    local_comm_id, set_local_comm_id: u32(mra_field::LOCAL_COMM_ID);
    remote_comm_id, set_remote_comm_id: u32(mra_field::REMOTE_COMM_ID);
    message_mraed, set_message_mraed: bits(mra_field::MESSAGE_MRAED, 0, 2);
    service_timeout, set_service_timeout: bits(mra_field::SERVICE_TIMEOUT, 0, 5);
});

/// Parsed MRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MraRepr<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: u8,
    pub service_timeout: u8,
    pub private_data: &'a [u8],
}

impl<'a> MraRepr<'a> {
    pub fn parse(v: &Mra<&'a [u8]>) -> Result<MraRepr<'a>> {
        let b: &'a [u8] = v.buffer;
        let v = Mra::new_unchecked(b);
        Ok(MraRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            message_mraed: v.message_mraed(),
            service_timeout: v.service_timeout(),
            private_data: &b[mra_field::PRIVATE_DATA..DATA_LEN],
        })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Mra<T>) -> Result<()> {
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_message_mraed(self.message_mraed);
        v.set_service_timeout(self.service_timeout);
        put_private(v.private_data_mut(), self.private_data)
    }
}

// ------------------------------------------------------------------ REJ

/// REJ offsets (table 104).
pub mod rej_field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    /// Message Rejected(2): 0 REQ, 1 REP, 2 other.
    pub const MESSAGE_REJECTED: usize = 8;
    /// Reject Info Length(7).
    pub const REJECT_INFO_LEN: usize = 9;
    pub const REASON: usize = 10;
    pub const ARI: usize = 12;
    pub const ARI_LEN: usize = 72;
    pub const PRIVATE_DATA: usize = 84;
}

message_view!(
    /// Zero-copy view of a REJ.
    Rej,
    rej_field::PRIVATE_DATA
);

accessors!(Rej {
    local_comm_id, set_local_comm_id: u32(rej_field::LOCAL_COMM_ID);
    remote_comm_id, set_remote_comm_id: u32(rej_field::REMOTE_COMM_ID);
    message_rejected, set_message_rejected: bits(rej_field::MESSAGE_REJECTED, 0, 2);
    reject_info_len, set_reject_info_len: bits(rej_field::REJECT_INFO_LEN, 0, 7);
    reason, set_reason: u16(rej_field::REASON);
});

impl<T: AsRef<[u8]>> Rej<T> {
    /// Additional Rejection Information (72 bytes).
    pub fn ari(&self) -> &[u8] {
        &self.buffer.as_ref()[rej_field::ARI..rej_field::ARI + rej_field::ARI_LEN]
    }
}

/// Parsed REJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RejRepr<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: u8,
    pub reject_info_len: u8,
    pub reason: u16,
    /// The ARI's first `reject_info_len` bytes when parsed (at most 72).
    pub ari: &'a [u8],
    pub private_data: &'a [u8],
}

impl<'a> RejRepr<'a> {
    pub fn parse(v: &Rej<&'a [u8]>) -> Result<RejRepr<'a>> {
        let b: &'a [u8] = v.buffer;
        let v = Rej::new_unchecked(b);
        let n = usize::from(v.reject_info_len()).min(rej_field::ARI_LEN);
        Ok(RejRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            message_rejected: v.message_rejected(),
            reject_info_len: v.reject_info_len(),
            reason: v.reason(),
            ari: &b[rej_field::ARI..rej_field::ARI + n],
            private_data: &b[rej_field::PRIVATE_DATA..DATA_LEN],
        })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Rej<T>) -> Result<()> {
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_message_rejected(self.message_rejected);
        v.set_reject_info_len(self.reject_info_len);
        v.set_reason(self.reason);
        let b = v.buffer.as_mut();
        put_private(&mut b[rej_field::ARI..rej_field::ARI + rej_field::ARI_LEN], self.ari)?;
        put_private(v.private_data_mut(), self.private_data)
    }
}

// ------------------------------------------------------------------ REP

/// REP offsets (table 107).
pub mod rep_field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const LOCAL_QKEY: usize = 8;
    pub const LOCAL_QPN: usize = 12;
    pub const ECE_VENDOR_HI: usize = 15;
    pub const LOCAL_EECN: usize = 16;
    pub const ECE_VENDOR_MID: usize = 19;
    pub const STARTING_PSN: usize = 20;
    pub const ECE_VENDOR_LO: usize = 23;
    pub const RESPONDER_RESOURCES: usize = 24;
    pub const INITIATOR_DEPTH: usize = 25;
    /// Target ACK Delay(5) / Failover Accepted(2) / End-to-End Flow Control(1).
    pub const BYTE_26: usize = 26;
    /// RNR Retry Count(3) / SRQ(1) / reserved(4).
    pub const BYTE_27: usize = 27;
    pub const LOCAL_CA_GUID: usize = 28;
    pub const PRIVATE_DATA: usize = 36;
}

message_view!(
    /// Zero-copy view of a REP.
    Rep,
    rep_field::PRIVATE_DATA
);

accessors!(Rep {
    local_comm_id, set_local_comm_id: u32(rep_field::LOCAL_COMM_ID);
    remote_comm_id, set_remote_comm_id: u32(rep_field::REMOTE_COMM_ID);
    local_qkey, set_local_qkey: u32(rep_field::LOCAL_QKEY);
    local_qpn, set_local_qpn: u24(rep_field::LOCAL_QPN);
    local_eecn, set_local_eecn: u24(rep_field::LOCAL_EECN);
    starting_psn, set_starting_psn: u24(rep_field::STARTING_PSN);
    responder_resources, set_responder_resources: u8(rep_field::RESPONDER_RESOURCES);
    initiator_depth, set_initiator_depth: u8(rep_field::INITIATOR_DEPTH);
    /// Inflates the active side's QP timeout (Linux `cm_ack_timeout`).
    target_ack_delay, set_target_ack_delay: bits(rep_field::BYTE_26, 0, 5);
    failover_accepted, set_failover_accepted: bits(rep_field::BYTE_26, 5, 2);
    end_to_end_flow_control, set_end_to_end_flow_control: flag(rep_field::BYTE_26, 7);
    rnr_retry_count, set_rnr_retry_count: bits(rep_field::BYTE_27, 0, 3);
    srq, set_srq: flag(rep_field::BYTE_27, 3);
    local_ca_guid, set_local_ca_guid: u64(rep_field::LOCAL_CA_GUID);
});

impl<T: AsRef<[u8]>> Rep<T> {
    /// The 24-bit ECE vendor ID spread over bytes 15, 19 and 23.
    pub fn ece_vendor_id(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from(b[rep_field::ECE_VENDOR_HI]) << 16
            | u32::from(b[rep_field::ECE_VENDOR_MID]) << 8
            | u32::from(b[rep_field::ECE_VENDOR_LO])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Rep<T> {
    pub fn set_ece_vendor_id(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        b[rep_field::ECE_VENDOR_HI] = (v >> 16) as u8;
        b[rep_field::ECE_VENDOR_MID] = (v >> 8) as u8;
        b[rep_field::ECE_VENDOR_LO] = v as u8;
    }
}

/// Parsed REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RepRepr<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    pub local_qpn: u32,
    pub ece_vendor_id: u32,
    pub local_eecn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: &'a [u8],
}

impl<'a> RepRepr<'a> {
    pub fn parse(v: &Rep<&'a [u8]>) -> Result<RepRepr<'a>> {
        let b: &'a [u8] = v.buffer;
        let v = Rep::new_unchecked(b);
        Ok(RepRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            local_qkey: v.local_qkey(),
            local_qpn: v.local_qpn(),
            ece_vendor_id: v.ece_vendor_id(),
            local_eecn: v.local_eecn(),
            starting_psn: v.starting_psn(),
            responder_resources: v.responder_resources(),
            initiator_depth: v.initiator_depth(),
            target_ack_delay: v.target_ack_delay(),
            failover_accepted: v.failover_accepted(),
            end_to_end_flow_control: v.end_to_end_flow_control(),
            rnr_retry_count: v.rnr_retry_count(),
            srq: v.srq(),
            local_ca_guid: v.local_ca_guid(),
            private_data: &b[rep_field::PRIVATE_DATA..DATA_LEN],
        })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Rep<T>) -> Result<()> {
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_local_qkey(self.local_qkey);
        v.set_local_qpn(self.local_qpn);
        v.set_local_eecn(self.local_eecn);
        v.set_starting_psn(self.starting_psn);
        v.set_ece_vendor_id(self.ece_vendor_id);
        v.set_responder_resources(self.responder_resources);
        v.set_initiator_depth(self.initiator_depth);
        v.set_target_ack_delay(self.target_ack_delay);
        v.set_failover_accepted(self.failover_accepted);
        v.set_end_to_end_flow_control(self.end_to_end_flow_control);
        v.buffer.as_mut()[rep_field::BYTE_27] = 0;
        v.set_rnr_retry_count(self.rnr_retry_count);
        v.set_srq(self.srq);
        v.set_local_ca_guid(self.local_ca_guid);
        put_private(v.private_data_mut(), self.private_data)
    }
}

// --------------------------------------------- RTU, DREP: IDs + private data

/// RTU and DREP offsets (tables 108, 111).
pub mod ids_field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const PRIVATE_DATA: usize = 8;
}

message_view!(
    /// Zero-copy view of an RTU.
    Rtu,
    ids_field::PRIVATE_DATA
);
message_view!(
    /// Zero-copy view of a DREP.
    Drep,
    ids_field::PRIVATE_DATA
);

accessors!(Rtu {
    local_comm_id, set_local_comm_id: u32(ids_field::LOCAL_COMM_ID);
    remote_comm_id, set_remote_comm_id: u32(ids_field::REMOTE_COMM_ID);
});
accessors!(Drep {
    local_comm_id, set_local_comm_id: u32(ids_field::LOCAL_COMM_ID);
    remote_comm_id, set_remote_comm_id: u32(ids_field::REMOTE_COMM_ID);
});

/// Parsed RTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtuRepr<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: &'a [u8],
}

/// Parsed DREP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrepRepr<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: &'a [u8],
}

macro_rules! ids_repr {
    ($repr:ident, $view:ident) => {
        impl<'a> $repr<'a> {
            pub fn parse(v: &$view<&'a [u8]>) -> Result<$repr<'a>> {
                let b: &'a [u8] = v.buffer;
                let v = $view::new_unchecked(b);
                Ok($repr {
                    local_comm_id: v.local_comm_id(),
                    remote_comm_id: v.remote_comm_id(),
                    private_data: &b[ids_field::PRIVATE_DATA..DATA_LEN],
                })
            }
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut $view<T>) -> Result<()> {
                v.set_local_comm_id(self.local_comm_id);
                v.set_remote_comm_id(self.remote_comm_id);
                put_private(v.private_data_mut(), self.private_data)
            }
        }
    };
}
ids_repr!(RtuRepr, Rtu);
ids_repr!(DrepRepr, Drep);

// ------------------------------------------------------------------ DREQ

/// DREQ offsets (table 110).
pub mod dreq_field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const REMOTE_QPN: usize = 8;
    pub const PRIVATE_DATA: usize = 12;
}

message_view!(
    /// Zero-copy view of a DREQ.
    Dreq,
    dreq_field::PRIVATE_DATA
);

accessors!(Dreq {
    local_comm_id, set_local_comm_id: u32(dreq_field::LOCAL_COMM_ID);
    remote_comm_id, set_remote_comm_id: u32(dreq_field::REMOTE_COMM_ID);
    remote_qpn, set_remote_qpn: u24(dreq_field::REMOTE_QPN);
});

/// Parsed DREQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DreqRepr<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub remote_qpn: u32,
    pub private_data: &'a [u8],
}

impl<'a> DreqRepr<'a> {
    pub fn parse(v: &Dreq<&'a [u8]>) -> Result<DreqRepr<'a>> {
        let b: &'a [u8] = v.buffer;
        let v = Dreq::new_unchecked(b);
        Ok(DreqRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            remote_qpn: v.remote_qpn(),
            private_data: &b[dreq_field::PRIVATE_DATA..DATA_LEN],
        })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Dreq<T>) -> Result<()> {
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_remote_qpn(self.remote_qpn);
        put_private(v.private_data_mut(), self.private_data)
    }
}

// ------------------------------------------------------------------ SIDR

/// SIDR_REQ offsets (table 115).
pub mod sidr_req_field {
    pub const REQUEST_ID: usize = 0;
    pub const PKEY: usize = 4;
    pub const SERVICE_ID: usize = 8;
    pub const PRIVATE_DATA: usize = 16;
}

message_view!(
    /// Zero-copy view of a SIDR_REQ.
    SidrReq,
    sidr_req_field::PRIVATE_DATA
);

accessors!(SidrReq {
    request_id, set_request_id: u32(sidr_req_field::REQUEST_ID);
    pkey, set_pkey: u16(sidr_req_field::PKEY);
    service_id, set_service_id: u64(sidr_req_field::SERVICE_ID);
});

/// Parsed SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SidrReqRepr<'a> {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    pub private_data: &'a [u8],
}

impl<'a> SidrReqRepr<'a> {
    pub fn parse(v: &SidrReq<&'a [u8]>) -> Result<SidrReqRepr<'a>> {
        let b: &'a [u8] = v.buffer;
        let v = SidrReq::new_unchecked(b);
        Ok(SidrReqRepr {
            request_id: v.request_id(),
            pkey: v.pkey(),
            service_id: v.service_id(),
            private_data: &b[sidr_req_field::PRIVATE_DATA..DATA_LEN],
        })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut SidrReq<T>) -> Result<()> {
        v.set_request_id(self.request_id);
        v.set_pkey(self.pkey);
        v.set_service_id(self.service_id);
        put_private(v.private_data_mut(), self.private_data)
    }
}

/// SIDR_REP offsets (table 116).
pub mod sidr_rep_field {
    pub const REQUEST_ID: usize = 0;
    /// 0 OK, 1 service ID not supported, 2 rejected, 3 no QP, 4 redirect, 5 unsupported version.
    pub const STATUS: usize = 4;
    pub const ADD_INFO_LEN: usize = 5;
    pub const QPN: usize = 8;
    pub const SERVICE_ID: usize = 12;
    pub const QKEY: usize = 20;
    pub const ADD_INFO: usize = 24;
    pub const ADD_INFO_MAX: usize = 72;
    pub const PRIVATE_DATA: usize = 96;
}

message_view!(
    /// Zero-copy view of a SIDR_REP.
    SidrRep,
    sidr_rep_field::PRIVATE_DATA
);

accessors!(SidrRep {
    request_id, set_request_id: u32(sidr_rep_field::REQUEST_ID);
    status, set_status: u8(sidr_rep_field::STATUS);
    add_info_len, set_add_info_len: u8(sidr_rep_field::ADD_INFO_LEN);
    qpn, set_qpn: u24(sidr_rep_field::QPN);
    service_id, set_service_id: u64(sidr_rep_field::SERVICE_ID);
    qkey, set_qkey: u32(sidr_rep_field::QKEY);
});

/// Parsed SIDR_REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SidrRepRepr<'a> {
    pub request_id: u32,
    pub status: u8,
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    /// Additional information (the first `add_info_len` bytes, ≤ 72).
    pub add_info: &'a [u8],
    pub private_data: &'a [u8],
}

impl<'a> SidrRepRepr<'a> {
    pub fn parse(v: &SidrRep<&'a [u8]>) -> Result<SidrRepRepr<'a>> {
        let b: &'a [u8] = v.buffer;
        let v = SidrRep::new_unchecked(b);
        let n = usize::from(v.add_info_len()).min(sidr_rep_field::ADD_INFO_MAX);
        Ok(SidrRepRepr {
            request_id: v.request_id(),
            status: v.status(),
            qpn: v.qpn(),
            service_id: v.service_id(),
            qkey: v.qkey(),
            add_info: &b[sidr_rep_field::ADD_INFO..sidr_rep_field::ADD_INFO + n],
            private_data: &b[sidr_rep_field::PRIVATE_DATA..DATA_LEN],
        })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut SidrRep<T>) -> Result<()> {
        v.set_request_id(self.request_id);
        v.set_status(self.status);
        let n = self.add_info.len().min(sidr_rep_field::ADD_INFO_MAX);
        v.set_add_info_len(n as u8);
        v.set_qpn(self.qpn);
        v.set_service_id(self.service_id);
        v.set_qkey(self.qkey);
        let b = v.buffer.as_mut();
        let at = sidr_rep_field::ADD_INFO;
        put_private(&mut b[at..at + sidr_rep_field::ADD_INFO_MAX], self.add_info)?;
        put_private(v.private_data_mut(), self.private_data)
    }
}

/// Private-data capacity of each message, by name (for docs and checks).
pub const PRIVATE_LENS: [(&str, usize); 9] = [
    ("REQ", private_len::REQ),
    ("MRA", private_len::MRA),
    ("REJ", private_len::REJ),
    ("REP", private_len::REP),
    ("RTU", private_len::RTU),
    ("DREQ", private_len::DREQ),
    ("DREP", private_len::DREP),
    ("SIDR_REQ", private_len::SIDR_REQ),
    ("SIDR_REP", private_len::SIDR_REP),
];
