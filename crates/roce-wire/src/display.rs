//! Transport packets as one line of text, the way `roce pcap decode` prints
//! them:
//!
//! ```text
//! RC_RDMA_WRITE_FIRST qpn=0x000011 psn=123 A=0 RETH(va=0x1000 rkey=0x00000042 len=4096) payload=1024
//! RC_ACKNOWLEDGE qpn=0x000012 psn=77 A=0 AETH(ACK(credits=31) msn=3)
//! ```
//!
//! The BTH ([`BthRepr`]): opcode name, destination QP, PSN, AckReq, then SE,
//! M, a P_Key other than the default, FECN and BECN where set. Then each
//! extension header in wire order ([`ExtHeaders`]), then the payload length
//! for opcodes that carry one. Frame-level fields (addresses, ECN, VLAN, the
//! ICRC verdict) are the caller's: [`RocePacketRepr::display_after_bth`]
//! lets it put its own right after the BTH.

use core::fmt;

use crate::bth::{BthRepr, DEFAULT_PKEY};
use crate::opcode;
use crate::packet::{ExtHeaders, RocePacketRepr};

impl fmt::Display for BthRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match opcode::lookup(self.opcode) {
            Some(info) => f.write_str(info.name)?,
            None => write!(f, "UNKNOWN_0x{:02x}", self.opcode)?,
        }
        write!(f, " qpn=0x{:06x} psn={} A={}", self.dest_qp, self.psn, u8::from(self.ack_req))?;
        if self.solicited {
            f.write_str(" SE")?;
        }
        if self.mig_req {
            f.write_str(" M")?;
        }
        if self.pkey != DEFAULT_PKEY {
            write!(f, " pkey=0x{:04x}", self.pkey)?;
        }
        if self.fecn {
            f.write_str(" FECN")?;
        }
        if self.becn {
            f.write_str(" BECN")?;
        }
        Ok(())
    }
}

/// The extension headers present, in wire order, separated by spaces
/// (nothing when there are none).
impl fmt::Display for ExtHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let s = if first { "" } else { " " };
            first = false;
            f.write_str(s)
        };
        if let Some(d) = self.deth {
            sep(f)?;
            write!(f, "DETH(qkey=0x{:08x} srcqp=0x{:06x})", d.qkey, d.src_qp)?;
        }
        if let Some(x) = self.feth {
            sep(f)?;
            write!(f, "FETH(sel={} placement={})", x.selectivity, x.placement)?;
        }
        if let Some(r) = self.reth {
            sep(f)?;
            write!(f, "RETH(va=0x{:x} rkey=0x{:08x} len={})", r.va, r.rkey, r.dma_len)?;
        }
        if let Some(a) = self.atomic_eth {
            sep(f)?;
            write!(
                f,
                "AtomicETH(va=0x{:x} rkey=0x{:08x} swap_add=0x{:x} cmp=0x{:x})",
                a.va, a.rkey, a.swap_add, a.compare
            )?;
        }
        if let Some(a) = self.aeth {
            sep(f)?;
            write!(f, "AETH({} msn={})", a.syndrome, a.msn)?;
        }
        if let Some(orig) = self.atomic_ack {
            sep(f)?;
            write!(f, "AtomicAckETH(orig=0x{orig:x})")?;
        }
        if let Some(imm) = self.imm {
            sep(f)?;
            write!(f, "ImmDt(0x{imm:08x})")?;
        }
        if let Some(rkey) = self.ieth {
            sep(f)?;
            write!(f, "IETH(rkey=0x{rkey:08x})")?;
        }
        Ok(())
    }
}

/// The BTH, the extension headers and the payload length.
impl fmt::Display for RocePacketRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.bth, self.display_after_bth())
    }
}

impl RocePacketRepr<'_> {
    /// What `Display` prints after the BTH fields: each extension header
    /// and `payload=N`, each preceded by a space (nothing for a bare ACK).
    /// For callers that print fields of their own between the BTH and the
    /// rest, as `roce pcap decode` does with ECN and VLAN.
    pub fn display_after_bth(&self) -> impl fmt::Display + '_ {
        AfterBth(self)
    }
}

struct AfterBth<'r, 'a>(&'r RocePacketRepr<'a>);

impl fmt::Display for AfterBth<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        if p.ext != ExtHeaders::default() {
            write!(f, " {}", p.ext)?;
        }
        // Opcodes without payload (ACK, READ request, atomics, CNP) show none.
        if opcode::lookup(p.bth.opcode).is_none_or(|i| i.payload) {
            write!(f, " payload={}", p.payload.len())?;
        }
        // A UD SEND to QP 1 (the GSI) carrying a CM MAD: the message and
        // its fields (comm IDs, QPNs, PSNs, service ID, the RDMA CM IP
        // header of a REQ).
        if p.bth.dest_qp == crate::mad::GSI_QPN && p.bth.opcode == 0x64 {
            match crate::cm::CmMadRepr::parse(p.payload) {
                Ok(m) => write!(f, " {m}")?,
                Err(e) => write!(f, " MAD({e})")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::aeth::{AethRepr, NakCode, Syndrome};
    use crate::{AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, FethRepr, Psn, RethRepr, RocePacketRepr};

    fn bth(opcode: u8) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: true,
            psn: Psn::new(123),
        }
    }

    fn text(bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> String {
        RocePacketRepr { bth, ext, payload }.to_string()
    }

    #[test]
    fn bth_fields_and_flags() {
        assert_eq!(bth(0x04).to_string(), "RC_SEND_ONLY qpn=0x000011 psn=123 A=1");
        let all = BthRepr {
            solicited: true,
            mig_req: true,
            pkey: 0x8001,
            fecn: true,
            becn: true,
            ack_req: false,
            dest_qp: 0xabcdef,
            psn: Psn::new(0xffffff),
            ..bth(0x04)
        };
        assert_eq!(all.to_string(), "RC_SEND_ONLY qpn=0xabcdef psn=16777215 A=0 SE M pkey=0x8001 FECN BECN");
        assert_eq!(bth(0x1f).to_string(), "UNKNOWN_0x1f qpn=0x000011 psn=123 A=1");
    }

    #[test]
    fn packets_as_roce_pcap_decode_prints_them() {
        let reth = RethRepr { va: 0x1000, rkey: 0x42, dma_len: 4096 };
        let ext = ExtHeaders { reth: Some(reth), ..ExtHeaders::default() };
        assert_eq!(
            text(BthRepr { ack_req: false, ..bth(0x06) }, ext, &[0; 1024]),
            "RC_RDMA_WRITE_FIRST qpn=0x000011 psn=123 A=0 RETH(va=0x1000 rkey=0x00000042 len=4096) payload=1024"
        );
        let ack = ExtHeaders {
            aeth: Some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 3 }),
            ..ExtHeaders::default()
        };
        assert_eq!(
            text(BthRepr { ack_req: false, psn: Psn::new(77), dest_qp: 0x12, ..bth(0x11) }, ack, &[]),
            "RC_ACKNOWLEDGE qpn=0x000012 psn=77 A=0 AETH(ACK(credits=31) msn=3)"
        );
        let nak = ExtHeaders {
            aeth: Some(AethRepr { syndrome: Syndrome::Nak(NakCode::PsnSequenceError), msn: 9 }),
            ..ExtHeaders::default()
        };
        assert_eq!(
            text(bth(0x11), nak, &[]),
            "RC_ACKNOWLEDGE qpn=0x000011 psn=123 A=1 AETH(NAK(PSN_SEQ_ERR) msn=9)"
        );
        // A payload of zero bytes is shown where the opcode carries one.
        assert_eq!(
            text(bth(0x04), ExtHeaders::default(), &[]),
            "RC_SEND_ONLY qpn=0x000011 psn=123 A=1 payload=0"
        );
        let ud = ExtHeaders {
            deth: Some(DethRepr { qkey: 0x1111_0001, src_qp: 0x42 }),
            imm: Some(0xdead_beef),
            ..ExtHeaders::default()
        };
        assert_eq!(
            text(bth(0x65), ud, &[1, 2, 3]),
            "UD_SEND_ONLY_WITH_IMMEDIATE qpn=0x000011 psn=123 A=1 DETH(qkey=0x11110001 srcqp=0x000042) \
             ImmDt(0xdeadbeef) payload=3"
        );
    }

    /// Every extension header, in wire order (no opcode has them all; the
    /// text does not check the layout).
    #[test]
    fn every_extension_header_in_wire_order() {
        let ext = ExtHeaders {
            deth: Some(DethRepr { qkey: 1, src_qp: 2 }),
            feth: Some(FethRepr { selectivity: 0, placement: 1 }),
            reth: Some(RethRepr { va: 0x1000, rkey: 0x42, dma_len: 4096 }),
            atomic_eth: Some(AtomicEthRepr { va: 0x2000, rkey: 7, swap_add: 0x10, compare: 0x20 }),
            aeth: Some(AethRepr { syndrome: Syndrome::RnrNak { timer: 12 }, msn: 5 }),
            atomic_ack: Some(0x0123_4567_89ab_cdef),
            imm: Some(3),
            ieth: Some(0x1234),
        };
        assert_eq!(
            ext.to_string(),
            "DETH(qkey=0x00000001 srcqp=0x000002) FETH(sel=0 placement=1) \
             RETH(va=0x1000 rkey=0x00000042 len=4096) \
             AtomicETH(va=0x2000 rkey=0x00000007 swap_add=0x10 cmp=0x20) AETH(RNR_NAK(timer=12) msn=5) \
             AtomicAckETH(orig=0x123456789abcdef) ImmDt(0x00000003) IETH(rkey=0x00001234)"
        );
        assert_eq!(ExtHeaders::default().to_string(), "");
    }

    #[test]
    fn after_bth_is_the_rest_of_the_line() {
        let ext = ExtHeaders { imm: Some(5), ..ExtHeaders::default() };
        let p = RocePacketRepr { bth: bth(0x05), ext, payload: &[0; 8] };
        assert_eq!(p.display_after_bth().to_string(), " ImmDt(0x00000005) payload=8");
        assert_eq!(p.to_string(), format!("{}{}", p.bth, p.display_after_bth()));
    }
}
