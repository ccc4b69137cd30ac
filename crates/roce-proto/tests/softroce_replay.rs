//! Replays the requests Linux Soft-RoCE sent in `testdata/softroce/*.pcap`
//! into this engine's responder and compares its responses with the ones the
//! kernel's responder sent: same opcodes, PSNs, AETH syndromes and MSNs,
//! atomic original values and payload bytes.
//!
//! The captures fix what the engine would otherwise choose: QPNs and R_Keys
//! are rewritten in the replayed requests (their ICRC recomputed over the
//! captured IP header, Identification included), the responder's memory is
//! preset to what the captured READ responses and atomic ACKs reveal of it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use roce_proto::testkit::{Pair, B};
use roce_proto::*;
use roce_wire::frame::NetRepr;
use roce_wire::pcap::PcapReader;
use roce_wire::{Operation, ParseOptions, Psn, RoceFrameRepr};

struct Frame {
    bytes: Vec<u8>,
}

impl Frame {
    fn repr(&self) -> RoceFrameRepr<'_> {
        RoceFrameRepr::parse(&self.bytes, &ParseOptions::default()).unwrap()
    }
}

fn endpoints(net: &NetRepr) -> (IpAddr, IpAddr) {
    match net {
        NetRepr::Ipv4(ip, _) => (ip.src.into(), ip.dst.into()),
        NetRepr::Ipv6(ip, _) => (ip.src.into(), ip.dst.into()),
        NetRepr::Grh(_) => unreachable!("RoCEv2 captures"),
    }
}

fn load(path: &Path) -> Vec<Frame> {
    PcapReader::open(path)
        .unwrap()
        .map(|r| r.unwrap().data)
        .filter(|d| RoceFrameRepr::parse(d, &ParseOptions::default()).is_ok())
        .map(|bytes| Frame { bytes })
        .collect()
}

/// What a response looks like, for comparison.
#[derive(Debug, PartialEq, Eq)]
struct Resp {
    opcode: u8,
    psn: Psn,
    dest_qp: u32,
    aeth: Option<(u8, u32)>,
    orig: Option<u64>,
    payload: Vec<u8>,
}

fn resp_of(p: &roce_wire::RocePacketRepr<'_>) -> Resp {
    Resp {
        opcode: p.bth.opcode,
        psn: p.bth.psn,
        dest_qp: p.bth.dest_qp,
        aeth: p.ext.aeth.map(|a| (a.syndrome.to_u8(), a.msn)),
        orig: p.ext.atomic_ack,
        payload: p.payload.to_vec(),
    }
}

/// Replays the requests from `req_ip` to `resp_ip`; returns the number of
/// responses compared.
fn replay(frames: &[Frame], req_ip: IpAddr, resp_ip: IpAddr) -> usize {
    let dir = |f: &Frame| endpoints(&f.repr().net);
    let requests: Vec<&Frame> = frames
        .iter()
        .filter(|f| dir(f) == (req_ip, resp_ip) && f.repr().packet.info().unwrap().request)
        .collect();
    let captured: Vec<Resp> = frames
        .iter()
        .filter(|f| dir(f) == (resp_ip, req_ip) && !f.repr().packet.info().unwrap().request)
        .map(|f| resp_of(&f.repr().packet))
        .collect();
    assert!(!requests.is_empty() && !captured.is_empty());
    let requester_qpn = captured[0].dest_qp;
    let first_psn = requests[0].repr().packet.bth.psn;

    // Memory the requests name, per R_Key: [lowest VA, highest VA + length).
    let mut ranges: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for f in &requests {
        let r = f.repr();
        let (rkey, va, len) = match (r.packet.ext.reth, r.packet.ext.atomic_eth) {
            (Some(x), _) => (x.rkey, x.va, u64::from(x.dma_len)),
            (_, Some(a)) => (a.rkey, a.va, 8),
            _ => continue,
        };
        let e = ranges.entry(rkey).or_insert((va, va + len));
        e.0 = e.0.min(va);
        e.1 = e.1.max(va + len);
    }

    // Engine B plays the captured responder; A stands where the Soft-RoCE
    // requester was (the requests come from the capture, not from A).
    let mut p =
        Pair::with_configs([EngineConfig::new(vec![req_ip]), EngineConfig::new(vec![resp_ip])], [2, 1]);
    let pd = p.pd[B];
    let eng = &mut p.e[B];
    let mut mrs: BTreeMap<u32, MrKeys> = BTreeMap::new();
    for (&rkey, &(lo, hi)) in &ranges {
        let keys = eng
            .reg_mr(
                pd,
                MrSpec {
                    buf: MemBuf::new((hi - lo) as usize),
                    offset: 0,
                    length: (hi - lo) as usize,
                    iova: Some(lo),
                    access: Access::ALL,
                },
            )
            .unwrap();
        mrs.insert(rkey, keys);
    }
    // Preset memory: READ responses reveal the bytes, atomic ACKs the words.
    let by_psn: BTreeMap<u32, &Resp> = captured.iter().map(|r| (r.psn.value(), r)).collect();
    for f in &requests {
        let r = f.repr();
        let p = &r.packet;
        match p.info().unwrap().operation {
            Operation::RdmaReadRequest => {
                let reth = p.ext.reth.unwrap();
                let keys = &mrs[&reth.rkey];
                let mut data = Vec::new();
                let mut psn = p.bth.psn;
                while (data.len() as u32) < reth.dma_len {
                    data.extend_from_slice(&by_psn[&psn.value()].payload);
                    psn = psn.next();
                }
                eng.mr_write(keys.lkey, (reth.va - keys.addr) as usize, &data).unwrap();
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let a = p.ext.atomic_eth.unwrap();
                let keys = &mrs[&a.rkey];
                let orig = by_psn[&p.bth.psn.value()].orig.unwrap();
                eng.mr_write(keys.lkey, (a.va - keys.addr) as usize, &orig.to_ne_bytes()).unwrap();
            }
            _ => {}
        }
    }

    let mut init = p.qp_init(B, QpType::Rc);
    init.cap.max_recv_wr = 1024;
    let eng = &mut p.e[B];
    let qpn = eng.create_qp(init).unwrap();
    // rxe's RC defaults (MTU 1024, 16 READs/atomics, RNR timer 12), as
    // ConnectAttr::new has them; the QP expects the captured first PSN.
    eng.connect_qp(qpn, &ConnectAttr::new(AddressVector::new(req_ip), requester_qpn, first_psn, Psn::ZERO))
        .unwrap();
    // Receive buffers for SENDs and WRITEs with immediate.
    let rbuf = MemBuf::new(1 << 20);
    let rkeys = eng
        .reg_mr(
            pd,
            MrSpec {
                buf: rbuf.clone(),
                offset: 0,
                length: 1 << 20,
                iova: Some(0x1_0000_0000),
                access: Access::LOCAL_WRITE,
            },
        )
        .unwrap();
    for i in 0..16u64 {
        let sge = Sge { addr: rkeys.addr + i * 65536, length: 65536, lkey: rkeys.lkey };
        eng.post_recv(qpn, RecvWr { wr_id: i, sg_list: vec![sge] }).unwrap();
    }

    // Feed each request, collect what the responder sends before the next.
    let mut ours = Vec::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let now = p.now;
    for f in &requests {
        let mut r = f.repr();
        r.packet.bth.dest_qp = qpn;
        if let Some(reth) = &mut r.packet.ext.reth {
            if let Some(k) = mrs.get(&reth.rkey) {
                reth.rkey = k.rkey;
            }
        }
        if let Some(at) = &mut r.packet.ext.atomic_eth {
            at.rkey = mrs[&at.rkey].rkey;
        }
        let frame = r.to_vec().unwrap();
        let (meta, udp_payload) = match r.net {
            NetRepr::Ipv4(ip, udp) => {
                let meta = meta_of(&ip, &udp, Some(ip.ident));
                let start = r.eth.header_len() + 28;
                (meta, frame[start..frame.len() - r.padding].to_vec())
            }
            _ => unreachable!(),
        };
        p.deliver(B, &meta, &udp_payload);
        while let Some(tx) = p.e[B].poll_transmit(now, &mut buf) {
            assert_eq!(tx.meta.dst, req_ip);
            let p = roce_wire::RocePacketRepr::parse(&buf[..tx.len]).unwrap();
            ours.push(resp_of(&p));
        }
    }
    let c = p.e[B].counters();
    assert_eq!((c.icrc_errors, c.malformed_dropped, c.duplicate_request), (0, 0, 0), "{c:?}");
    assert_eq!(ours.len(), captured.len(), "number of responses");
    for (i, (o, k)) in ours.iter().zip(&captured).enumerate() {
        assert_eq!(o, k, "response {i}");
    }
    ours.len()
}

#[test]
fn responses_match_soft_roce() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/softroce");
    let mut total = 0;
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        let frames = load(&path);
        let ips: std::collections::BTreeSet<(IpAddr, IpAddr)> = frames
            .iter()
            .filter(|f| f.repr().packet.info().unwrap().request)
            .map(|f| endpoints(&f.repr().net))
            .collect();
        for (req, resp) in ips {
            let n = replay(&frames, req, resp);
            eprintln!(
                "{}: {req} -> {resp}: {n} responses identical",
                path.file_name().unwrap().to_string_lossy()
            );
            total += n;
        }
        files += 1;
    }
    assert_eq!(files, 10);
    assert!(total > 0);
}

/// A UDP socket does not show the IPv4 Identification, so the engine
/// checks the ICRC of such packets for the one ID that makes it right. On
/// every packet Soft-RoCE sent in the captures (IDs that rxe counts up), the
/// ID it finds is the one in the captured header; one flipped payload bit
/// and the packet is refused.
#[test]
fn ipv4_ids_inferred_from_soft_roce_packets() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/softroce");
    let mut eng = Engine::new(EngineConfig::new(vec!["10.0.0.9".parse().unwrap()]), 1);
    let (mut checked, mut nonzero) = (0, 0);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        for f in load(&path) {
            let r = f.repr();
            let NetRepr::Ipv4(ip, udp) = r.net else { continue };
            let meta = meta_of(&ip, &udp, None);
            let start = r.eth.header_len() + 28;
            let mut dgram = f.bytes[start..start + usize::from(udp_len(&f.bytes[start - 8..]) - 8)].to_vec();
            assert_eq!(
                eng.handle_datagram(Instant::ZERO, &meta, &dgram),
                IcrcCheck::Ipv4IdInferred(ip.ident),
                "{}",
                path.display()
            );
            checked += 1;
            nonzero += usize::from(ip.ident != 0);
            let last = dgram.len() - 5;
            dgram[last] ^= 0x10;
            assert_eq!(eng.handle_datagram(Instant::ZERO, &meta, &dgram), IcrcCheck::Failed);
        }
    }
    eprintln!("{checked} packets, {nonzero} with a non-zero IPv4 ID: every ID inferred");
    assert!(checked >= 500 && nonzero >= 500, "{checked} packets, {nonzero} non-zero IDs");
    let c = eng.counters();
    assert_eq!((c.icrc_ipv4_id_inferred, c.icrc_errors), (checked as u64, checked as u64));
}

/// What a driver would tell the engine of a captured IPv4 datagram.
fn meta_of(ip: &roce_wire::Ipv4Repr, udp: &roce_wire::UdpRepr, ipv4_id: Option<u16>) -> DatagramMeta {
    DatagramMeta {
        src: ip.src.into(),
        dst: ip.dst.into(),
        src_port: udp.src_port,
        dst_port: udp.dst_port,
        ecn: ip.ecn(),
        ipv4_id,
    }
}

fn udp_len(udp: &[u8]) -> u16 {
    u16::from_be_bytes([udp[4], udp[5]])
}
