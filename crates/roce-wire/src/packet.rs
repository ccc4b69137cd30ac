//! The transport packet: BTH + extension headers + payload + pad + ICRC, as
//! carried in the UDP payload of RoCEv2 (or after the GRH of RoCEv1).
//!
//! `RocePacket` is a checked zero-copy view: `new_checked` enforces every rule
//! that follows from the bytes alone (IBTA vol. 1 §9.2 BTH, §9.3 header
//! layouts by opcode, §9.2.4 pad count). `RocePacketRepr` is the parsed form;
//! `check` adds the rules that need context a responder has (path MTU, RETH
//! DMA length vs payload, atomic alignment: §9.7.5.1, §9.4.3, §9.4.5).

use crate::aeth::{Aeth, AethRepr};
use crate::atomic::{AtomicAckEth, AtomicEth, AtomicEthRepr};
use crate::bth::{Bth, BthRepr};
use crate::deth::{Deth, DethRepr};
use crate::error::{Result, WireError};
use crate::ext::{FethRepr, Word};
use crate::icrc::ICRC_LEN;
use crate::opcode::{self, HeaderSet, OpcodeInfo, Operation, Position};
use crate::reth::{Reth, RethRepr};
use crate::{aeth, atomic, bth, deth, ext, reth, Psn};

/// Smallest transport packet: BTH + ICRC.
pub const MIN_LEN: usize = bth::HEADER_LEN + ICRC_LEN;

/// Pad count for a payload of `len` bytes: payload + pad is a multiple of 4
/// (IBTA §9.2.4).
#[inline]
pub const fn pad_for(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// A checked view of a transport packet (BTH through ICRC).
#[derive(Debug, Clone, Copy)]
pub struct RocePacket<T: AsRef<[u8]>> {
    buffer: T,
    info: &'static OpcodeInfo,
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    /// Validates the structure of the packet: BTH present and well-formed
    /// (TVer 0, reserved bits 0, valid P_Key), opcode defined, every extension
    /// header of the opcode present, payload only where the opcode allows one,
    /// pad count consistent with the payload (§9.2.4: payload + pad is a
    /// multiple of 4; First and Middle packets carry no pad).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        let n = b.len();
        if n < MIN_LEN {
            return Err(WireError::TruncatedBth { have: n });
        }
        let bth = Bth::new_unchecked(b);
        BthRepr::validate(&bth)?;
        let info = opcode::lookup(bth.opcode()).ok_or(WireError::OpcodeUnknown(bth.opcode()))?;
        let need = info.header_len() + ICRC_LEN;
        if n < need {
            return Err(WireError::TruncatedHeaders { opcode_name: info.name, need, have: n });
        }
        let data_len = n - need;
        let pad = bth.pad_count();
        if !info.payload {
            if data_len != 0 {
                return Err(WireError::UnexpectedPayload { opcode_name: info.name, len: data_len });
            }
            if pad != 0 {
                return Err(WireError::PadInvalid { pad, opcode_name: info.name });
            }
        } else {
            if data_len % 4 != 0 {
                return Err(WireError::PadAlignment { len: data_len });
            }
            if usize::from(pad) > data_len
                || (pad != 0 && matches!(info.position, Position::First | Position::Middle))
            {
                return Err(WireError::PadInvalid { pad, opcode_name: info.name });
            }
        }
        Ok(RocePacket { buffer, info })
    }

    pub fn opcode_info(&self) -> &'static OpcodeInfo {
        self.info
    }

    #[inline]
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.buffer.as_ref()[..bth::HEADER_LEN])
    }

    /// Offset of the payload: BTH + extension headers.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.info.header_len()
    }

    /// The bytes of extension header `which`, if the opcode has it.
    pub fn ext_header(&self, which: HeaderSet) -> Option<&[u8]> {
        let mut off = bth::HEADER_LEN;
        for (h, _, len) in self.info.headers.iter() {
            if h == which {
                return Some(&self.buffer.as_ref()[off..off + len]);
            }
            off += len;
        }
        None
    }

    /// The payload, without pad and ICRC.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN - usize::from(self.bth().pad_count());
        &b[self.header_len()..end]
    }

    /// The pad bytes.
    pub fn pad(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN;
        &b[end - usize::from(self.bth().pad_count())..end]
    }

    /// The ICRC as sent (least significant byte first).
    pub fn icrc(&self) -> u32 {
        crate::icrc::read(self.buffer.as_ref()).unwrap_or(0)
    }
}

/// Extension headers of a packet; exactly those of the opcode are `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders {
    pub deth: Option<DethRepr>,
    pub feth: Option<FethRepr>,
    pub reth: Option<RethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH: the original remote data.
    pub atomic_ack: Option<u64>,
    /// ImmDt, in host order (sent big-endian).
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    /// The set of headers present.
    pub fn set(&self) -> HeaderSet {
        let mut s = HeaderSet::EMPTY;
        let mut add = |present: bool, h: HeaderSet| {
            if present {
                s = s.union(h);
            }
        };
        add(self.deth.is_some(), HeaderSet::DETH);
        add(self.feth.is_some(), HeaderSet::FETH);
        add(self.reth.is_some(), HeaderSet::RETH);
        add(self.atomic_eth.is_some(), HeaderSet::ATOMIC_ETH);
        add(self.aeth.is_some(), HeaderSet::AETH);
        add(self.atomic_ack.is_some(), HeaderSet::ATOMIC_ACK_ETH);
        add(self.imm.is_some(), HeaderSet::IMM_DT);
        add(self.ieth.is_some(), HeaderSet::IETH);
        s
    }
}

/// A parsed transport packet. The pad count and ICRC are derived on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RocePacketRepr<'a> {
    pub bth: BthRepr,
    pub ext: ExtHeaders,
    pub payload: &'a [u8],
}

impl<'a> RocePacketRepr<'a> {
    /// Parses a transport packet (BTH through ICRC; the ICRC itself is checked
    /// by the caller, who has the network header it covers).
    pub fn parse(bytes: &'a [u8]) -> Result<RocePacketRepr<'a>> {
        let p = RocePacket::new_checked(bytes)?;
        Self::parse_view(&p)
    }

    /// Parses from an already checked view.
    #[inline]
    pub fn parse_view(p: &RocePacket<&'a [u8]>) -> Result<RocePacketRepr<'a>> {
        let bytes: &'a [u8] = p.buffer;
        let bth = BthRepr::parse(&p.bth())?;
        // The extension headers in wire order (HeaderSet::ORDER), each where
        // the opcode has it; `new_checked` made sure they are all there.
        let set = p.info.headers;
        let mut off = bth::HEADER_LEN;
        let mut next = |h: HeaderSet, len: usize| -> Option<&'a [u8]> {
            set.contains(h).then(|| {
                off += len;
                &bytes[off - len..off]
            })
        };
        let deth = next(HeaderSet::DETH, deth::HEADER_LEN);
        let feth = next(HeaderSet::FETH, ext::FETH_LEN);
        let reth = next(HeaderSet::RETH, reth::HEADER_LEN);
        let atomic_eth = next(HeaderSet::ATOMIC_ETH, atomic::ATOMIC_ETH_LEN);
        let aeth = next(HeaderSet::AETH, aeth::HEADER_LEN);
        let atomic_ack = next(HeaderSet::ATOMIC_ACK_ETH, atomic::ATOMIC_ACK_ETH_LEN);
        let imm = next(HeaderSet::IMM_DT, ext::IMM_DT_LEN);
        let ieth = next(HeaderSet::IETH, ext::IETH_LEN);
        // CNP: 16 reserved bytes (Annex A17.9.3)
        if next(HeaderSet::CNP, ext::CNP_PAD_LEN).is_some_and(|b| b.iter().any(|&x| x != 0)) {
            return Err(WireError::ReservedNonZero("CNP reserved bytes"));
        }
        debug_assert_eq!(off, p.header_len());
        let ext = ExtHeaders {
            deth: deth.map(|b| DethRepr::parse(&Deth::new_unchecked(b))).transpose()?,
            feth: feth.map(FethRepr::parse).transpose()?,
            reth: reth.map(|b| RethRepr::parse(&Reth::new_unchecked(b))).transpose()?,
            atomic_eth: atomic_eth.map(|b| AtomicEthRepr::parse(&AtomicEth::new_unchecked(b))).transpose()?,
            aeth: aeth.map(|b| AethRepr::parse(&Aeth::new_unchecked(b))).transpose()?,
            atomic_ack: atomic_ack.map(|b| AtomicAckEth::new_unchecked(b).orig()),
            imm: imm.map(|b| Word::new_unchecked(b).value()),
            ieth: ieth.map(|b| Word::new_unchecked(b).value()),
        };
        let end = bytes.len() - ICRC_LEN - usize::from(p.bth().pad_count());
        Ok(RocePacketRepr { bth, ext, payload: &bytes[off..end] })
    }

    /// The opcode's row in the table, or an error for an unknown opcode.
    #[inline]
    pub fn info(&self) -> Result<&'static OpcodeInfo> {
        opcode::lookup(self.bth.opcode).ok_or(WireError::OpcodeUnknown(self.bth.opcode))
    }

    pub fn psn(&self) -> Psn {
        self.bth.psn
    }

    /// Checks the rules a responder applies given the path MTU (if known):
    /// First/Middle packets carry exactly one PMTU of payload and Last/Only at
    /// most one, Last at least one byte (§9.4.3 C9-78..C9-81); a WRITE Only's
    /// payload equals the RETH DMA length, a WRITE First's DMA length exceeds
    /// one PMTU (§9.4.3); ATOMIC WRITE carries 8 bytes; atomics target an
    /// 8-byte-aligned address (§9.4.5 C9-40); READ responses and atomic ACKs
    /// carry an ACK syndrome (§9.3.5).
    #[inline]
    pub fn check(&self, pmtu: Option<usize>) -> Result<()> {
        let info = self.info()?;
        let plen = self.payload.len();
        if info.payload {
            if info.operation == Operation::AtomicWrite && plen != 8 {
                return Err(WireError::PayloadLen { len: plen, why: "ATOMIC WRITE carries 8 bytes" });
            }
            if info.position == Position::Last && plen == 0 {
                return Err(WireError::PayloadLen { len: plen, why: "Last packet with no payload" });
            }
            if let Some(mtu) = pmtu {
                match info.position {
                    Position::First | Position::Middle if plen != mtu => {
                        return Err(WireError::PayloadLen {
                            len: plen,
                            why: "First/Middle payload must equal the path MTU",
                        })
                    }
                    Position::Last | Position::Only if plen > mtu => {
                        return Err(WireError::PayloadLen { len: plen, why: "payload exceeds the path MTU" })
                    }
                    _ => {}
                }
            }
        }
        if let Some(reth) = self.ext.reth {
            let write = info.operation == Operation::RdmaWrite;
            let bad = match info.position {
                Position::Only if write => reth.dma_len as usize != plen,
                Position::First => pmtu.is_some_and(|m| reth.dma_len as usize <= m),
                _ => false,
            };
            if bad {
                return Err(WireError::RethDmaLen {
                    dma_len: reth.dma_len,
                    payload: plen,
                    opcode_name: info.name,
                });
            }
        }
        if let Some(a) = self.ext.atomic_eth {
            if a.va % 8 != 0 {
                return Err(WireError::AtomicVaAlign(a.va));
            }
        }
        if let Some(aeth) = self.ext.aeth {
            if info.operation != Operation::Acknowledge && !aeth.syndrome.is_ack() {
                return Err(WireError::AethSyndrome {
                    syndrome: aeth.syndrome.to_u8(),
                    why: "READ responses and atomic ACKs carry an ACK syndrome",
                });
            }
        }
        Ok(())
    }

    /// Bytes of BTH and extension headers.
    #[inline]
    pub fn header_len(&self) -> Result<usize> {
        Ok(self.info()?.header_len())
    }

    /// Total length on the wire, BTH through ICRC.
    pub fn buffer_len(&self) -> Result<usize> {
        let n = self.payload.len();
        Ok(self.header_len()? + n + pad_for(n) + ICRC_LEN)
    }

    /// Writes BTH, extension headers, payload and zero pad into `buf`, and
    /// zeroes the ICRC field (it covers the network header, so the caller
    /// fills it: see `frame` or `icrc::fill`). Fails if the extension headers
    /// do not match the opcode's layout or `buf` is too small. Returns the
    /// number of bytes written, ICRC included.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len()?;
        if buf.len() < total {
            return Err(WireError::BufferTooSmall { need: total, have: buf.len() });
        }
        let off = self.emit_header(buf, self.payload.len())?;
        let end = off + self.payload.len();
        buf[off..end].copy_from_slice(self.payload);
        buf[end..total].fill(0);
        Ok(total)
    }

    /// Writes BTH and extension headers for a packet that will carry
    /// `payload_len` bytes (which `self.payload` need not hold: a sender can
    /// gather the payload straight into `buf[header_len..]` afterwards), with
    /// the pad count set accordingly. Returns the header length; the payload,
    /// pad (zero) and ICRC follow it, `buffer_len` bytes in all.
    pub fn emit_header(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        let info = self.info()?;
        let want = info.headers;
        let have = self.ext.set();
        for (h, name, _) in HeaderSet::ORDER {
            if h == HeaderSet::CNP {
                continue;
            }
            match (want.contains(h), have.contains(h)) {
                (true, false) => return Err(WireError::MissingHeader(name)),
                (false, true) => return Err(WireError::ExtraHeader(name)),
                _ => {}
            }
        }
        if !info.payload && payload_len != 0 {
            return Err(WireError::UnexpectedPayload { opcode_name: info.name, len: payload_len });
        }
        let pad = pad_for(payload_len);
        let total = bth::HEADER_LEN + want.len_bytes() + payload_len + pad + ICRC_LEN;
        if buf.len() < total {
            return Err(WireError::BufferTooSmall { need: total, have: buf.len() });
        }
        self.bth.emit(&mut Bth::new_unchecked(&mut buf[..bth::HEADER_LEN]), pad as u8);
        let mut off = bth::HEADER_LEN;
        for (h, _, len) in want.iter() {
            let b = &mut buf[off..off + len];
            match h {
                HeaderSet::DETH => self.ext.deth.unwrap().emit(&mut Deth::new_unchecked(b)),
                HeaderSet::FETH => self.ext.feth.unwrap().emit(b),
                HeaderSet::RETH => self.ext.reth.unwrap().emit(&mut Reth::new_unchecked(b)),
                HeaderSet::ATOMIC_ETH => self.ext.atomic_eth.unwrap().emit(&mut AtomicEth::new_unchecked(b)),
                HeaderSet::AETH => self.ext.aeth.unwrap().emit(&mut Aeth::new_unchecked(b)),
                HeaderSet::ATOMIC_ACK_ETH => {
                    AtomicAckEth::new_unchecked(b).set_orig(self.ext.atomic_ack.unwrap())
                }
                HeaderSet::IMM_DT => Word::new_unchecked(b).set_value(self.ext.imm.unwrap()),
                HeaderSet::IETH => Word::new_unchecked(b).set_value(self.ext.ieth.unwrap()),
                _ => b.fill(0),
            }
            off += len;
        }
        let end = off + payload_len;
        buf[end..total - ICRC_LEN].fill(0);
        buf[total - ICRC_LEN..total].fill(0);
        Ok(off)
    }
}
