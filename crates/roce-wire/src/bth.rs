//! Base Transport Header (IBTA vol. 1 §9.2, 12 bytes).
//!
//! ```text
//!  0       OpCode
//!  1       SE(1) M(1) PadCnt(2) TVer(4)
//!  2..4    P_Key
//!  4       FECN(1) BECN(1) resv6 (the RoCEv2 "resv8a" byte, masked in the ICRC)
//!  5..8    DestQP (24)
//!  8       AckReq(1) resv7
//!  9..12   PSN (24)
//! ```

use crate::error::{Header, Result, WireError};
use crate::field::*;
use crate::psn::Psn;
use crate::view::header_view;

pub const HEADER_LEN: usize = 12;

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

/// The default partition key (full membership, IBTA §10.9.1.1).
pub const DEFAULT_PKEY: u16 = 0xffff;

header_view!(
    /// Zero-copy view of a BTH.
    Bth,
    HEADER_LEN,
    Header::Bth
);

impl<T: AsRef<[u8]>> Bth<T> {
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0x3
    }
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0xf
    }
    pub fn pkey(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PKEY)
    }
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & 0x40 != 0
    }
    pub fn resv6(&self) -> u8 {
        self.buffer.as_ref()[field::FECN_BECN] & 0x3f
    }
    pub fn dest_qp(&self) -> u32 {
        get_u24(self.buffer.as_ref(), field::DEST_QP)
    }
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }
    pub fn resv7(&self) -> u8 {
        self.buffer.as_ref()[field::ACK_REQ] & 0x7f
    }
    pub fn psn(&self) -> Psn {
        Psn::new(get_u24(self.buffer.as_ref(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    pub fn set_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[field::OPCODE] = v;
    }
    /// Sets SE, M, PadCnt and TVer (= 0) at once.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad: u8) {
        self.buffer.as_mut()[field::FLAGS] =
            (u8::from(solicited) << 7) | (u8::from(mig_req) << 6) | ((pad & 3) << 4);
    }
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::PKEY, v);
    }
    pub fn set_fecn_becn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::FECN_BECN] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    pub fn set_dest_qp(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), field::DEST_QP, v);
    }
    pub fn set_ack_req(&mut self, v: bool) {
        self.buffer.as_mut()[field::ACK_REQ] = u8::from(v) << 7;
    }
    pub fn set_psn(&mut self, v: Psn) {
        set_u24(self.buffer.as_mut(), field::PSN, v.value());
    }
}

/// Parsed BTH. TVer is always 0 and the reserved bits always zero (a BTH
/// with other values is rejected, IBTA §9.6.1.1 C9-32). The pad count is not
/// stored: it follows from the payload length when the packet is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    pub opcode: u8,
    pub solicited: bool,
    pub mig_req: bool,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: Psn,
}

impl BthRepr {
    /// The checks of `parse` (TVer 0, reserved bits 0, valid P_Key) without
    /// building the repr.
    #[inline]
    pub(crate) fn validate<T: AsRef<[u8]>>(b: &Bth<T>) -> Result<()> {
        if b.tver() != 0 {
            return Err(WireError::BthTver(b.tver()));
        }
        if b.resv6() != 0 {
            return Err(WireError::ReservedNonZero("BTH resv6"));
        }
        if b.resv7() != 0 {
            return Err(WireError::ReservedNonZero("BTH resv7"));
        }
        if b.pkey() & 0x7fff == 0 {
            return Err(WireError::PkeyInvalid(b.pkey()));
        }
        Ok(())
    }

    /// Parses a BTH, rejecting TVer != 0, non-zero reserved bits and invalid
    /// P_Keys (the low 15 bits all zero, IBTA §10.9.1.2).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(b: &Bth<T>) -> Result<BthRepr> {
        Self::validate(b)?;
        Ok(BthRepr {
            opcode: b.opcode(),
            solicited: b.solicited(),
            mig_req: b.mig_req(),
            pkey: b.pkey(),
            fecn: b.fecn(),
            becn: b.becn(),
            dest_qp: b.dest_qp(),
            ack_req: b.ack_req(),
            psn: b.psn(),
        })
    }

    /// Writes every field; `pad` is the pad count of the packet being emitted.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, b: &mut Bth<T>, pad: u8) {
        b.set_opcode(self.opcode);
        b.set_flags(self.solicited, self.mig_req, pad);
        b.set_pkey(self.pkey);
        b.set_fecn_becn(self.fecn, self.becn);
        b.set_dest_qp(self.dest_qp & 0x00ff_ffff);
        b.set_ack_req(self.ack_req);
        b.set_psn(self.psn);
    }
}
