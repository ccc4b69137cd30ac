//! Directed tests, one per IBTA rule the engine implements.

use roce_proto::testkit::*;
use roce_proto::*;
use roce_wire::{Psn, RocePacket, RocePacketRepr};

fn opcode(pkt: &[u8]) -> u8 {
    pkt[0]
}
fn psn_of(pkt: &[u8]) -> u32 {
    u32::from_be_bytes([0, pkt[9], pkt[10], pkt[11]])
}

fn write(id: u64, dst: &Region, off: u64, src: &Region, soff: u64, len: u32) -> SendWr {
    SendWr::new(
        id,
        SendOp::Write { remote_addr: dst.keys.addr + off, rkey: dst.keys.rkey },
        vec![sge(src, soff, len)],
    )
}

fn statuses(w: &[Wc]) -> Vec<(u64, WcStatus)> {
    w.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// §9.7.5.1.2: a duplicate atomic is answered from the saved result and
/// never executed again.
#[test]
fn duplicate_atomic_is_replayed_not_reexecuted() {
    let mut p = Pair::new(11);
    let c = p.connect(PathMtu::Mtu1024, [10, 20], |_| {});
    let loc = p.region(A, 4096, 0x1000, Access::ALL);
    let rem = p.region(B, 4096, 0x8000, Access::ALL);
    p.put(&rem, 64, &1000u64.to_ne_bytes());
    let wr = SendWr::new(
        9,
        SendOp::FetchAdd { remote_addr: rem.keys.addr + 64, rkey: rem.keys.rkey, add: 5 },
        vec![sge(&loc, 0, 8)],
    );
    p.e[A].post_send(c.qpn[0], wr).unwrap();
    let mut dropped = false;
    // Lose the first atomic ACK: the requester times out and resends.
    p.run_with(
        |from, pkt| {
            if from == B && opcode(pkt) == 0x12 && !dropped {
                dropped = true;
                return false;
            }
            true
        },
        1000,
    );
    assert!(dropped);
    assert_eq!(statuses(&p.poll(A)), vec![(9, WcStatus::Success)]);
    assert_eq!(p.word(&rem, 64), 1005, "executed exactly once");
    assert_eq!(p.word(&loc, 0), 1000, "original value returned");
    assert_eq!(p.e[B].counters().duplicate_request, 1);
    assert!(p.e[A].counters().completer_retry_err >= 1);
}

/// §9.7.5.1.1 / §9.7.5.2.5: a lost packet makes the responder NAK the next
/// one with a PSN sequence error; the requester goes back to the NAK's PSN.
#[test]
fn sequence_nak_recovers_without_timeout() {
    let mut p = Pair::new(12);
    let c = p.connect(PathMtu::Mtu256, [500, 600], |_| {});
    let src = p.region(A, 8192, 0x1000, Access::ALL);
    let dst = p.region(B, 8192, 0x9000, Access::ALL);
    let data: Vec<u8> = (0..4000u32).map(|i| (i * 7) as u8).collect();
    p.put(&src, 0, &data);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 4000)).unwrap();
    let mut n = 0;
    p.run_with(
        |from, _| {
            if from == A {
                n += 1;
                return n != 3; // lose the third request packet once
            }
            true
        },
        1000,
    );
    assert_eq!(statuses(&p.poll(A)), vec![(1, WcStatus::Success)]);
    assert_eq!(&p.mem(&dst)[..4000], &data[..]);
    let naks = p.trace.iter().filter(|(f, b)| *f == B && b[0] == 0x11 && b[12] == 0x60).count();
    assert_eq!(naks, 1, "one NAK per gap, later packets dropped silently");
    assert!(p.e[B].counters().out_of_seq_request >= 1);
    assert_eq!(p.e[A].counters().rcvd_seq_err, 1);
    assert_eq!(p.e[A].counters().completer_retry_err, 0, "recovered by NAK, not by timeout");
    // The NAK carried the PSN of the lost packet (expected PSN).
    let nak = p.trace.iter().find(|(f, b)| *f == B && b[0] == 0x11 && b[12] == 0x60).expect("a NAK");
    assert_eq!(psn_of(&nak.1), 502);
}

/// §9.7.5.2.8: RNR NAKs are retried rnr_retry times, then the WR completes
/// with RNR_RETRY_EXC_ERR, the QP enters ERR and later WRs are flushed.
#[test]
fn rnr_retry_exhaustion_errors_and_flushes() {
    let mut p = Pair::new(13);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |a| a.rnr_retry = 2);
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    p.e[A].post_send(c.qpn[0], SendWr::new(1, SendOp::Send, vec![sge(&src, 0, 100)])).unwrap();
    let mut second = SendWr::new(2, SendOp::Send, vec![sge(&src, 0, 100)]);
    second.signaled = false; // errors complete whatever the flag
    p.e[A].post_send(c.qpn[0], second).unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(p.e[A].qp_state(c.qpn[0]), Some(QpState::Err));
    assert_eq!(p.e[A].counters().rcvd_rnr_err, 3, "initial try + 2 retries");
    assert_eq!(p.e[B].counters().send_rnr_err, 3);
    assert_eq!(p.e[A].counters().retry_rnr_exceeded_err, 1);
    // Posting to a QP in ERR completes at once with a flush error.
    p.e[A].post_send(c.qpn[0], SendWr::new(3, SendOp::Send, vec![])).unwrap();
    assert_eq!(statuses(&p.poll(A)), vec![(3, WcStatus::WrFlushErr)]);
}

/// RNR back-off waits the timer of Table 45 and then succeeds once a
/// receive is posted (rnr_retry 7 = retry forever).
#[test]
fn rnr_backoff_then_success() {
    let mut p = Pair::new(14);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |a| a.min_rnr_timer = 14); // 1.28 ms
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    p.e[A].post_send(c.qpn[0], SendWr::new(1, SendOp::Send, vec![sge(&src, 0, 100)])).unwrap();
    p.run_with(|_, _| true, 2); // SEND, RNR NAK
    assert_eq!(p.e[A].counters().rcvd_rnr_err, 1);
    let t0 = p.now;
    p.e[B].post_recv(c.qpn[1], RecvWr { wr_id: 5, sg_list: vec![sge(&dst, 0, 200)] }).unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(1, WcStatus::Success)]);
    assert_eq!(statuses(&p.poll(B)), vec![(5, WcStatus::Success)]);
    assert!(p.now - t0 >= Duration::from_micros(1280), "waited the RNR timer");
}

/// §9.7.6.1.3: with no response, the local ACK timeout retries retry_cnt
/// times, then RETRY_EXC_ERR; every other WR is flushed, one CQE each.
#[test]
fn retry_exhaustion_moves_to_error_with_flushes() {
    let mut p = Pair::new(15);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |a| {
        a.retry_cnt = 3;
        a.timeout = 8;
    });
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    for i in 0..4 {
        let mut wr = write(i, &dst, 0, &src, 0, 100);
        wr.signaled = i % 2 == 0;
        p.e[A].post_send(c.qpn[0], wr).unwrap();
    }
    p.run_with(|from, _| from != A, 100_000); // the link to B is dead
    let w = p.poll(A);
    assert_eq!(
        statuses(&w),
        vec![
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.e[A].counters().completer_retry_err, 3);
    assert_eq!(p.e[A].counters().retry_exceeded_err, 1);
    assert_eq!(p.e[A].qp_state(c.qpn[0]), Some(QpState::Err));
    assert!(p.now >= Instant::ZERO + Duration::from_nanos(4 * (4096 << 8)), "four timeouts elapsed");
    assert_eq!(p.e[A].poll_timeout(), None, "no timers left in ERR");
}

/// PSNs are 24 bits: a message crossing 2^24 - 1 -> 0 is carried intact.
#[test]
fn psn_wraps_at_2_pow_24() {
    let mut p = Pair::new(16);
    let c = p.connect(PathMtu::Mtu256, [0xff_fffd, 0xff_fffe], |_| {});
    let src = p.region(A, 8192, 0x1000, Access::ALL);
    let dst = p.region(B, 8192, 0x9000, Access::ALL);
    let data: Vec<u8> = (0..2000u32).map(|i| (i ^ (i >> 3)) as u8).collect();
    p.put(&src, 0, &data);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 2000)).unwrap();
    p.e[A]
        .post_send(
            c.qpn[0],
            SendWr::new(
                2,
                SendOp::Read { remote_addr: dst.keys.addr, rkey: dst.keys.rkey },
                vec![sge(&src, 4096, 2000)],
            ),
        )
        .unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(&p.mem(&src)[4096..6096], &data[..]);
    let psns: Vec<u32> = p.trace.iter().filter(|(f, _)| *f == A).map(|(_, b)| psn_of(b)).collect();
    assert_eq!(&psns[..5], &[0xff_fffd, 0xff_fffe, 0xff_ffff, 0, 1]);
    let q = p.e[A].query_qp(c.qpn[0]).unwrap();
    assert_eq!(q.sq_psn, Psn::new(0xff_fffd).add(8 + 8), "8 WRITE packets + 8 READ response PSNs");
}

/// §9.7.5.1.3 / §10.6.3.3: R_Key, PD, bounds and access rights are checked;
/// any failure is a Remote Access Error NAK, both QPs end in ERR.
#[test]
fn remote_access_errors() {
    #[derive(Debug, Clone, Copy)]
    enum Case {
        BadRkey,
        WrongPd,
        OutOfBounds,
        NoRemoteWrite,
        NoRemoteRead,
        NoRemoteAtomic,
    }
    for case in [
        Case::BadRkey,
        Case::WrongPd,
        Case::OutOfBounds,
        Case::NoRemoteWrite,
        Case::NoRemoteRead,
        Case::NoRemoteAtomic,
    ] {
        let mut p = Pair::new(17);
        let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
        let src = p.region(A, 4096, 0x1000, Access::ALL);
        let access = match case {
            Case::NoRemoteWrite => Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            Case::NoRemoteRead => Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC,
            Case::NoRemoteAtomic => Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            _ => Access::ALL,
        };
        let dst = if let Case::WrongPd = case {
            let other = p.e[B].alloc_pd();
            let buf = MemBuf::new(4096);
            let keys = p.e[B]
                .reg_mr(
                    other,
                    MrSpec { buf: buf.clone(), offset: 0, length: 4096, iova: Some(0x9000), access },
                )
                .unwrap();
            Region { side: B, buf, keys }
        } else {
            p.region(B, 4096, 0x9000, access)
        };
        let (rkey, addr) = match case {
            Case::BadRkey => (dst.keys.rkey ^ 0x5a5a, dst.keys.addr),
            Case::OutOfBounds => (dst.keys.rkey, dst.keys.addr + 4000),
            _ => (dst.keys.rkey, dst.keys.addr),
        };
        let op = match case {
            Case::NoRemoteRead => SendOp::Read { remote_addr: addr, rkey },
            Case::NoRemoteAtomic => SendOp::FetchAdd { remote_addr: addr, rkey, add: 1 },
            _ => SendOp::Write { remote_addr: addr, rkey },
        };
        let len = if matches!(case, Case::NoRemoteAtomic) { 8 } else { 200 };
        p.e[A].post_send(c.qpn[0], SendWr::new(1, op, vec![sge(&src, 0, len)])).unwrap();
        p.e[A].post_send(c.qpn[0], SendWr::new(2, SendOp::Send, vec![])).unwrap();
        p.run();
        assert_eq!(
            statuses(&p.poll(A)),
            vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)],
            "{case:?}"
        );
        assert_eq!(p.e[A].qp_state(c.qpn[0]), Some(QpState::Err), "{case:?}");
        assert_eq!(p.e[B].qp_state(c.qpn[1]), Some(QpState::Err), "{case:?}");
        assert_eq!(p.mem(&dst), vec![0u8; 4096], "{case:?}: nothing written");
    }
}

/// A SEND longer than the receive buffer: Invalid Request NAK to the
/// requester, local length error on the receive WQE.
#[test]
fn send_longer_than_receive_buffer() {
    let mut p = Pair::new(18);
    let c = p.connect(PathMtu::Mtu256, [1, 2], |_| {});
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    p.e[B].post_recv(c.qpn[1], RecvWr { wr_id: 7, sg_list: vec![sge(&dst, 0, 300)] }).unwrap();
    p.e[A].post_send(c.qpn[0], SendWr::new(1, SendOp::Send, vec![sge(&src, 0, 1000)])).unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(1, WcStatus::RemInvReqErr)]);
    assert_eq!(statuses(&p.poll(B)), vec![(7, WcStatus::LocLenErr)]);
}

/// §11.4.2.1: one completion more than the CQ holds is an overflow: the CQ
/// is in error and CQ_ERR is raised.
#[test]
fn cq_overflow() {
    let mut p = Pair::new(19);
    p.cq[A] = p.e[A].create_cq(2).unwrap();
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    for i in 0..3 {
        p.e[A].post_send(c.qpn[0], write(i, &dst, 0, &src, 0, 10)).unwrap();
    }
    p.run();
    let mut out = [Wc::EMPTY; 4];
    assert_eq!(p.e[A].poll_cq(p.cq[A], &mut out), Err(VerbsError::CqOverflow));
    let mut events = Vec::new();
    while let Some(e) = p.e[A].poll_event() {
        events.push(e);
    }
    assert!(events.contains(&AsyncEvent::CqErr(p.cq[A])), "{events:?}");
}

/// Zero-length operations: no R_Key is checked (C9-88), a SEND consumes a
/// receive and completes with 0 bytes, READ and WRITE with imm work.
#[test]
fn zero_length_operations() {
    let mut p = Pair::new(20);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    p.e[B].post_recv(c.qpn[1], RecvWr { wr_id: 50, sg_list: vec![] }).unwrap();
    p.e[B].post_recv(c.qpn[1], RecvWr { wr_id: 51, sg_list: vec![] }).unwrap();
    p.e[A].post_send(c.qpn[0], SendWr::new(1, SendOp::Send, vec![])).unwrap();
    p.e[A]
        .post_send(c.qpn[0], SendWr::new(2, SendOp::Write { remote_addr: 0xdead, rkey: 0xbad }, vec![]))
        .unwrap();
    p.e[A]
        .post_send(c.qpn[0], SendWr::new(3, SendOp::Read { remote_addr: 0xdead, rkey: 0xbad }, vec![]))
        .unwrap();
    p.e[A]
        .post_send(
            c.qpn[0],
            SendWr::new(
                4,
                SendOp::WriteWithImm { remote_addr: dst.keys.addr, rkey: dst.keys.rkey, imm: 42 },
                vec![],
            ),
        )
        .unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), (1..=4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>());
    let wb = p.poll(B);
    assert_eq!(wb.len(), 2);
    assert_eq!((wb[0].wr_id, wb[0].byte_len, wb[0].opcode), (50, 0, WcOpcode::Recv));
    assert_eq!(
        (wb[1].wr_id, wb[1].byte_len, wb[1].opcode, wb[1].imm_data),
        (51, 0, WcOpcode::RecvRdmaWithImm, 42)
    );
}

/// Only signalled WRs complete on success; every WR completes exactly once.
#[test]
fn one_completion_per_signalled_wr() {
    let mut p = Pair::new(21);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    for i in 0..10 {
        let mut wr = write(i, &dst, 0, &src, 0, 100);
        wr.signaled = i % 3 == 0;
        p.e[A].post_send(c.qpn[0], wr).unwrap();
    }
    p.run();
    assert_eq!(
        statuses(&p.poll(A)),
        [0, 3, 6, 9].iter().map(|&i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(p.e[A].sq_outstanding(c.qpn[0]), 0);
}

/// SEND with Invalidate makes the named R_Key unusable (§10.6.6.2).
#[test]
fn send_with_invalidate() {
    let mut p = Pair::new(22);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    let target = p.region(B, 4096, 0x20000, Access::ALL);
    p.e[B].post_recv(c.qpn[1], RecvWr { wr_id: 8, sg_list: vec![sge(&dst, 0, 64)] }).unwrap();
    p.e[A]
        .post_send(
            c.qpn[0],
            SendWr::new(1, SendOp::SendWithInv { rkey: target.keys.rkey }, vec![sge(&src, 0, 16)]),
        )
        .unwrap();
    p.run();
    let wb = p.poll(B);
    assert_eq!(wb[0].wc_flags & WC_WITH_INV, WC_WITH_INV);
    assert_eq!(wb[0].imm_data, target.keys.rkey);
    p.e[A].post_send(c.qpn[0], write(2, &target, 0, &src, 0, 16)).unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]);
}

/// The initiator depth max_rd_atomic bounds outstanding READs (§9.5).
#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let mut p = Pair::new(23);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |a| a.max_rd_atomic = 1);
    let loc = p.region(A, 8192, 0x1000, Access::ALL);
    let rem = p.region(B, 8192, 0x9000, Access::ALL);
    for i in 0..3u64 {
        p.e[A]
            .post_send(
                c.qpn[0],
                SendWr::new(
                    i,
                    SendOp::Read { remote_addr: rem.keys.addr, rkey: rem.keys.rkey },
                    vec![sge(&loc, i * 100, 100)],
                ),
            )
            .unwrap();
    }
    p.run();
    assert_eq!(p.poll(A).len(), 3);
    // In the trace, requests and responses alternate.
    let ops: Vec<u8> = p.trace.iter().map(|(_, b)| b[0]).collect();
    assert_eq!(ops, vec![0x0c, 0x10, 0x0c, 0x10, 0x0c, 0x10]);
}

/// ibv_modify_qp's attribute table: missing or extra attributes and
/// impossible transitions are refused; values are range-checked.
#[test]
fn modify_qp_checks_attributes() {
    let mut p = Pair::new(24);
    let q = p.e[A].create_qp(p.qp_init(A, QpType::Rc)).unwrap();
    let mut a = QpAttr { qp_state: QpState::Init, ..QpAttr::default() };
    // RESET -> INIT without ACCESS_FLAGS
    assert!(matches!(
        p.e[A].modify_qp(q, &a, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT),
        Err(VerbsError::MissingAttrs(AttrMask::ACCESS_FLAGS))
    ));
    // RESET -> RTS is not a transition
    a.qp_state = QpState::Rts;
    assert!(matches!(p.e[A].modify_qp(q, &a, AttrMask::STATE), Err(VerbsError::BadState(QpState::Reset))));
    // an extra attribute (QKEY is UD-only)
    a.qp_state = QpState::Init;
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    assert_eq!(p.e[A].modify_qp(q, &a, m | AttrMask::QKEY), Err(VerbsError::UnexpectedAttrs(AttrMask::QKEY)));
    p.e[A].modify_qp(q, &a, m).unwrap();
    // INIT -> RTR with retry values out of range is not even the right mask
    a.qp_state = QpState::Rtr;
    a.av = AddressVector::new(p.ip[B]);
    a.max_dest_rd_atomic = 200;
    let rtr = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    assert_eq!(p.e[A].modify_qp(q, &a, rtr), Err(Invalid::MaxDestRdAtomic(200).into()));
    a.max_dest_rd_atomic = 4;
    a.av = AddressVector::new("fe80::1".parse().unwrap());
    assert!(
        p.e[A].modify_qp(q, &a, rtr) == Err(Invalid::MixedIpFamilies.into()),
        "IPv6 peer from an IPv4 GID"
    );
    a.av = AddressVector::new(p.ip[B]);
    p.e[A].modify_qp(q, &a, rtr).unwrap();
    assert_eq!(p.e[A].qp_state(q), Some(QpState::Rtr));
    // posting sends before RTS is an error
    assert!(matches!(
        p.e[A].post_send(q, SendWr::new(1, SendOp::Send, vec![])),
        Err(VerbsError::BadState(QpState::Rtr))
    ));
    // any state -> ERR, then -> RESET
    a.qp_state = QpState::Err;
    p.e[A].modify_qp(q, &a, AttrMask::STATE).unwrap();
    a.qp_state = QpState::Reset;
    p.e[A].modify_qp(q, &a, AttrMask::STATE).unwrap();
    assert_eq!(p.e[A].qp_state(q), Some(QpState::Reset));
}

/// UD: a datagram reaches the QP whose Q_Key matches, with the GRH in front
/// and the source QP in the completion; a wrong Q_Key is dropped (§10.2.5).
#[test]
fn ud_send_and_qkey() {
    let mut p = Pair::new(25);
    let qa = p.ud_qp(A, |_| {}, 0x1111_0000, 0);
    let qb = p.ud_qp(B, |_| {}, 0x1111_0001, 0);
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    p.put(&src, 0, b"hello, datagram");
    p.e[B].post_recv(qb, RecvWr { wr_id: 1, sg_list: vec![sge(&dst, 0, 1000)] }).unwrap();
    let dest = |qkey| UdDest { av: AddressVector::new(p.ip[B]), remote_qpn: qb, remote_qkey: qkey };
    let mut wr = SendWr::new(10, SendOp::SendWithImm { imm: 3 }, vec![sge(&src, 0, 15)]);
    wr.ud = Some(dest(0x1111_0001));
    p.e[A].post_send(qa, wr.clone()).unwrap();
    wr.wr_id = 11;
    wr.ud = Some(dest(0x2222_0000));
    p.e[A].post_send(qa, wr).unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(10, WcStatus::Success), (11, WcStatus::Success)]);
    let wb = p.poll(B);
    assert_eq!(wb.len(), 1);
    assert_eq!((wb[0].byte_len, wb[0].src_qp, wb[0].imm_data), (40 + 15, qa, 3));
    assert_eq!(wb[0].wc_flags & (WC_GRH | WC_WITH_IMM), WC_GRH | WC_WITH_IMM);
    let got = p.mem(&dst);
    assert_eq!(&got[40..55], b"hello, datagram");
    assert_eq!(&got[20 + 12..20 + 16], &[10, 0, 0, 1], "IPv4 source in the GRH area");
    // IPv4 total length: IPv4 + UDP + BTH + DETH + ImmDt + 15 + pad 1 + ICRC.
    let total = u16::from_be_bytes([got[22], got[23]]);
    assert_eq!(total, 20 + 8 + 12 + 8 + 4 + 15 + 1 + 4, "the GRH area's IPv4 length counts the ImmDt");
    assert_eq!(p.e[B].counters().qkey_violation_dropped, 1);
}

/// An SRQ feeds several QPs; the limit event fires when it runs low.
#[test]
fn srq_shared_by_two_qps() {
    let mut p = Pair::new(26);
    let srq = p.e[B].create_srq(p.pd[B], 16, 1).unwrap();
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    for i in 0..4 {
        p.e[B].post_srq_recv(srq, RecvWr { wr_id: 100 + i, sg_list: vec![sge(&dst, i * 100, 100)] }).unwrap();
    }
    p.e[B].arm_srq_limit(srq, 3).unwrap();
    // two connections whose B side uses the SRQ
    let mut conns = Vec::new();
    for _ in 0..2 {
        let qa = p.e[A].create_qp(p.qp_init(A, QpType::Rc)).unwrap();
        let mut init_b = p.qp_init(B, QpType::Rc);
        init_b.srq = Some(srq);
        let qb = p.e[B].create_qp(init_b).unwrap();
        conns.push([qa, qb]);
    }
    for [qa, qb] in &conns {
        for (s, q, o) in [(A, *qa, *qb), (B, *qb, *qa)] {
            let av = AddressVector::new(p.ip[1 - s]);
            let c = ConnectAttr {
                max_dest_rd_atomic: 1,
                max_rd_atomic: 1,
                timeout: 10,
                ..ConnectAttr::new(av, o, Psn::ZERO, Psn::ZERO)
            };
            p.e[s].connect_qp(q, &c).unwrap();
        }
    }
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    p.e[A].post_send(conns[0][0], SendWr::new(1, SendOp::Send, vec![sge(&src, 0, 10)])).unwrap();
    p.e[A].post_send(conns[1][0], SendWr::new(2, SendOp::Send, vec![sge(&src, 0, 20)])).unwrap();
    p.run();
    let wb = p.poll(B);
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.qp_num, w.byte_len)).collect::<Vec<_>>(),
        vec![(100, conns[0][1], 10), (101, conns[1][1], 20)]
    );
    let mut ev = Vec::new();
    while let Some(e) = p.e[B].poll_event() {
        ev.push(e);
    }
    assert_eq!(ev, vec![AsyncEvent::SrqLimitReached(srq)]);
}

/// A message longer than the send window is acknowledged packet by packet
/// (AckReq every `ack_req_every` packets) and the window slides inside it.
#[test]
fn message_longer_than_the_window() {
    let mut p = Pair::new(27);
    let c = p.connect(PathMtu::Mtu256, [1, 2], |_| {});
    let src = p.region(A, 1 << 17, 0x1000_0000, Access::ALL);
    let dst = p.region(B, 1 << 17, 0x2000_0000, Access::ALL);
    let data: Vec<u8> = (0..1u32 << 17).map(|i| (i * 11) as u8).collect();
    p.put(&src, 0, &data);
    // 512 packets at MTU 256, twice the default window of 256 PSNs.
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 1 << 17)).unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mem(&dst), data);
    assert_eq!(p.e[A].counters().completer_retry_err, 0, "no timeout needed");
    assert_eq!(p.now, Instant::ZERO, "no timer ever fired");
}

/// A requester that exceeds the responder's max_dest_rd_atomic gets an
/// Invalid Request NAK (the responder's resources are bounded, §9.5).
#[test]
fn responder_resources_are_bounded() {
    let mut p = Pair::new(28);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |a| {
        a.max_rd_atomic = 4;
        a.max_dest_rd_atomic = 1;
    });
    let loc = p.region(A, 8192, 0x1000, Access::ALL);
    let rem = p.region(B, 8192, 0x9000, Access::ALL);
    for i in 0..4u64 {
        let op = SendOp::Read { remote_addr: rem.keys.addr, rkey: rem.keys.rkey };
        p.e[A].post_send(c.qpn[0], SendWr::new(i, op, vec![sge(&loc, i * 100, 100)])).unwrap();
    }
    p.run();
    let w = p.poll(A);
    assert_eq!(w[0].status, WcStatus::Success);
    assert_eq!(w[1].status, WcStatus::RemInvReqErr);
    assert!(w[2..].iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!(p.e[B].qp_state(c.qpn[1]), Some(QpState::Err));
}

/// SQD: the send queue stops at a message boundary, SQ_DRAINED is raised,
/// and SQD -> RTS resumes (ibv_modify_qp with just IBV_QP_STATE).
#[test]
fn sqd_drains_then_resumes() {
    let mut p = Pair::new(29);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
    let src = p.region(A, 8192, 0x1000, Access::ALL);
    let dst = p.region(B, 8192, 0x9000, Access::ALL);
    let a = QpAttr { qp_state: QpState::Sqd, ..QpAttr::default() };
    p.e[A].modify_qp(c.qpn[0], &a, AttrMask::STATE).unwrap();
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 100)).unwrap();
    p.run();
    assert!(p.poll(A).is_empty(), "nothing sent while drained");
    let mut ev = Vec::new();
    while let Some(e) = p.e[A].poll_event() {
        ev.push(e);
    }
    assert_eq!(ev, vec![AsyncEvent::SqDrained(c.qpn[0])]);
    let a = QpAttr { qp_state: QpState::Rts, ..QpAttr::default() };
    p.e[A].modify_qp(c.qpn[0], &a, AttrMask::STATE).unwrap();
    // RTS -> RTS with only the state named is allowed too.
    p.e[A].modify_qp(c.qpn[0], &a, AttrMask::STATE).unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(1, WcStatus::Success)]);
}

/// A remote range that wraps past 2^64 is refused at post time.
#[test]
fn remote_range_overflow_is_refused() {
    let mut p = Pair::new(30);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
    let loc = p.region(A, 8192, 0x1000, Access::ALL);
    let op = SendOp::Read { remote_addr: u64::MAX - 100, rkey: 1 };
    assert!(matches!(
        p.e[A].post_send(c.qpn[0], SendWr::new(1, op, vec![sge(&loc, 0, 1000)])),
        Err(VerbsError::Invalid(Invalid::RemoteRangeOverflow))
    ));
}

/// UC (IBTA §9.8): no ACKs, completion once sent; a lost packet drops the
/// rest of its message at the responder, which resumes at the next First or
/// Only packet.
#[test]
fn uc_write_and_send_and_a_lost_packet() {
    let mut p = Pair::new(31);
    let qpn = [
        p.e[A].create_qp(p.qp_init(A, QpType::Uc)).unwrap(),
        p.e[B].create_qp(p.qp_init(B, QpType::Uc)).unwrap(),
    ];
    for s in [A, B] {
        let c = ConnectAttr {
            mtu: PathMtu::Mtu256,
            ..ConnectAttr::new(AddressVector::new(p.ip[1 - s]), qpn[1 - s], Psn::new(50), Psn::new(50))
        };
        p.e[s].connect_qp(qpn[s], &c).unwrap();
    }
    let src = p.region(A, 8192, 0x1000, Access::ALL);
    let dst = p.region(B, 8192, 0x9000, Access::ALL);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 5) as u8).collect();
    p.put(&src, 0, &data);
    // READ is not a UC operation.
    let read = SendOp::Read { remote_addr: dst.keys.addr, rkey: dst.keys.rkey };
    assert_eq!(
        p.e[A].post_send(qpn[0], SendWr::new(9, read, vec![])),
        Err(Invalid::OpNotSupported { op: read, qp_type: QpType::Uc }.into())
    );
    p.e[B].post_recv(qpn[1], RecvWr { wr_id: 70, sg_list: vec![sge(&dst, 4096, 1000)] }).unwrap();
    p.e[A].post_send(qpn[0], write(1, &dst, 0, &src, 0, 1000)).unwrap(); // 4 packets, the 2nd lost
    p.e[A].post_send(qpn[0], write(2, &dst, 2000, &src, 1000, 500)).unwrap();
    p.e[A].post_send(qpn[0], SendWr::new(3, SendOp::Send, vec![sge(&src, 2000, 700)])).unwrap();
    let mut n = 0;
    p.run_with(
        |from, _| {
            n += 1;
            !(from == A && n == 2)
        },
        1000,
    );
    // The requester completes every WR once sent; nothing is acknowledged.
    assert_eq!(statuses(&p.poll(A)), (1..=3).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>());
    assert!(p.trace.iter().all(|(f, _)| *f == A), "UC responders send nothing");
    let got = p.mem(&dst);
    assert_eq!(&got[..256], &data[..256], "the first packet of the broken WRITE landed");
    assert_eq!(&got[256..1000], &vec![0u8; 744][..], "the rest of the broken WRITE was dropped");
    assert_eq!(&got[2000..2500], &data[1000..1500], "the next WRITE landed whole");
    let wb = p.poll(B);
    assert_eq!(wb.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), vec![(70, 700)]);
    assert_eq!(&got[4096..4796], &data[2000..2700]);
}

/// An unsignalled message asks for no ACK of its own (IBTA leaves AckReq to
/// the requester); when nothing follows it, the ACK timer solicits one by
/// resending with AckReq, and that does not count as a transport retry.
#[test]
fn unsignalled_tail_is_acknowledged_without_spending_retries() {
    let mut p = Pair::new(32);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |a| a.retry_cnt = 0);
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x9000, Access::ALL);
    let mut wr = write(1, &dst, 0, &src, 0, 100);
    wr.signaled = false;
    p.e[A].post_send(c.qpn[0], wr).unwrap();
    p.run();
    let first = &p.trace[0].1;
    assert_eq!(first[8] & 0x80, 0, "no AckReq on an unsignalled message");
    assert!(p.poll(A).is_empty());
    assert_eq!(p.e[A].sq_outstanding(c.qpn[0]), 0, "acknowledged after the solicit");
    assert_eq!(p.e[A].qp_state(c.qpn[0]), Some(QpState::Rts), "retry_cnt 0 was not spent");
    assert_eq!(p.e[A].counters().completer_retry_err, 0);
}

/// A lost READ response is asked for alone (§9.7.5.2.4 lets the requester
/// ask for any part of a READ again): the responses behind the gap are
/// placed where their PSNs say, and one request asks for the one missing
/// packet, not for the rest of both READs, which a responder that serves
/// a repeated READ after what it was sending (rxe does) would send twice.
/// One response of the first of two 8-packet READs is lost.
#[test]
fn a_lost_read_response_is_asked_for_alone() {
    let mut p = Pair::new(41);
    let (a_mem, b_mem) = (
        p.region(A, 1 << 16, 0x1000_0000, Access::LOCAL_WRITE),
        p.region(B, 1 << 16, 0x2000_0000, Access::LOCAL_WRITE | Access::REMOTE_READ),
    );
    let pattern: Vec<u8> = (0..1u32 << 16).map(|i| (i * 7 + 1) as u8).collect();
    p.put(&b_mem, 0, &pattern);
    let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
    for (i, off) in [0u64, 8192].into_iter().enumerate() {
        let op = SendOp::Read { remote_addr: b_mem.keys.addr + off, rkey: b_mem.keys.rkey };
        p.e[A].post_send(c.qpn[0], SendWr::new(i as u64 + 1, op, vec![sge(&a_mem, off, 8192)])).unwrap();
    }
    let mut responses = 0;
    p.run_with(
        |from, b| {
            if from == B && (0x0d..=0x0f).contains(&b[0]) {
                responses += 1;
                return responses != 3;
            }
            true
        },
        10_000,
    );
    let wcs: Vec<_> = p.poll(A).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wcs, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let got = p.get(&a_mem, 0, 16384);
    assert!(got == pattern[..16384], "READ data differs");
    let requests: Vec<_> = p
        .trace
        .iter()
        .filter(|(from, b)| *from == A && b[0] == 0x0c)
        .map(|(_, b)| {
            let v = RocePacket::new_checked(&b[..]).expect("packet");
            let r = RocePacketRepr::parse_view(&v).expect("parses");
            (r.bth.psn.value(), r.ext.reth.expect("RETH"))
        })
        .collect();
    assert_eq!(requests.len(), 3, "2 READs, then the missing packet: {requests:?}");
    let (psn, reth) = requests[2];
    assert_eq!(psn, 102, "the lost response's PSN");
    assert_eq!((reth.va, reth.dma_len), (b_mem.keys.addr + 2048, 1024), "its bytes only");
    let a = p.e[A].counters();
    assert_eq!((a.completer_retry_err, a.read_tail_rerequests), (0, 0), "recovered without a timer");
    assert_eq!(a.read_placed_past_gap, 13, "every response behind the gap was kept");
    assert_eq!((a.read_gap_rerequests, a.out_of_seq_response), (1, 0));
    assert_eq!(p.e[B].counters().duplicate_request, 1);
}

/// ibverbs' inline sends: the caller's bytes go out, whatever memory the
/// SGEs name (no region needs to cover it), and must be as long as the
/// SGEs say.
#[test]
fn inline_send_takes_the_callers_bytes() {
    let mut p = Pair::new(41);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
    let rem = p.region(B, 4096, 0x8000, Access::ALL);
    let unregistered = Sge { addr: 0xdead_0000, length: 5, lkey: 0 };
    let wr = |id| {
        SendWr::new(
            id,
            SendOp::Write { remote_addr: rem.keys.addr + 8, rkey: rem.keys.rkey },
            vec![unregistered],
        )
    };
    // Without the bytes, the engine gathers from regions: none covers it.
    let mut plain = wr(1);
    plain.inline = true;
    assert_eq!(p.e[A].post_send(c.qpn[0], plain), Err(VerbsError::LocalProtection));
    assert_eq!(
        p.e[A].post_send_inline(c.qpn[0], wr(2), b"toolong"),
        Err(Invalid::InlineDataLength { given: 7, length: 5 }.into())
    );
    p.e[A].post_send_inline(c.qpn[0], wr(3), b"hello").unwrap();
    p.run();
    assert_eq!(statuses(&p.poll(A)), vec![(3, WcStatus::Success)]);
    assert_eq!(p.get(&rem, 8, 5), b"hello");
}
