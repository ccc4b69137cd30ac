//! Every operation once over a clean link, then with a lossy one.

mod common;
use common::*;
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
    p.run();
    let wa = p.poll(A);
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
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
