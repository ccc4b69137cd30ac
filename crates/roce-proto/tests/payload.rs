//! An engine that elides payload (`config::Payload::Elided`, a simulator's
//! timing-only hosts): packets keep their lengths and the protocol its
//! checks, each message's first bytes are carried and placed, the rest is
//! neither read nor written, and an engine of the other mode is not
//! understood.

use roce_proto::config::Payload;
use roce_proto::testkit::*;
use roce_proto::*;

const KEEP: u32 = 64;

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt) | 1).collect()
}

fn pair(modes: [Payload; 2]) -> Pair {
    let mut cfg = [EngineConfig::new(vec![ip(A)]), EngineConfig::new(vec![ip(B)])];
    for (c, m) in cfg.iter_mut().zip(modes) {
        c.payload = m;
    }
    Pair::with_configs(cfg, [3, 4])
}

/// A WRITE of 10,000 bytes, a SEND of 3,000 and a READ of 5,000, at MTU
/// 1024, between engines in `modes`; and a WRITE past the end of B's region.
/// The pair after the run, and its two regions.
fn exchange(modes: [Payload; 2]) -> (Pair, Region, Region) {
    let mut p = pair(modes);
    let c = p.connect(PathMtu::Mtu1024, [100, 0x00ff_fffe], |_| {});
    let src = p.region(A, 65536, 0x1000_0000, Access::ALL);
    let dst = p.region(B, 65536, 0x2000_0000, Access::ALL);
    p.put(&src, 0, &pattern(10_000, 7));
    p.put(&src, 30_000, &[0xaa; 5000]);
    p.put(&dst, 0, &[0xee; 30_000]);
    p.put(&dst, 40_000, &pattern(5000, 9));
    let write = |id, at: u64, len| {
        SendWr::new(
            id,
            SendOp::Write { remote_addr: dst.keys.addr + at, rkey: dst.keys.rkey },
            vec![sge(&src, 0, len)],
        )
    };
    p.e[A].post_send(c.qpn[0], write(1, 0, 10_000)).unwrap();
    p.e[B].post_recv(c.qpn[1], RecvWr { wr_id: 77, sg_list: vec![sge(&dst, 20_000, 4000)] }).unwrap();
    p.e[A]
        .post_send(c.qpn[0], SendWr::new(2, SendOp::SendWithImm { imm: 0xabcd }, vec![sge(&src, 100, 3000)]))
        .unwrap();
    p.e[A]
        .post_send(
            c.qpn[0],
            SendWr::new(
                3,
                SendOp::Read { remote_addr: dst.keys.addr + 40_000, rkey: dst.keys.rkey },
                vec![sge(&src, 30_000, 5000)],
            ),
        )
        .unwrap();
    // past the end of B's region: refused whether or not its bytes move
    p.e[A].post_send(c.qpn[0], write(4, 65536 - 100, 1000)).unwrap();
    p.run();
    (p, src, dst)
}

#[test]
fn an_elided_payload_moves_each_messages_first_bytes_and_keeps_every_rule() {
    let elided = Payload::Elided { keep: KEEP };
    let (mut e, src, dst) = exchange([elided; 2]);
    let (mut c, _, _) = exchange([Payload::Carried; 2]);
    let k = KEEP as usize;

    // The same completions, statuses and lengths as a pair that carries
    // everything, the WRITE past the end refused in both.
    for side in [A, B] {
        let got: Vec<_> = e.poll(side).iter().map(|w| (w.wr_id, w.status, w.byte_len, w.imm_data)).collect();
        let want: Vec<_> = c.poll(side).iter().map(|w| (w.wr_id, w.status, w.byte_len, w.imm_data)).collect();
        assert_eq!(got, want, "side {side}");
    }
    // The same packets, of the same lengths, in the same order.
    let lens = |p: &Pair| p.trace.iter().map(|(s, b)| (*s, b.len())).collect::<Vec<_>>();
    assert_eq!(lens(&e), lens(&c));
    assert!(e.e[B].counters().icrc_errors == 0 && e.e[A].counters().icrc_errors == 0);

    let data = pattern(10_000, 7);
    let b = e.mem(&dst);
    // WRITE: its first bytes placed, the rest of B's region untouched
    assert_eq!(b[..k], data[..k]);
    assert!(b[k..10_000].iter().all(|&x| x == 0xee));
    // SEND: the same
    assert_eq!(b[20_000..20_000 + k], data[100..100 + k]);
    assert!(b[20_000 + k..23_000].iter().all(|&x| x == 0xee));
    // READ: the response's first bytes placed in A, the rest untouched
    let a = e.mem(&src);
    assert_eq!(a[30_000..30_000 + k], pattern(5000, 9)[..k]);
    assert!(a[30_000 + k..35_000].iter().all(|&x| x == 0xaa));

    // What travels past a message's first bytes is zeros (headers and
    // the first bytes end before byte 200).
    let full: Vec<_> = e.trace.iter().filter(|(_, d)| d.len() > 1000).collect();
    // the WRITE's, SEND's and READ's full packets, and the refused WRITE
    assert_eq!(full.len(), 9 + 2 + 4 + 1);
    for (_, d) in full {
        assert!(d[200..d.len() - 4].iter().all(|&x| x == 0));
    }
}

#[test]
fn engines_of_the_two_modes_do_not_understand_each_other() {
    let (mut p, _, _) = exchange([Payload::Carried, Payload::Elided { keep: KEEP }]);
    assert!(p.e[B].counters().icrc_errors > 0);
    let wa = p.poll(A);
    assert!(!wa.is_empty() && wa.iter().all(|w| w.status != WcStatus::Success), "{wa:?}");
}
