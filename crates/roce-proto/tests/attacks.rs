//! The attack classes of ReDMArk (Rothenberger et al., "ReDMArk: Bypassing
//! RDMA Security Mechanisms", USENIX Security 2021) replayed against the
//! engine: packets an attacker crafts, with a correct ICRC (anyone can
//! compute it), handed to an engine in the middle of a transfer.
//!
//! The attacker is off path: it can send to the victim's UDP port from its
//! own address, or spoof a source address where the network lets it, but it
//! does not see the traffic. The figures of the guessing attacks are in
//! `docs/security.md`.

use core::net::{IpAddr, Ipv4Addr};

use roce_proto::testkit::*;
use roce_proto::*;
use roce_wire::{AethRepr, NakCode, Psn, RocePacketRepr, Syndrome};

/// The attacker's own address.
const MALLORY: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 66, 6, 6));

fn write(id: u64, dst: &Region, off: u64, src: &Region, soff: u64, len: u32) -> SendWr {
    SendWr::new(
        id,
        SendOp::Write { remote_addr: dst.keys.addr + off, rkey: dst.keys.rkey },
        vec![sge(src, soff, len)],
    )
}

/// Re-emits `pkt` (changed by `edit`) with a correct ICRC for `meta`.
fn forge(meta: &DatagramMeta, pkt: &[u8], edit: impl FnOnce(&mut RocePacketRepr<'_>)) -> Vec<u8> {
    let mut repr = RocePacketRepr::parse(pkt).expect("a packet the engine sent");
    edit(&mut repr);
    let mut out = vec![0; repr.buffer_len().expect("valid")];
    repr.emit(&mut out).expect("fits");
    let n = out.len() - 4;
    let icrc = meta.encap().icrc(&out[..n]).expect("valid headers");
    out[n..].copy_from_slice(&icrc.to_le_bytes());
    out
}

fn from(meta: &DatagramMeta, src: IpAddr) -> DatagramMeta {
    DatagramMeta { src, ..*meta }
}

/// An RC connection with a 64 KiB region on each side.
fn setup(seed: u64) -> (Pair, Conn, Region, Region) {
    let mut p = Pair::new(seed);
    let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
    let src = p.region(A, 65536, 0x1000, Access::ALL);
    let dst = p.region(B, 65536, 0x10_0000, Access::ALL);
    (p, c, src, dst)
}

/// Injection of requests: a WRITE from an address that is not the QP's
/// peer, right QPN, PSN, rkey and all, changes no byte.
#[test]
fn request_from_another_address_is_dropped() {
    let (mut p, c, src, dst) = setup(1);
    p.put(&src, 0, &[0xab; 64]);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 64)).unwrap();
    let (meta, pkt) = p.take(A).remove(0);
    let evil = from(&meta, MALLORY);
    p.deliver(B, &evil, &forge(&evil, &pkt, |_| {}));
    assert_eq!(p.get(&dst, 0, 64), vec![0; 64], "the forged WRITE landed");
    assert_eq!(p.e[B].counters().addr_mismatch_dropped, 1);
    assert!(p.take(B).is_empty(), "answered a stranger");
}

/// Forged NAK (ReDMArk's "QP killing"): a remote access error NAK for the
/// live PSN, from another address, must not end the requester's QP.
#[test]
fn forged_nak_from_another_address_does_not_end_the_qp() {
    let (mut p, c, src, dst) = setup(2);
    p.put(&src, 0, &[0x5a; 4096]);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 4096)).unwrap();
    let reqs = p.take(A);
    let psn = RocePacketRepr::parse(&reqs[0].1).unwrap().bth.psn;
    for (m, b) in &reqs {
        p.deliver(B, m, b);
    }
    let (ack_meta, ack) = p.take(B).remove(0);
    let evil = from(&ack_meta, MALLORY);
    let nak = forge(&evil, &ack, |r| {
        r.bth.psn = psn;
        r.ext.aeth = Some(AethRepr { syndrome: Syndrome::Nak(NakCode::RemoteAccessError), msn: 0 });
    });
    p.deliver(A, &evil, &nak);
    assert_eq!(p.e[A].qp_state(c.qpn[0]), Some(QpState::Rts), "a stranger's NAK ended the QP");
    assert_eq!(p.e[A].counters().response_addr_mismatch_dropped, 1);
    assert!(p.poll(A).is_empty());
    // The real ACK still completes the WRITE.
    p.deliver(A, &ack_meta, &ack);
    let w = p.poll(A);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].status, WcStatus::Success);
}

/// Forged ACK: an ACK from another address for a WRITE whose packets never
/// arrived must not complete it (the application would believe data had
/// landed that had not).
#[test]
fn forged_ack_from_another_address_retires_nothing() {
    let (mut p, c, src, dst) = setup(3);
    p.put(&src, 0, &[0x77; 2048]);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 2048)).unwrap();
    let reqs = p.take(A);
    let last = RocePacketRepr::parse(&reqs.last().unwrap().1).unwrap().bth.psn;
    // An ACK as B would send it, learnt from another connection's traffic
    // shape: build it from a real one of a second pair.
    let (mut q, qc, qsrc, qdst) = setup(3);
    q.e[A].post_send(qc.qpn[0], write(1, &qdst, 0, &qsrc, 0, 8)).unwrap();
    for (m, b) in q.take(A) {
        q.deliver(B, &m, &b);
    }
    let (mut ack_meta, ack) = q.take(B).remove(0);
    ack_meta.dst = p.ip[A];
    let evil = from(&ack_meta, MALLORY);
    let ack = forge(&evil, &ack, |r| {
        r.bth.dest_qp = c.qpn[0];
        r.bth.psn = last;
    });
    p.deliver(A, &evil, &ack);
    assert!(p.poll(A).is_empty(), "a stranger's ACK completed a WRITE whose data never arrived");
    assert_eq!(p.e[A].counters().response_addr_mismatch_dropped, 1);
    // The transfer itself still completes.
    for (m, b) in &reqs {
        p.deliver(B, m, b);
    }
    p.run();
    assert_eq!(p.poll(A)[0].status, WcStatus::Success);
    assert_eq!(p.get(&dst, 0, 2048), vec![0x77; 2048]);
}

/// A forged ACK from the right address (spoofed) but for PSNs never sent
/// is dropped: responses must name outstanding PSNs.
#[test]
fn ack_for_psns_never_sent_is_dropped() {
    let (mut p, c, src, dst) = setup(4);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 8)).unwrap();
    let reqs = p.take(A);
    for (m, b) in &reqs {
        p.deliver(B, m, b);
    }
    let (ack_meta, ack) = p.take(B).remove(0);
    let psn = RocePacketRepr::parse(&ack).unwrap().bth.psn;
    for ahead in [1u32, 1000, 1 << 22] {
        let f = forge(&ack_meta, &ack, |r| r.bth.psn = Psn::new(psn.value().wrapping_add(ahead)));
        p.deliver(A, &ack_meta, &f);
    }
    assert!(p.poll(A).is_empty());
    assert_eq!(p.e[A].counters().unexpected_response_dropped, 3);
    p.deliver(A, &ack_meta, &ack);
    assert_eq!(p.poll(A).len(), 1);
}

/// A CNP slows a sender down (congestion control): only the QP's peer may
/// send one. A stranger's CNP is dropped and counted, not taken.
#[test]
fn cnp_from_another_address_is_dropped() {
    let (mut p, c, _, _) = setup(5);
    let meta = DatagramMeta {
        src: p.ip[B],
        dst: p.ip[A],
        src_port: 49152,
        dst_port: roce_wire::ROCE_PORT,
        ecn: 0,
        ipv4_id: None,
    };
    let cnp = roce_wire::RocePacketRepr {
        bth: roce_wire::BthRepr {
            opcode: 0x81,
            solicited: false,
            mig_req: false,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp: c.qpn[0],
            ack_req: false,
            psn: Psn::new(0),
        },
        ext: roce_wire::ExtHeaders::default(),
        payload: &[],
    };
    let mut b = vec![0; cnp.buffer_len().unwrap()];
    cnp.emit(&mut b).unwrap();
    let real = forge(&meta, &b, |_| {});
    let evil = from(&meta, MALLORY);
    p.deliver(A, &evil, &forge(&evil, &b, |_| {}));
    assert_eq!(p.e[A].counters().cnp_rcvd, 0, "a stranger's CNP was taken");
    assert_eq!(p.e[A].counters().cnp_dropped, 1);
    p.deliver(A, &meta, &real);
    assert_eq!(p.e[A].counters().cnp_rcvd, 1);
}

/// With `pin_peer_port`, a packet from the peer's address but another UDP
/// source port than its first (a spoofer who knows the address but not the
/// port) is dropped.
#[test]
fn pinned_peer_port_drops_packets_from_another_port() {
    let mut cfg = [EngineConfig::new(vec![ip(A)]), EngineConfig::new(vec![ip(B)])];
    for c in &mut cfg {
        c.pin_peer_port = true;
    }
    let mut p = Pair::with_configs(cfg, [6, 7]);
    let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
    let src = p.region(A, 65536, 0x1000, Access::ALL);
    let dst = p.region(B, 65536, 0x10_0000, Access::ALL);
    p.put(&src, 0, &[1; 16]);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 8)).unwrap();
    p.run();
    assert_eq!(p.poll(A)[0].status, WcStatus::Success);
    p.e[A].post_send(c.qpn[0], write(2, &dst, 8, &src, 8, 8)).unwrap();
    let (meta, pkt) = p.take(A).remove(0);
    let other = DatagramMeta { src_port: meta.src_port ^ 1, ..meta };
    p.deliver(B, &other, &forge(&other, &pkt, |_| {}));
    assert_eq!(p.e[B].counters().port_mismatch_dropped, 1);
    assert_eq!(p.get(&dst, 8, 8), vec![0; 8]);
    p.deliver(B, &meta, &pkt);
    p.run();
    assert_eq!(p.get(&dst, 8, 8), vec![1; 8]);
}

/// The address a region advertises is every peer's to see. With
/// `ZeroBased` or `Random` addressing it is not where the memory is (the
/// process's layout stays private), and WRITE, READ and atomics work
/// through it as before. `Access::ZERO_BASED` asks for it per region.
#[test]
fn regions_can_hide_where_their_memory_is() {
    for mode in [MrAddressing::ZeroBased, MrAddressing::Random] {
        let mut cfg = [EngineConfig::new(vec![ip(A)]), EngineConfig::new(vec![ip(B)])];
        cfg[B].mr_addressing = mode;
        let mut p = Pair::with_configs(cfg, [8, 9]);
        let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
        let src = p.region(A, 8192, 0x1000, Access::ALL);
        let buf = MemBuf::new(8192);
        let spec = MrSpec { buf: buf.clone(), offset: 0, length: 8192, iova: None, access: Access::ALL };
        let keys = p.e[B].reg_mr(p.pd[B], spec).unwrap();
        assert_ne!(keys.addr, buf.addr(), "{mode:?}: the region advertised its pointer");
        if mode == MrAddressing::ZeroBased {
            assert_eq!(keys.addr, 0);
        } else {
            assert!(keys.addr < 1 << 63 && keys.addr % 8 == buf.addr() % 8);
        }
        let dst = Region { side: B, buf, keys };
        p.put(&src, 0, b"offsets, not pointers");
        p.e[A].post_send(c.qpn[0], write(1, &dst, 4096, &src, 0, 21)).unwrap();
        let fa = SendOp::FetchAdd { remote_addr: dst.keys.addr + 64, rkey: dst.keys.rkey, add: 7 };
        p.e[A].post_send(c.qpn[0], SendWr::new(2, fa, vec![sge(&src, 128, 8)])).unwrap();
        let rd = SendOp::Read { remote_addr: dst.keys.addr + 4096, rkey: dst.keys.rkey };
        p.e[A].post_send(c.qpn[0], SendWr::new(3, rd, vec![sge(&src, 1024, 21)])).unwrap();
        p.run();
        assert!(p.poll(A).iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(p.get(&dst, 4096, 21), b"offsets, not pointers");
        assert_eq!(p.word(&dst, 64), 7);
        assert_eq!(p.get(&src, 1024, 21), b"offsets, not pointers");
        // The pointer itself no longer names the memory.
        let bad = SendOp::Write { remote_addr: dst.buf.addr() + 4096, rkey: dst.keys.rkey };
        p.e[A].post_send(c.qpn[0], SendWr::new(4, bad, vec![sge(&src, 0, 8)])).unwrap();
        p.run();
        assert_eq!(p.poll(A)[0].status, WcStatus::RemAccessErr);
    }
    // Per region, as ibverbs' IBV_ACCESS_ZERO_BASED.
    let mut p = Pair::new(10);
    let buf = MemBuf::new(4096);
    let spec = MrSpec { buf, offset: 0, length: 4096, iova: None, access: Access::ALL | Access::ZERO_BASED };
    assert_eq!(p.e[A].reg_mr(p.pd[A], spec).unwrap().addr, 0);
}

/// Resource exhaustion by out-of-window packets, from a spoofer who knows
/// the QP: a burst of duplicates of a WRITE (behind the window) is answered
/// by one coalesced ACK, a burst of requests ahead of the window by one
/// sequence NAK per gap, and a burst of duplicate READs by at most
/// `max_dest_rd_atomic` replays: the responder's queue stays bounded
/// whatever the flood's size.
#[test]
fn out_of_window_floods_cost_bounded_responses() {
    const FLOOD: u32 = 20_000;
    let (mut p, c, src, dst) = setup(11);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 8)).unwrap();
    let (meta, pkt) = p.take(A).remove(0);
    p.deliver(B, &meta, &pkt);
    assert_eq!(p.take(B).len(), 1, "the ACK");
    let psn = RocePacketRepr::parse(&pkt).unwrap().bth.psn;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Behind the window: duplicates.
    for _ in 0..FLOOD {
        let back = 1 + (next() % 1000) as u32;
        p.deliver(B, &meta, &forge(&meta, &pkt, |r| r.bth.psn = psn.add(1).sub(back)));
    }
    assert_eq!(p.take(B).len(), 1, "one coalesced ACK for the burst");
    // Ahead of the window.
    for _ in 0..FLOOD {
        let ahead = 2 + (next() % (1 << 20)) as u32;
        p.deliver(B, &meta, &forge(&meta, &pkt, |r| r.bth.psn = psn.add(ahead)));
    }
    assert_eq!(p.take(B).len(), 1, "one sequence NAK for the gap");
    assert_eq!(p.e[B].counters().out_of_seq_request, u64::from(FLOOD));
    assert_eq!(p.get(&dst, 0, 8), vec![0; 8], "no flooded WRITE executed");

    // Duplicate READs: each may be replayed (IBTA §9.7.5.1.2), but only as
    // many at once as there are responder resources.
    let (mut p, c, src, dst) = setup(12);
    let rd = SendOp::Read { remote_addr: dst.keys.addr, rkey: dst.keys.rkey };
    p.e[A].post_send(c.qpn[0], SendWr::new(3, rd, vec![sge(&src, 0, 65536)])).unwrap();
    let (meta, pkt) = p.take(A).remove(0);
    p.deliver(B, &meta, &pkt);
    let one = p.take(B).len();
    assert_eq!(one, 64, "64 KiB at MTU 1024");
    for _ in 0..FLOOD {
        p.deliver(B, &meta, &pkt);
    }
    let slots = usize::from(p.e[B].query_qp(c.qpn[1]).unwrap().max_dest_rd_atomic).max(1);
    let sent = p.take(B).len();
    assert!(sent <= slots * one, "{FLOOD} duplicate READs queued {sent} packets (bound {})", slots * one);
    assert!(p.e[B].counters().dup_no_resource_dropped >= u64::from(FLOOD) - slots as u64);
}

/// Guessing (ReDMArk's QPN, PSN and rkey guessing), by a spoofer that sends
/// from the peer's address. Each identifier is exact: every wrong guess,
/// near or far, is refused. A request lands only with the right QPN (24
/// bits, drawn at random), the expected PSN (24 bits, random at connect)
/// and a valid rkey (32 bits, random) naming an address inside the region.
/// Prints the expected attempts; `docs/security.md` has the figures.
#[test]
fn guessed_identifiers_are_refused() {
    let (mut p, c, src, dst) = setup(13);
    p.put(&src, 0, &[0xee; 8]);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 8)).unwrap();
    let (meta, pkt) = p.take(A).remove(0);
    let real = RocePacketRepr::parse(&pkt).unwrap();
    let (qpn, psn, rkey) = (real.bth.dest_qp, real.bth.psn, real.ext.reth.unwrap().rkey);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Wrong QPN: nearby and random.
    let mut tried = 0u64;
    for i in 1..=2000u32 {
        let guess = if i <= 1000 { qpn ^ i } else { next() as u32 & 0x00ff_ffff };
        if guess == qpn {
            continue;
        }
        p.deliver(B, &meta, &forge(&meta, &pkt, |r| r.bth.dest_qp = guess));
        tried += 1;
    }
    assert_eq!(p.e[B].counters().unknown_qp_dropped, tried);
    // Wrong rkey, right QPN and PSN: one guess, and the responder answers
    // with a remote access NAK and ends the connection (IBTA §9.7.5.1.3, §9.9.3.1):
    // a wrong rkey costs the attacker its one chance per PSN.
    let wrong = rkey ^ (1 << (next() % 32));
    p.deliver(
        B,
        &meta,
        &forge(&meta, &pkt, |r| {
            let mut reth = r.ext.reth.unwrap();
            reth.rkey = wrong;
            r.ext.reth = Some(reth);
        }),
    );
    assert_eq!(p.get(&dst, 0, 8), vec![0; 8]);
    let out = p.take(B);
    assert_eq!(out.len(), 1);
    let nak = RocePacketRepr::parse(&out[0].1).unwrap();
    assert_eq!(nak.ext.aeth.unwrap().syndrome, Syndrome::Nak(NakCode::RemoteAccessError));
    assert_eq!(nak.bth.psn, psn);
    // Expected attempts for a blind spoofer (one QP, one region), and at
    // 10 million forged packets a second.
    let qpn_space = 2f64.powi(24);
    let psn_space = 2f64.powi(24);
    let rkey_space = 2f64.powi(32);
    let rate = 1e7;
    let all = qpn_space * psn_space * rkey_space / 2.0;
    println!(
        "expected attempts: QPN alone {:.3e}, QPN+PSN {:.3e}, QPN+PSN+rkey {:.3e}",
        qpn_space / 2.0,
        qpn_space * psn_space / 2.0,
        all
    );
    println!(
        "at {rate:.0e} packets/s: {:.1} s, {:.1} days, {:.2e} years",
        qpn_space / 2.0 / rate,
        qpn_space * psn_space / 2.0 / rate / 86400.0,
        all / rate / 86400.0 / 365.0
    );
}

fn keys(tx: u8, rx: u8) -> QpKeys {
    QpKeys {
        tx: DirectionKey { key: [tx; 16], salt: [tx; 4] },
        rx: DirectionKey { key: [rx; 16], salt: [rx; 4] },
    }
}

/// A protected connection (`Engine::set_qp_keys`): every operation works
/// under loss, no payload crosses the wire in clear, and what an on-path
/// attacker could still forge without encryption (a NAK or ACK spoofed
/// from the peer's own address, with the live PSN) fails to authenticate.
#[test]
fn protected_qp_refuses_spoofed_packets_and_hides_its_data() {
    let mut p = Pair::new(14);
    let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
    p.e[A].set_qp_keys(c.qpn[0], &keys(1, 2)).unwrap_err(); // already RTS
    let mut p = Pair::new(14);
    let qa = p.e[A].create_qp(p.qp_init(A, QpType::Rc)).unwrap();
    let qb = p.e[B].create_qp(p.qp_init(B, QpType::Rc)).unwrap();
    p.e[A].set_qp_keys(qa, &keys(1, 2)).unwrap();
    p.e[B].set_qp_keys(qb, &keys(2, 1)).unwrap();
    p.connect_qps([qa, qb], PathMtu::Mtu1024, [100, 200], |_, _| {}).unwrap();
    let src = p.region(A, 65536, 0x1000, Access::ALL);
    let dst = p.region(B, 65536, 0x10_0000, Access::ALL);
    let secret: Vec<u8> = b"the quick brown fox ".iter().cycle().take(10_000).copied().collect();
    p.put(&src, 0, &secret);
    p.put(&dst, 20_000, &secret);
    p.e[A].post_send(qa, write(1, &dst, 0, &src, 0, 10_000)).unwrap();
    let rd = SendOp::Read { remote_addr: dst.keys.addr + 20_000, rkey: dst.keys.rkey };
    p.e[A].post_send(qa, SendWr::new(2, rd, vec![sge(&src, 30_000, 10_000)])).unwrap();
    let fa = SendOp::FetchAdd { remote_addr: dst.keys.addr + 40_000, rkey: dst.keys.rkey, add: 9 };
    p.e[A].post_send(qa, SendWr::new(3, fa, vec![sge(&src, 50_000, 8)])).unwrap();
    let mut n = 0;
    p.run_with(
        |_, _| {
            n += 1;
            n % 7 != 0 // lose every seventh packet
        },
        100_000,
    );
    let w = p.poll(A);
    assert_eq!(w.len(), 3);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
    assert_eq!(p.get(&dst, 0, 10_000), secret);
    assert_eq!(p.get(&src, 30_000, 10_000), secret);
    assert_eq!(p.word(&dst, 40_000), 9);
    assert!(p.trace.len() > 20);
    for (_, pkt) in &p.trace {
        assert!(!pkt.windows(9).any(|w| w == b"quick bro"), "payload in clear on the wire");
    }
    assert!(p.e[A].counters().rcvd_seq_err + p.e[A].counters().completer_retry_err > 0, "no loss recovered");

    // Spoofed from B's own address, live PSN: refused by the tag.
    p.e[A].post_send(qa, write(4, &dst, 0, &src, 0, 8)).unwrap();
    let reqs = p.take(A);
    let psn = RocePacketRepr::parse(&reqs[0].1).unwrap().bth.psn;
    let (meta, _) = &reqs[0];
    let back = DatagramMeta {
        src: meta.dst,
        dst: meta.src,
        src_port: meta.dst_port,
        dst_port: meta.src_port,
        ..*meta
    };
    let ack_like = p.trace.iter().rev().find(|(f, b)| *f == B && b[0] == 0x11).expect("an ACK").1.clone();
    for syndrome in [Syndrome::Nak(NakCode::RemoteAccessError), Syndrome::Ack { credits: 31 }] {
        // Unprotected, as an attacker without the key would build it.
        let plain = &ack_like[..ack_like.len() - 4 - 24];
        let mut bytes = plain.to_vec();
        bytes.extend_from_slice(&[0; 4]);
        let forged = forge(&back, &bytes, |r| {
            r.bth.psn = psn;
            r.ext.aeth = Some(AethRepr { syndrome, msn: 0 });
        });
        p.deliver(A, &back, &forged);
    }
    assert_eq!(p.e[A].counters().crypto_auth_failed, 2);
    assert_eq!(p.e[A].qp_state(qa), Some(QpState::Rts));
    assert!(p.poll(A).is_empty(), "a forged ACK retired the WRITE");
    // A replayed genuine packet is dropped by sequence number.
    let old = p.trace.iter().find(|(f, _)| *f == A).expect("a request").1.clone();
    p.deliver(B, meta, &old);
    assert_eq!(p.e[B].counters().crypto_replay_dropped, 1);
    for (m, b) in &reqs {
        p.deliver(B, m, b);
    }
    p.run();
    assert_eq!(p.poll(A)[0].status, WcStatus::Success);
}

/// Keys that do not match (or one end without protection) move nothing:
/// every packet is dropped and counted, and the requester gives up after
/// its retries.
#[test]
fn mismatched_keys_fail_cleanly() {
    for b_keys in [Some(keys(2, 3)), None] {
        let mut p = Pair::new(15);
        let qa = p.e[A].create_qp(p.qp_init(A, QpType::Rc)).unwrap();
        let qb = p.e[B].create_qp(p.qp_init(B, QpType::Rc)).unwrap();
        p.e[A].set_qp_keys(qa, &keys(1, 2)).unwrap();
        if let Some(k) = &b_keys {
            p.e[B].set_qp_keys(qb, k).unwrap();
        }
        p.connect_qps([qa, qb], PathMtu::Mtu1024, [100, 200], |_, _| {}).unwrap();
        let src = p.region(A, 4096, 0x1000, Access::ALL);
        let dst = p.region(B, 4096, 0x10_0000, Access::ALL);
        p.put(&src, 0, &[3; 64]);
        p.e[A].post_send(qa, write(1, &dst, 0, &src, 0, 64)).unwrap();
        p.run();
        assert_eq!(p.poll(A)[0].status, WcStatus::RetryExcErr);
        assert_eq!(p.get(&dst, 0, 64), vec![0; 64]);
        // A protected B drops A's packets (wrong key); an unprotected B
        // takes them for plain ones whose lengths are wrong and NAKs, and A
        // drops B's unprotected answers.
        let (a, b) = (p.e[A].counters(), p.e[B].counters());
        match b_keys {
            Some(_) => assert!(b.crypto_auth_failed > 0, "{b:?}"),
            None => {
                assert!(b.send_nak_err + b.malformed_dropped > 0 && a.crypto_auth_failed > 0, "{a:?} {b:?}")
            }
        }
    }
}
