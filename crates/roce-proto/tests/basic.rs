//! Every operation once over a clean link, then with a lossy one.

use roce_proto::testkit::*;
use roce_proto::*;

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt)).collect()
}

#[test]
fn write_send_read_atomics() {
    let mut p = Pair::new(1);
    let c = p.connect(PathMtu::Mtu1024, [100, 0xfffffe], |_| {});
    let src = p.region(A, 65536, 0x1000_0000, Access::ALL);
    let dst = p.region(B, 65536, 0x2000_0000, Access::ALL);
    let data = pattern(10_000, 7);
    p.put(&src, 0, &data);
    // WRITE 10000 bytes
    p.e[A]
        .post_send(
            c.qpn[0],
            SendWr::new(
                1,
                SendOp::Write { remote_addr: dst.keys.addr, rkey: dst.keys.rkey },
                vec![sge(&src, 0, 10_000)],
            ),
        )
        .unwrap();
    // SEND with imm 3000 bytes into a posted receive
    p.e[B].post_recv(c.qpn[1], RecvWr { wr_id: 77, sg_list: vec![sge(&dst, 20_000, 4000)] }).unwrap();
    p.e[A]
        .post_send(c.qpn[0], SendWr::new(2, SendOp::SendWithImm { imm: 0xabcd }, vec![sge(&src, 100, 3000)]))
        .unwrap();
    // READ back 5000 bytes from B into A at 30000
    p.e[A]
        .post_send(
            c.qpn[0],
            SendWr::new(
                3,
                SendOp::Read { remote_addr: dst.keys.addr + 10, rkey: dst.keys.rkey },
                vec![sge(&src, 30_000, 5000)],
            ),
        )
        .unwrap();
    // FETCH_ADD and CMP_SWAP on B's word at 40000
    p.put(&dst, 40_000, &5u64.to_ne_bytes());
    p.e[A]
        .post_send(
            c.qpn[0],
            SendWr::new(
                4,
                SendOp::FetchAdd { remote_addr: dst.keys.addr + 40_000, rkey: dst.keys.rkey, add: 10 },
                vec![sge(&src, 50_000, 8)],
            ),
        )
        .unwrap();
    p.e[A]
        .post_send(
            c.qpn[0],
            SendWr::new(
                5,
                SendOp::CompareSwap {
                    remote_addr: dst.keys.addr + 40_000,
                    rkey: dst.keys.rkey,
                    compare: 15,
                    swap: 99,
                },
                vec![sge(&src, 50_008, 8)],
            ),
        )
        .unwrap();
    assert_eq!([p.e[A].completions_made(), p.e[B].completions_made()], [0, 0]);
    p.run();
    // What a driver looks at to tell progress that completed something.
    assert_eq!([p.e[A].completions_made(), p.e[B].completions_made()], [5, 1]);
    let wa = p.poll(A);
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(p.e[A].completions_made(), 5, "polling takes completions, it makes none");
    let wb = p.poll(B);
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].byte_len, wb[0].imm_data, wb[0].opcode),
        (77, 3000, 0xabcd, WcOpcode::Recv)
    );
    let b = p.mem(&dst);
    assert_eq!(&b[..10_000], &data[..]);
    assert_eq!(&b[20_000..23_000], &data[100..3100]);
    let a = p.mem(&src);
    assert_eq!(&a[30_000..35_000], &data[10..5010]);
    assert_eq!(u64::from_ne_bytes(a[50_000..50_008].try_into().unwrap()), 5);
    assert_eq!(u64::from_ne_bytes(a[50_008..50_016].try_into().unwrap()), 15);
    assert_eq!(u64::from_ne_bytes(b[40_000..40_008].try_into().unwrap()), 99);
}

#[test]
fn lossy_link_still_delivers() {
    for seed in 0..20u64 {
        let mut p = Pair::new(seed);
        let c = p.connect(PathMtu::Mtu256, [0xfffff0, 7], |_| {});
        let src = p.region(A, 65536, 0x1000_0000, Access::ALL);
        let dst = p.region(B, 65536, 0x2000_0000, Access::ALL);
        let data = pattern(60_000, seed as u8);
        p.put(&src, 0, &data);
        for i in 0..6u64 {
            p.e[A]
                .post_send(
                    c.qpn[0],
                    SendWr::new(
                        i,
                        SendOp::Write { remote_addr: dst.keys.addr + i * 10_000, rkey: dst.keys.rkey },
                        vec![sge(&src, i * 10_000, 10_000)],
                    ),
                )
                .unwrap();
        }
        let mut rng = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
        p.run_with(
            |_, _| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % 10 != 0
            },
            1_000_000,
        );
        let wa = p.poll(A);
        assert_eq!(wa.len(), 6, "seed {seed}: {wa:?}");
        assert!(wa.iter().all(|w| w.status == WcStatus::Success), "seed {seed}: {wa:?}");
        assert_eq!(p.mem(&dst)[..60_000], data[..], "seed {seed}");
    }
}

/// `poll_transmit_batch` hands out runs of equal-length datagrams of one QP
/// (a GSO send; the last may be shorter). A 100-byte WRITE, an 8-packet
/// WRITE and a 1-packet WRITE: the short one alone (the longer First packet
/// behind it cannot join and waits), the First (longer, with the RETH) with
/// the first Middle, the six others, then the last WRITE, which again could
/// not join. Every datagram arrives intact.
#[test]
fn batches_of_equal_datagrams() {
    let mut p = Pair::new(3);
    let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
    let src = p.region(A, 65536, 0x1000_0000, Access::ALL);
    let dst = p.region(B, 65536, 0x2000_0000, Access::ALL);
    let data = pattern(8192, 5);
    p.put(&src, 0, &data);
    let write = |id, off: u64, len| {
        SendWr::new(
            id,
            SendOp::Write { remote_addr: dst.keys.addr + off, rkey: dst.keys.rkey },
            vec![sge(&src, off, len)],
        )
    };
    p.e[A].post_send(c.qpn[0], write(1, 8192, 100)).unwrap();
    p.e[A].post_send(c.qpn[0], write(2, 0, 8192)).unwrap();
    p.e[A].post_send(c.qpn[0], write(3, 9216, 1024)).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut shapes = Vec::new();
    while let Some(tx) = p.e[A].poll_transmit_batch(p.now, &mut buf, 64) {
        shapes.push((tx.segments(), tx.segment_size));
        for d in buf[..tx.len].chunks(tx.segment_size) {
            assert_eq!(p.e[B].handle_datagram(p.now, &tx.meta, d), IcrcCheck::Verified);
        }
    }
    let (first, middle, only_100) = (12 + 16 + 1024 + 4, 12 + 1024 + 4, 12 + 16 + 100 + 4);
    assert_eq!(shapes, [(1, only_100), (2, first), (6, middle), (1, first)]);
    p.run();
    assert_eq!(p.get(&dst, 0, 8192), data);
    let wcs: Vec<_> = p.poll(A).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wcs, [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]);
}
