//! Parse throughput against the cost of the CRC alone.
//!
//! One RC_RDMA_WRITE_ONLY frame over IPv4 (UDP checksum 0, as rdma_rxe and
//! RoCE NICs send it), built with `RoceFrameRepr::emit`, with a 4 KiB and with
//! a 64 B payload. For each size:
//!
//! * `parse_verify`: `RoceFrameRepr::parse` with the default options (ICRC
//!   verified, responder rules checked);
//! * `parse_no_icrc`: the same without the ICRC, i.e. the header work alone;
//! * `parse_verify_udp_csum`: as `parse_verify`, on the same frame sent with a
//!   UDP checksum (which the parser then verifies too);
//! * `icrc_verify`: `icrc::verify` over the network packet (IP header .. ICRC);
//! * `crc32fast`: `crc32fast::hash` over the same bytes as `icrc_verify`: the
//!   floor for anything that verifies the ICRC;
//! * `ipv4_id_new` / `ipv4_id_solve` / `ipv4_id_delta`: what a receiver that
//!   cannot see the IPv4 Identification adds to the check (making the
//!   per-length solver, which drivers cache, then solving for the ID), and
//!   what a sender pays to fix an ICRC for a GSO segment's ID.
//!
//! Throughput is in bytes of the whole frame for the parse benchmarks and of
//! the network packet for the CRC ones. Run with
//! `cargo bench -p roce-wire --bench parse`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use roce_wire::ethernet::{self, EthernetRepr};
use roce_wire::opcode::HeaderSet;
use roce_wire::{
    icrc, BthRepr, ExtHeaders, Ipv4Repr, NetRepr, ParseOptions, Psn, RethRepr, RoceFrameRepr, RocePacketRepr,
    UdpRepr, ROCE_PORT,
};

const RC_RDMA_WRITE_ONLY: u8 = 0x0a;

/// An RC_RDMA_WRITE_ONLY frame over IPv4 carrying `payload`.
fn write_only_frame(payload: &[u8], udp_checksum: bool) -> Vec<u8> {
    let info = roce_wire::opcode::lookup(RC_RDMA_WRITE_ONLY).unwrap();
    assert_eq!(info.headers, HeaderSet::RETH);
    let repr = RoceFrameRepr {
        eth: EthernetRepr {
            dst: [0x52, 0x54, 0x00, 0x47, 0x00, 0x01],
            src: [0x52, 0x54, 0x00, 0x47, 0x00, 0x02],
            vlan: None,
            ethertype: ethernet::ethertype::IPV4,
        },
        net: NetRepr::Ipv4(
            Ipv4Repr {
                src: Ipv4Addr::new(10, 47, 0, 2),
                dst: Ipv4Addr::new(10, 47, 0, 1),
                tos: 0x02,
                ident: 0x1234,
                dont_frag: true,
                ttl: 64,
            },
            UdpRepr { src_port: 0xc0de, dst_port: ROCE_PORT, checksum: udp_checksum },
        ),
        packet: RocePacketRepr {
            bth: BthRepr {
                opcode: RC_RDMA_WRITE_ONLY,
                solicited: false,
                mig_req: true,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0x11,
                ack_req: true,
                psn: Psn::new(0x1234),
            },
            ext: ExtHeaders {
                reth: Some(RethRepr { va: 0x7f00_dead_b000, rkey: 0x1234, dma_len: payload.len() as u32 }),
                ..ExtHeaders::default()
            },
            payload,
        },
        padding: 0,
    };
    let frame = repr.to_vec().expect("emit");
    // The benchmarks below must measure the success path.
    assert_eq!(RoceFrameRepr::parse(&frame, &ParseOptions::default()).unwrap(), repr);
    frame
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

fn bench_size(c: &mut Criterion, name: &str, payload_len: usize) {
    let data = payload(payload_len);
    let frame = write_only_frame(&data, false);
    let frame_csum = write_only_frame(&data, true);
    // The network packet: what the ICRC covers (IP header .. ICRC).
    let net = &frame[ethernet::HEADER_LEN..];
    let opts = ParseOptions::default();
    let no_icrc = ParseOptions { verify_icrc: false, ..opts };

    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function(BenchmarkId::new("parse_verify", frame.len()), |b| {
        b.iter(|| RoceFrameRepr::parse(black_box(&frame), &opts).unwrap())
    });
    g.bench_function(BenchmarkId::new("parse_no_icrc", frame.len()), |b| {
        b.iter(|| RoceFrameRepr::parse(black_box(&frame), &no_icrc).unwrap())
    });
    g.bench_function(BenchmarkId::new("parse_verify_udp_csum", frame_csum.len()), |b| {
        b.iter(|| RoceFrameRepr::parse(black_box(&frame_csum), &opts).unwrap())
    });
    g.throughput(Throughput::Bytes(net.len() as u64));
    g.bench_function(BenchmarkId::new("icrc_verify", net.len()), |b| {
        b.iter(|| icrc::verify(black_box(net), icrc::NetHeader::Ipv4).unwrap())
    });
    g.bench_function(BenchmarkId::new("crc32fast", net.len()), |b| {
        b.iter(|| crc32fast::hash(black_box(net)))
    });
    let transport_len = net.len() - 28 - icrc::ICRC_LEN;
    let wire = icrc::read(net).unwrap();
    let mut id0 = net.to_vec();
    id0[4..6].fill(0);
    let icrc0 = icrc::compute(&id0[..id0.len() - icrc::ICRC_LEN], icrc::NetHeader::Ipv4);
    let lin = icrc::Ipv4IdIcrc::new(transport_len);
    assert_eq!(lin.solve(icrc0, wire), Some(0x1234));
    g.bench_function("ipv4_id_new", |b| b.iter(|| icrc::Ipv4IdIcrc::new(black_box(transport_len))));
    g.bench_function("ipv4_id_solve", |b| b.iter(|| lin.solve(black_box(icrc0), black_box(wire)).unwrap()));
    g.bench_function("ipv4_id_delta", |b| b.iter(|| lin.delta(black_box(7))));
    g.finish();
}

fn parse_4k(c: &mut Criterion) {
    bench_size(c, "write_only_4KiB", 4096);
}

fn parse_64b(c: &mut Criterion) {
    bench_size(c, "write_only_64B", 64);
}

criterion_group!(benches, parse_4k, parse_64b);
criterion_main!(benches);
