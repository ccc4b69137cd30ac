//! Two devices in one process over real UDP on loopback (IPv4 and IPv6).

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::{wait_n, SideOptions, UdpPair};

fn every_operation(a: &str, b: &str) {
    let (x, y) = UdpPair::new(SideOptions::default().bind(a))
        .y(SideOptions::default().bind(b))
        .mtu(PathMtu::Mtu1024)
        .open();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 + 7) as u8).collect();
    x.mr.write(0, &data).unwrap();
    // WRITE 300 KB, SEND 10 KB with imm, READ it back, FETCH_ADD, CMP_SWAP
    y.qp.post_recv(RecvWr { wr_id: 100, sg_list: vec![y.mr.sge(500_000, 20_000)] }).unwrap();
    y.mr.write(900_000, &41u64.to_ne_bytes()).unwrap();
    let wrs = vec![
        SendWr::new(
            1,
            SendOp::Write { remote_addr: y.mr.addr(), rkey: y.mr.rkey() },
            vec![x.mr.sge(0, 300_000)],
        ),
        SendWr::new(2, SendOp::SendWithImm { imm: 0x1234 }, vec![x.mr.sge(1000, 10_000)]),
        SendWr::new(
            3,
            SendOp::Read { remote_addr: y.mr.addr() + 5, rkey: y.mr.rkey() },
            vec![x.mr.sge(400_000, 100_000)],
        ),
        SendWr::new(
            4,
            SendOp::FetchAdd { remote_addr: y.mr.addr() + 900_000, rkey: y.mr.rkey(), add: 1 },
            vec![x.mr.sge(600_000, 8)],
        ),
        SendWr::new(
            5,
            SendOp::CompareSwap {
                remote_addr: y.mr.addr() + 900_000,
                rkey: y.mr.rkey(),
                compare: 42,
                swap: 7,
            },
            vec![x.mr.sge(600_008, 8)],
        ),
    ];
    x.qp.post_send_batch(wrs).unwrap();
    let wx = wait_n(&x.cq, 5);
    eprintln!(
        "x {:?} drop {}\ny {:?} drop {}",
        x.dev.counters(),
        x.dev.driver_stats().tx_dropped,
        y.dev.counters(),
        y.dev.driver_stats().tx_dropped
    );
    assert_eq!(
        wx.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    let wy = wait_n(&y.cq, 1);
    assert_eq!((wy[0].wr_id, wy[0].byte_len, wy[0].imm_data), (100, 10_000, 0x1234));
    let mut yb = vec![0; y.mr.len()];
    y.mr.read(0, &mut yb).unwrap();
    assert_eq!(&yb[..300_000], &data[..]);
    assert_eq!(&yb[500_000..510_000], &data[1000..11_000]);
    assert_eq!(u64::from_ne_bytes(yb[900_000..900_008].try_into().unwrap()), 7);
    let mut xb = vec![0; x.mr.len()];
    x.mr.read(0, &mut xb).unwrap();
    assert_eq!(&xb[400_000..500_000], &data[5..100_005]);
    assert_eq!(u64::from_ne_bytes(xb[600_000..600_008].try_into().unwrap()), 41);
    assert_eq!(u64::from_ne_bytes(xb[600_008..600_016].try_into().unwrap()), 42);
    assert!(x.mr.read(x.mr.len() - 1, &mut [0; 2]).is_err(), "a read past the region");
    assert!(x.mr.fill(x.mr.len(), 1, 0).is_err(), "a fill past the region");
    for d in [&x.dev, &y.dev] {
        let c = d.counters();
        assert_eq!((c.icrc_errors, c.malformed_dropped), (0, 0), "{c:?}");
    }
}

#[test]
fn every_operation_ipv4() {
    every_operation("127.0.0.1:0", "127.0.0.1:0");
}

#[test]
fn every_operation_ipv6() {
    every_operation("[::1]:0", "[::1]:0");
}
