//! Writes the seed corpus of the `parse_frame` fuzz target to
//! `fuzz/seeds/parse_frame/`:
//!
//! * from the captures in `testdata/softroce/*.pcap` and
//!   `testdata/oracle/roce-sample.pcap`, at most two frames for each distinct
//!   (parse result, opcode or error kind, size class), RoCE or not;
//! * one synthetic frame for every opcode in the table, over IPv4 (with a UDP
//!   checksum), IPv6 and RoCEv1, and tagged 802.1Q over IPv4.
//!
//! Run from the `fuzz` directory: `cargo run --example make_seeds`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use core::net::{Ipv4Addr, Ipv6Addr};
use roce_wire::ethernet::ethertype;
use roce_wire::opcode::{self, HeaderSet, Operation};
use roce_wire::pcap::PcapReader;
use roce_wire::{
    AethRepr, AtomicEthRepr, BthRepr, DethRepr, EthernetRepr, ExtHeaders, FethRepr, GrhRepr, Ipv4Repr,
    Ipv6Repr, NetRepr, ParseOptions, Psn, RethRepr, RoceFrameRepr, RocePacketRepr, Syndrome, UdpRepr,
    VlanTag, ROCE_PORT,
};

const PER_CLASS: usize = 2;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("seeds/parse_frame");
    if out.exists() {
        fs::remove_dir_all(&out).unwrap();
    }
    fs::create_dir_all(&out).unwrap();

    let mut captures: Vec<PathBuf> = fs::read_dir(root.join("../testdata/softroce"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    captures.sort();
    captures.push(root.join("../testdata/oracle/roce-sample.pcap"));

    let mut classes: BTreeMap<String, usize> = BTreeMap::new();
    let (mut n, mut bytes) = (0usize, 0usize);
    for cap in &captures {
        let stem = cap.file_stem().unwrap().to_string_lossy().into_owned();
        let reader = PcapReader::open(cap).unwrap_or_else(|e| panic!("{}: {e}", cap.display()));
        for (i, rec) in reader.enumerate() {
            let frame = rec.unwrap_or_else(|e| panic!("{}: {e}", cap.display())).data;
            let class = match RoceFrameRepr::parse(&frame, &ParseOptions::default()) {
                Ok(r) => format!("ok-{:02x}-{}", r.packet.bth.opcode, size_class(r.packet.payload.len())),
                Err(e) => format!("err-{}-{}", e.kind(), size_class(frame.len())),
            };
            let seen = classes.entry(class.clone()).or_default();
            if *seen >= PER_CLASS {
                continue;
            }
            *seen += 1;
            fs::write(out.join(format!("{stem}-{i:03}-{class}")), &frame).unwrap();
            n += 1;
            bytes += frame.len();
        }
    }

    for info in opcode::all() {
        let packet = synthetic_packet(info.code);
        for (net_name, vlan, net) in nets() {
            let frame = RoceFrameRepr {
                eth: EthernetRepr {
                    dst: [0x52, 0x54, 0, 0x47, 0, 1],
                    src: [0x52, 0x54, 0, 0x47, 0, 2],
                    vlan,
                    ethertype: match net {
                        NetRepr::Ipv4(..) => ethertype::IPV4,
                        NetRepr::Ipv6(..) => ethertype::IPV6,
                        NetRepr::Grh(_) => ethertype::ROCE_V1,
                    },
                },
                net,
                packet,
                padding: 0,
            };
            let bytes_out = frame.to_vec().unwrap_or_else(|e| panic!("{}: {e}", info.name));
            let back = RoceFrameRepr::parse(&bytes_out, &ParseOptions::default())
                .unwrap_or_else(|e| panic!("{} over {net_name}: {e}", info.name));
            assert_eq!(back, frame);
            fs::write(out.join(format!("synth-{:02x}-{net_name}", info.code)), &bytes_out).unwrap();
            n += 1;
            bytes += bytes_out.len();
        }
    }
    println!("{n} seeds, {bytes} bytes, in {}", out.display());
}

fn size_class(len: usize) -> &'static str {
    match len {
        0 => "0",
        1..=64 => "small",
        65..=1024 => "mid",
        _ => "large",
    }
}

fn nets() -> [(&'static str, Option<VlanTag>, NetRepr); 4] {
    let v4 = Ipv4Repr {
        src: Ipv4Addr::new(10, 47, 0, 1),
        dst: Ipv4Addr::new(10, 47, 0, 2),
        tos: 0x02,
        ident: 0x1234,
        dont_frag: true,
        ttl: 64,
    };
    let udp = |checksum| UdpRepr { src_port: 0xc0de, dst_port: ROCE_PORT, checksum };
    [
        ("ipv4", None, NetRepr::Ipv4(v4, udp(true))),
        ("vlan-ipv4", Some(VlanTag { pcp: 3, dei: false, vid: 100 }), NetRepr::Ipv4(v4, udp(false))),
        (
            "ipv6",
            None,
            NetRepr::Ipv6(
                Ipv6Repr {
                    src: Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0xff, 0xfe47, 1),
                    dst: Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0xff, 0xfe47, 2),
                    traffic_class: 0x68,
                    flow_label: 0xabcde,
                    hop_limit: 64,
                },
                udp(false),
            ),
        ),
        (
            "grh",
            None,
            NetRepr::Grh(GrhRepr {
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 1,
                sgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x47, 0, 1],
                dgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x47, 0, 2],
            }),
        ),
    ]
}

/// A packet of opcode `code` that passes `check(None)`.
fn synthetic_packet(code: u8) -> RocePacketRepr<'static> {
    static DATA: [u8; 64] = {
        let mut d = [0u8; 64];
        let mut i = 0;
        while i < 64 {
            d[i] = i as u8 ^ 0x5a;
            i += 1;
        }
        d
    };
    let info = opcode::lookup(code).unwrap();
    let payload: &'static [u8] = match (info.payload, info.operation) {
        (false, _) => &[],
        (true, Operation::AtomicWrite) => &DATA[..8],
        // an odd length, so the pad count is not zero where it may not be
        (true, _) if info.position.ends_message() => &DATA[..13],
        (true, _) => &DATA[..32],
    };
    let h = info.headers;
    let has = |x| h.contains(x);
    let ext = ExtHeaders {
        deth: has(HeaderSet::DETH).then_some(DethRepr { qkey: 0x1111_1111, src_qp: 0x12 }),
        feth: has(HeaderSet::FETH).then_some(FethRepr { selectivity: 1, placement: 3 }),
        reth: has(HeaderSet::RETH).then_some(RethRepr {
            va: 0x7f00_dead_b000,
            rkey: 0x1234,
            dma_len: if info.position == opcode::Position::First { 4096 } else { payload.len() as u32 },
        }),
        atomic_eth: has(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: 0x7f00_dead_b008,
            rkey: 0x1234,
            swap_add: 5,
            compare: 3,
        }),
        aeth: has(HeaderSet::AETH).then_some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 9 }),
        atomic_ack: has(HeaderSet::ATOMIC_ACK_ETH).then_some(42),
        imm: has(HeaderSet::IMM_DT).then_some(0xcafe_f00d),
        ieth: has(HeaderSet::IETH).then_some(0x4321),
    };
    RocePacketRepr {
        bth: BthRepr {
            opcode: code,
            solicited: info.position.ends_message(),
            mig_req: true,
            pkey: 0xffff,
            fecn: false,
            becn: code == 0x81,
            dest_qp: 0x11,
            ack_req: info.request,
            psn: Psn::new(0xff_fffe),
        },
        ext,
        payload,
    }
}
