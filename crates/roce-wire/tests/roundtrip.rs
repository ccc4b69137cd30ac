//! Property tests: for every header `Repr` and for whole frames of every
//! opcode (over IPv4, IPv6 and the RoCEv1 GRH, with and without 802.1Q),
//! emit-then-parse gives the same repr, and emit(parse(bytes)) == bytes.
//! Where random bytes can be a valid header, any bytes that parse re-emit
//! unchanged. Mutated frames never make the parser panic.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use roce_wire::aeth::Aeth;
use roce_wire::atomic::AtomicEth;
use roce_wire::bth::Bth;
use roce_wire::deth::Deth;
use roce_wire::ethernet::{ethertype, EthernetFrame};
use roce_wire::ipv4::Ipv4Packet;
use roce_wire::ipv6::Ipv6Packet;
use roce_wire::opcode::{self, OpcodeInfo};
use roce_wire::reth::Reth;
use roce_wire::udp::UdpPacket;
use roce_wire::{
    AethRepr, AtomicEthRepr, BthRepr, DethRepr, EthernetRepr, ExtHeaders, FethRepr, GrhRepr, HeaderSet,
    Ipv4Repr, Ipv6Repr, NakCode, NetRepr, Operation, ParseOptions, Position, Psn, RethRepr, RoceFrameRepr,
    RocePacketRepr, Syndrome, UdpRepr, VlanTag,
};

// ------------------------------------------------------------ header generators

fn psn() -> impl Strategy<Value = Psn> {
    (0u32..1 << 24).prop_map(Psn::new)
}

fn qpn() -> impl Strategy<Value = u32> {
    0u32..1 << 24
}

/// A valid P_Key: the low 15 bits are not all zero (IBTA §10.9.1.2).
fn pkey() -> impl Strategy<Value = u16> {
    (any::<bool>(), 1u16..0x8000).prop_map(|(full, k)| (u16::from(full) << 15) | k)
}

fn bth(opcode: u8) -> impl Strategy<Value = BthRepr> {
    (any::<[bool; 5]>(), pkey(), qpn(), psn()).prop_map(
        move |([solicited, mig_req, fecn, becn, ack_req], pkey, dest_qp, psn)| BthRepr {
            opcode,
            solicited,
            mig_req,
            pkey,
            fecn,
            becn,
            dest_qp,
            ack_req,
            psn,
        },
    )
}

fn reth() -> impl Strategy<Value = RethRepr> {
    any::<(u64, u32, u32)>().prop_map(|(va, rkey, dma_len)| RethRepr { va, rkey, dma_len })
}

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        (0u8..5).prop_map(|c| Syndrome::Nak(NakCode::from_u8(c).unwrap())),
    ]
}

fn aeth_with(s: impl Strategy<Value = Syndrome>) -> impl Strategy<Value = AethRepr> {
    (s, 0u32..1 << 24).prop_map(|(syndrome, msn)| AethRepr { syndrome, msn })
}

fn aeth() -> impl Strategy<Value = AethRepr> {
    aeth_with(syndrome())
}

fn atomic_eth() -> impl Strategy<Value = AtomicEthRepr> {
    any::<(u64, u32, u64, u64)>().prop_map(|(va, rkey, swap_add, compare)| AtomicEthRepr {
        va,
        rkey,
        swap_add,
        compare,
    })
}

fn deth() -> impl Strategy<Value = DethRepr> {
    (any::<u32>(), qpn()).prop_map(|(qkey, src_qp)| DethRepr { qkey, src_qp })
}

fn feth() -> impl Strategy<Value = FethRepr> {
    (0u8..4, 0u8..16).prop_map(|(selectivity, placement)| FethRepr { selectivity, placement })
}

fn vlan() -> impl Strategy<Value = VlanTag> {
    (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid })
}

fn ethernet(ethertype: impl Strategy<Value = u16>) -> impl Strategy<Value = EthernetRepr> {
    (any::<[u8; 6]>(), any::<[u8; 6]>(), proptest::option::of(vlan()), ethertype)
        .prop_map(|(dst, src, vlan, ethertype)| EthernetRepr { dst, src, vlan, ethertype })
}

fn ipv4() -> impl Strategy<Value = Ipv4Repr> {
    any::<(u32, u32, u8, u16, bool, u8)>().prop_map(|(src, dst, tos, ident, dont_frag, ttl)| Ipv4Repr {
        src: Ipv4Addr::from(src),
        dst: Ipv4Addr::from(dst),
        tos,
        ident,
        dont_frag,
        ttl,
    })
}

fn ipv6() -> impl Strategy<Value = Ipv6Repr> {
    (any::<(u128, u128, u8, u8)>(), 0u32..1 << 20).prop_map(
        |((src, dst, traffic_class, hop_limit), flow_label)| Ipv6Repr {
            src: Ipv6Addr::from(src),
            dst: Ipv6Addr::from(dst),
            traffic_class,
            flow_label,
            hop_limit,
        },
    )
}

fn grh() -> impl Strategy<Value = GrhRepr> {
    (any::<([u8; 16], [u8; 16], u8, u8)>(), 0u32..1 << 20).prop_map(
        |((sgid, dgid, traffic_class, hop_limit), flow_label)| GrhRepr {
            traffic_class,
            flow_label,
            hop_limit,
            sgid,
            dgid,
        },
    )
}

fn udp(checksum: impl Strategy<Value = bool>) -> impl Strategy<Value = UdpRepr> {
    (any::<(u16, u16)>(), checksum).prop_map(|((src_port, dst_port), checksum)| UdpRepr {
        src_port,
        dst_port,
        checksum,
    })
}

// ------------------------------------------------------------ whole packets

/// A packet of one opcode, valid under the responder rules at `pmtu`.
#[derive(Debug, Clone)]
struct Spec {
    info: &'static OpcodeInfo,
    pmtu: usize,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: Vec<u8>,
}

impl Spec {
    fn packet(&self) -> RocePacketRepr<'_> {
        RocePacketRepr { bth: self.bth, ext: self.ext, payload: &self.payload }
    }
}

/// Payload length allowed for `info` at `pmtu` (IBTA §9.4.3 C9-78..C9-81).
fn payload_len(info: &OpcodeInfo, pmtu: usize) -> BoxedStrategy<usize> {
    if !info.payload {
        Just(0).boxed()
    } else if info.operation == Operation::AtomicWrite {
        Just(8).boxed()
    } else {
        match info.position {
            Position::First | Position::Middle => Just(pmtu).boxed(),
            Position::Last => (1..=pmtu).boxed(),
            Position::Only => (0..=pmtu).boxed(),
        }
    }
}

/// Random extension headers for `info`, fixed up to the rules the opcode and
/// payload impose: WRITE Only DMA length = payload, WRITE First DMA length >
/// PMTU, aligned atomic VA, ACK syndrome except on ACKNOWLEDGE.
fn ext_for(info: &'static OpcodeInfo, pmtu: usize, len: usize) -> impl Strategy<Value = ExtHeaders> {
    let ack_syndrome = (0u8..32).prop_map(|credits| Syndrome::Ack { credits });
    (
        deth(),
        feth(),
        reth(),
        (pmtu as u32 + 1)..=u32::MAX,
        atomic_eth(),
        aeth(),
        aeth_with(ack_syndrome),
        any::<(u64, u32, u32)>(),
    )
        .prop_map(
            move |(deth, feth, mut reth, first_len, mut atomic, aeth, aeth_ack, (orig, imm, ieth))| {
                let h = info.headers;
                match (info.operation, info.position) {
                    (Operation::RdmaWrite, Position::Only) => reth.dma_len = len as u32,
                    (Operation::RdmaWrite, Position::First) => reth.dma_len = first_len,
                    _ => {}
                }
                atomic.va &= !7;
                ExtHeaders {
                    deth: h.contains(HeaderSet::DETH).then_some(deth),
                    feth: h.contains(HeaderSet::FETH).then_some(feth),
                    reth: h.contains(HeaderSet::RETH).then_some(reth),
                    atomic_eth: h.contains(HeaderSet::ATOMIC_ETH).then_some(atomic),
                    aeth: h
                        .contains(HeaderSet::AETH)
                        .then_some(if info.operation == Operation::Acknowledge { aeth } else { aeth_ack }),
                    atomic_ack: h.contains(HeaderSet::ATOMIC_ACK_ETH).then_some(orig),
                    imm: h.contains(HeaderSet::IMM_DT).then_some(imm),
                    ieth: h.contains(HeaderSet::IETH).then_some(ieth),
                }
            },
        )
}

fn spec() -> impl Strategy<Value = Spec> {
    let infos: Vec<&'static OpcodeInfo> = opcode::all().collect();
    (select(infos), select(vec![256usize, 512, 1024, 4096]))
        .prop_flat_map(|(info, pmtu)| (Just(info), Just(pmtu), payload_len(info, pmtu)))
        .prop_flat_map(|(info, pmtu, len)| {
            (Just(info), Just(pmtu), bth(info.code), ext_for(info, pmtu, len), vec(any::<u8>(), len))
        })
        .prop_map(|(info, pmtu, bth, ext, payload)| Spec { info, pmtu, bth, ext, payload })
}

fn net() -> impl Strategy<Value = NetRepr> {
    prop_oneof![
        (ipv4(), udp(any::<bool>())).prop_map(|(ip, u)| NetRepr::Ipv4(ip, u)),
        (ipv6(), udp(any::<bool>())).prop_map(|(ip, u)| NetRepr::Ipv6(ip, u)),
        grh().prop_map(NetRepr::Grh),
    ]
}

fn net_ethertype(net: &NetRepr) -> u16 {
    match net {
        NetRepr::Ipv4(..) => ethertype::IPV4,
        NetRepr::Ipv6(..) => ethertype::IPV6,
        NetRepr::Grh(_) => ethertype::ROCE_V1,
    }
}

/// Options that accept `frame`: its UDP port, its PMTU, every check on.
fn opts_for(net: &NetRepr, pmtu: usize) -> ParseOptions {
    ParseOptions {
        port: net.udp().map_or(roce_wire::ROCE_PORT, |u| u.dst_port),
        pmtu: Some(pmtu),
        ..ParseOptions::default()
    }
}

// ------------------------------------------------------------ properties

proptest! {
    #[test]
    fn bth_round_trips(repr in any::<u8>().prop_flat_map(bth), pad in 0u8..4) {
        let mut buf = [0u8; 12];
        repr.emit(&mut Bth::new_unchecked(&mut buf[..]), pad);
        let parsed = BthRepr::parse(&Bth::new_checked(&buf[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed, repr);
        let mut again = [0u8; 12];
        parsed.emit(&mut Bth::new_unchecked(&mut again[..]), pad);
        prop_assert_eq!(again, buf);
    }

    #[test]
    fn any_bth_that_parses_re_emits_unchanged(bytes in any::<[u8; 12]>()) {
        let view = Bth::new_checked(&bytes[..]).unwrap();
        if let Ok(repr) = BthRepr::parse(&view) {
            let mut again = [0u8; 12];
            repr.emit(&mut Bth::new_unchecked(&mut again[..]), view.pad_count());
            prop_assert_eq!(again, bytes);
        } else {
            // rejected only for TVer, reserved bits or an invalid P_Key
            prop_assert!(view.tver() != 0 || view.resv6() != 0 || view.resv7() != 0
                || view.pkey() & 0x7fff == 0);
        }
    }

    #[test]
    fn reth_round_trips(repr in reth(), bytes in any::<[u8; 16]>()) {
        let mut buf = [0u8; 16];
        repr.emit(&mut Reth::new_unchecked(&mut buf[..]));
        prop_assert_eq!(RethRepr::parse(&Reth::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        // every 16 bytes are a RETH
        let p = RethRepr::parse(&Reth::new_checked(&bytes[..]).unwrap()).unwrap();
        let mut again = [0u8; 16];
        p.emit(&mut Reth::new_unchecked(&mut again[..]));
        prop_assert_eq!(again, bytes);
    }

    #[test]
    fn aeth_round_trips(repr in aeth(), bytes in any::<[u8; 4]>()) {
        let mut buf = [0u8; 4];
        repr.emit(&mut Aeth::new_unchecked(&mut buf[..]));
        prop_assert_eq!(AethRepr::parse(&Aeth::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        prop_assert_eq!(Syndrome::from_u8(repr.syndrome.to_u8()).unwrap(), repr.syndrome);
        match AethRepr::parse(&Aeth::new_checked(&bytes[..]).unwrap()) {
            Ok(p) => {
                let mut again = [0u8; 4];
                p.emit(&mut Aeth::new_unchecked(&mut again[..]));
                prop_assert_eq!(again, bytes);
            }
            // reserved: bit 7, class 10, or NAK code > 4 (IBTA Tables 42, 43)
            Err(e) => {
                let s = bytes[0];
                prop_assert_eq!(e.kind(), "aeth_syndrome");
                prop_assert!(s & 0x80 != 0 || s >> 5 == 2 || (s >> 5 == 3 && s & 0x1f > 4));
            }
        }
    }

    #[test]
    fn atomic_eth_round_trips(repr in atomic_eth(), bytes in any::<[u8; 28]>()) {
        let mut buf = [0u8; 28];
        repr.emit(&mut AtomicEth::new_unchecked(&mut buf[..]));
        prop_assert_eq!(
            AtomicEthRepr::parse(&AtomicEth::new_checked(&buf[..]).unwrap()).unwrap(),
            repr
        );
        let p = AtomicEthRepr::parse(&AtomicEth::new_checked(&bytes[..]).unwrap()).unwrap();
        let mut again = [0u8; 28];
        p.emit(&mut AtomicEth::new_unchecked(&mut again[..]));
        prop_assert_eq!(again, bytes);
    }

    #[test]
    fn deth_round_trips(repr in deth(), bytes in any::<[u8; 8]>()) {
        let mut buf = [0xffu8; 8];
        repr.emit(&mut Deth::new_unchecked(&mut buf[..]));
        prop_assert_eq!(buf[4], 0, "reserved byte");
        prop_assert_eq!(DethRepr::parse(&Deth::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        match DethRepr::parse(&Deth::new_checked(&bytes[..]).unwrap()) {
            Ok(p) => {
                let mut again = [0u8; 8];
                p.emit(&mut Deth::new_unchecked(&mut again[..]));
                prop_assert_eq!(again, bytes);
            }
            Err(e) => {
                prop_assert_eq!(e.kind(), "reserved_nonzero");
                prop_assert!(bytes[4] != 0);
            }
        }
    }

    #[test]
    fn feth_round_trips(repr in feth(), bytes in any::<[u8; 4]>()) {
        let mut buf = [0xffu8; 4];
        repr.emit(&mut buf);
        prop_assert_eq!(FethRepr::parse(&buf).unwrap(), repr);
        match FethRepr::parse(&bytes) {
            Ok(p) => {
                let mut again = [0u8; 4];
                p.emit(&mut again);
                prop_assert_eq!(again, bytes);
            }
            Err(_) => prop_assert!(u32::from_be_bytes(bytes) >> 6 != 0),
        }
        prop_assert!(FethRepr::parse(&bytes[..3]).is_err());
    }

    #[test]
    fn ethernet_round_trips(
        repr in ethernet(any::<u16>().prop_filter("outer 802.1Q TPID", |&t| t != ethertype::VLAN)),
    ) {
        let mut buf = [0u8; 18];
        repr.emit(&mut buf);
        let n = repr.header_len();
        prop_assert_eq!(n, if repr.vlan.is_some() { 18 } else { 14 });
        let view = EthernetFrame::new_checked(&buf[..n]).unwrap();
        prop_assert_eq!(view.header_len(), n);
        let parsed = EthernetRepr::parse(&view).unwrap();
        prop_assert_eq!(parsed, repr);
        let mut again = [0u8; 18];
        parsed.emit(&mut again);
        prop_assert_eq!(&again[..n], &buf[..n]);
        // a tag cut short is an error, not a panic
        if repr.vlan.is_some() {
            prop_assert!(EthernetFrame::new_checked(&buf[..17]).is_err());
        }
    }

    #[test]
    fn ipv4_round_trips(repr in ipv4(), payload_len in 0usize..9000) {
        let mut buf = [0u8; 20];
        repr.emit(&mut buf, payload_len);
        let view = Ipv4Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(view.verify_checksum());
        let (parsed, total) = Ipv4Repr::parse(&view).unwrap();
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(total, 20 + payload_len);
        let mut again = [0u8; 20];
        parsed.emit(&mut again, total - 20);
        prop_assert_eq!(again, buf);
    }

    #[test]
    fn ipv6_round_trips(repr in ipv6(), payload_len in 0usize..9000) {
        let mut buf = [0u8; 40];
        repr.emit(&mut buf, payload_len);
        let (parsed, total) = Ipv6Repr::parse(&Ipv6Packet::new_checked(&buf[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(total, 40 + payload_len);
        let mut again = [0u8; 40];
        parsed.emit(&mut again, total - 40);
        prop_assert_eq!(again, buf);
    }

    #[test]
    fn grh_round_trips(repr in grh(), payload_len in 0usize..9000) {
        let mut buf = [0u8; 40];
        repr.emit(&mut buf, payload_len);
        let (parsed, total) = GrhRepr::parse(&Ipv6Packet::new_checked(&buf[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(total, 40 + payload_len);
        let mut again = [0u8; 40];
        parsed.emit(&mut again, total - 40);
        prop_assert_eq!(again, buf);
    }

    #[test]
    fn udp_round_trips(repr in udp(Just(false)), payload_len in 0usize..9000) {
        // the header alone carries no checksum; frames fill it (below)
        let mut buf = [0xffu8; 8];
        repr.emit(&mut buf, payload_len);
        let view = UdpPacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(usize::from(view.len()), 8 + payload_len);
        let parsed = UdpRepr::parse(&view).unwrap();
        prop_assert_eq!(parsed, repr);
        let mut again = [0u8; 8];
        parsed.emit(&mut again, payload_len);
        prop_assert_eq!(again, buf);
    }

    #[test]
    fn transport_packets_round_trip(spec in spec()) {
        let p = spec.packet();
        let n = p.buffer_len().unwrap();
        let mut buf = vec![0u8; n];
        prop_assert_eq!(p.emit(&mut buf).unwrap(), n);
        prop_assert_eq!(n % 4, 0);
        let parsed = RocePacketRepr::parse(&buf).unwrap();
        prop_assert_eq!(parsed, p);
        parsed.check(Some(spec.pmtu)).unwrap();
        let mut again = vec![0u8; n];
        parsed.emit(&mut again).unwrap();
        prop_assert_eq!(again, buf);
        // too small a buffer is an error
        prop_assert!(p.emit(&mut vec![0u8; n - 1]).is_err());
    }

    #[test]
    fn frames_of_every_opcode_round_trip(
        spec in spec(),
        net in net(),
        eth in ethernet(Just(0)),
        padding in 0usize..8,
    ) {
        let repr = RoceFrameRepr {
            eth: EthernetRepr { ethertype: net_ethertype(&net), ..eth },
            net,
            packet: spec.packet(),
            padding,
        };
        let bytes = repr.to_vec().unwrap();
        prop_assert_eq!(bytes.len(), repr.buffer_len().unwrap());
        let parsed = RoceFrameRepr::parse(&bytes, &opts_for(&net, spec.pmtu))
            .map_err(|e| TestCaseError::fail(format!("{}: {e} [{}]", spec.info.name, e.kind())))?;
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(parsed.to_vec().unwrap(), bytes);
    }

    #[test]
    fn mutated_frames_never_panic(
        spec in spec(),
        net in net(),
        eth in ethernet(Just(0)),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let repr = RoceFrameRepr {
            eth: EthernetRepr { ethertype: net_ethertype(&net), ..eth },
            net,
            packet: spec.packet(),
            padding: 0,
        };
        let mut bytes = repr.to_vec().unwrap();
        for (at, x) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        let bytes = &bytes[..cut.index(bytes.len() + 1)];
        // whatever passes every check (ICRC included) re-emits to the same
        // bytes, unless a non-zero trailer was dropped
        if let Ok(p) = RoceFrameRepr::parse(bytes, &opts_for(&net, spec.pmtu)) {
            let again = p.to_vec().unwrap();
            if p.padding > 0 || again.len() == bytes.len() {
                prop_assert_eq!(&again[..], bytes);
            }
        }
        let lenient = ParseOptions {
            verify_icrc: false,
            check_rules: false,
            ..opts_for(&net, spec.pmtu)
        };
        if let Ok(p) = RoceFrameRepr::parse(bytes, &lenient) {
            prop_assert!(p.to_vec().is_ok());
        }
        let _ = roce_wire::frame::locate(bytes, opts_for(&net, spec.pmtu).port);
        let _ = RocePacketRepr::parse(bytes);
    }
}
