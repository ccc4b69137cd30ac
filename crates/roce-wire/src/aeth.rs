//! ACK Extended Transport Header (IBTA vol. 1 §9.3.5, 4 bytes): syndrome (8)
//! and MSN (24).
//!
//! Syndrome (Table 42): bit 7 reserved (0); bits 6:5 = 00 ACK (bits 4:0 credit
//! count, 31 = invalid/unlimited), 01 RNR NAK (bits 4:0 minimum RNR NAK timer
//! code, Table 45), 10 reserved, 11 NAK (bits 4:0 NAK code, Table 43: 0 PSN
//! sequence error, 1 invalid request, 2 remote access error, 3 remote
//! operational error, 4 invalid RD request; the rest reserved).

use crate::error::{Header, Result, WireError};
use crate::field::*;
use crate::view::header_view;

pub const HEADER_LEN: usize = 4;

/// Credit count value meaning "no credits reported" (IBTA §9.7.7.2.4).
pub const CREDITS_INVALID: u8 = 31;

mod field {
    pub const SYNDROME: usize = 0;
    pub const MSN: usize = 1;
}

header_view!(
    /// Zero-copy view of an AETH.
    Aeth,
    HEADER_LEN,
    Header::Aeth
);

impl<T: AsRef<[u8]>> Aeth<T> {
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }
    pub fn msn(&self) -> u32 {
        get_u24(self.buffer.as_ref(), field::MSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[field::SYNDROME] = v;
    }
    pub fn set_msn(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), field::MSN, v);
    }
}

/// NAK codes (IBTA Table 43).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

impl NakCode {
    #[inline]
    pub fn from_u8(v: u8) -> Option<NakCode> {
        Some(match v {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "PSN_SEQ_ERR",
            NakCode::InvalidRequest => "INV_REQ",
            NakCode::RemoteAccessError => "REM_ACCESS_ERR",
            NakCode::RemoteOperationalError => "REM_OP_ERR",
            NakCode::InvalidRdRequest => "INV_RD_REQ",
        }
    }
}

/// The decoded syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a 5-bit credit count.
    Ack {
        credits: u8,
    },
    /// Receiver not ready; `timer` is the 5-bit RNR NAK timer code.
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
}

impl Syndrome {
    /// Decodes a syndrome byte; reserved encodings are errors.
    #[inline]
    pub fn from_u8(s: u8) -> Result<Syndrome> {
        let low = s & 0x1f;
        match s >> 5 {
            0 => Ok(Syndrome::Ack { credits: low }),
            1 => Ok(Syndrome::RnrNak { timer: low }),
            3 => NakCode::from_u8(low)
                .map(Syndrome::Nak)
                .ok_or(WireError::AethSyndrome { syndrome: s, why: "reserved NAK code" }),
            _ => Err(WireError::AethSyndrome { syndrome: s, why: "reserved syndrome encoding" }),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c as u8,
        }
    }

    pub fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

impl core::fmt::Display for Syndrome {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Syndrome::Ack { credits } => write!(f, "ACK(credits={credits})"),
            Syndrome::RnrNak { timer } => write!(f, "RNR_NAK(timer={timer})"),
            Syndrome::Nak(c) => write!(f, "NAK({})", c.name()),
        }
    }
}

/// Parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Aeth<T>) -> Result<AethRepr> {
        Ok(AethRepr { syndrome: Syndrome::from_u8(h.syndrome())?, msn: h.msn() })
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Aeth<T>) {
        h.set_syndrome(self.syndrome.to_u8());
        h.set_msn(self.msn & 0x00ff_ffff);
    }
}
