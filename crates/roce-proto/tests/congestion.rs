//! Congestion notification (Annex A17.9.3; DCQCN's notification point):
//! CE-marked packets of a connected QP are answered with CNPs to the
//! sender's QP, at most one per `min_interval`.

use roce_proto::testkit::*;
use roce_proto::*;
use roce_wire::RocePacketRepr;

fn write(id: u64, dst: &Region, src: &Region, len: u32) -> SendWr {
    SendWr::new(id, SendOp::Write { remote_addr: dst.keys.addr, rkey: dst.keys.rkey }, vec![sge(src, 0, len)])
}

#[test]
fn ce_marks_are_answered_with_spaced_cnps() {
    let mut p = Pair::new(21);
    let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
    let src = p.region(A, 65536, 0x1000, Access::ALL);
    let dst = p.region(B, 65536, 0x10_0000, Access::ALL);
    p.e[A].post_send(c.qpn[0], write(1, &dst, &src, 16 * 1024)).unwrap();
    let reqs = p.take(A);
    assert_eq!(reqs.len(), 16);
    let gap = p.e[B].config().cnp.min_interval;
    // All 16 arrive CE-marked within one interval: one CNP.
    for (m, b) in &reqs[..8] {
        p.deliver(B, &DatagramMeta { ecn: 3, ..*m }, b);
    }
    let out = p.take(B);
    let cnps: Vec<_> = out.iter().filter(|(_, b)| b[0] == 0x81).collect();
    assert_eq!(cnps.len(), 1, "{} packets", out.len());
    let (meta, cnp) = cnps[0];
    assert_eq!(cnp.len(), 12 + 16 + 4, "BTH, 16 reserved bytes, ICRC");
    let r = RocePacketRepr::parse(cnp).unwrap();
    assert_eq!(r.bth.dest_qp, c.qpn[0], "to the sender's QP");
    assert!(r.bth.becn && !r.bth.ack_req && r.bth.psn.value() == 0);
    assert!(cnp[12..28].iter().all(|&x| x == 0));
    assert_eq!(p.e[B].counters().cnp_sent, 1);
    // The sender takes it as its peer's.
    p.deliver(A, meta, cnp);
    assert_eq!(p.e[A].counters().cnp_rcvd, 1);
    // After the interval, the next mark gets the next CNP.
    p.now = p.now + gap;
    for (m, b) in &reqs[8..] {
        p.deliver(B, &DatagramMeta { ecn: 3, ..*m }, b);
    }
    let more = p.take(B).into_iter().filter(|(_, b)| b[0] == 0x81).count();
    assert_eq!(more, 1);
    assert_eq!(p.e[B].counters().ecn_ce_rcvd, 16);
    p.run();
    assert_eq!(p.poll(A)[0].status, WcStatus::Success, "CNPs do not disturb the transfer");
}

#[test]
fn no_cnps_when_the_notification_point_is_off_or_nothing_is_marked() {
    let mut cfg = [EngineConfig::new(vec![ip(A)]), EngineConfig::new(vec![ip(B)])];
    cfg[B].cnp.enabled = false;
    for (cfg, mark) in [(cfg, 3u8), ([EngineConfig::new(vec![ip(A)]), EngineConfig::new(vec![ip(B)])], 2)] {
        let mut p = Pair::with_configs(cfg, [1, 2]);
        let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
        let src = p.region(A, 65536, 0x1000, Access::ALL);
        let dst = p.region(B, 65536, 0x10_0000, Access::ALL);
        p.e[A].post_send(c.qpn[0], write(1, &dst, &src, 8192)).unwrap();
        for (m, b) in p.take(A) {
            p.deliver(B, &DatagramMeta { ecn: mark, ..m }, &b);
        }
        assert!(p.take(B).iter().all(|(_, b)| b[0] != 0x81));
        assert_eq!(p.e[B].counters().cnp_sent, 0);
    }
}

/// A paced QP leaves the ready list after each packet and comes back by
/// its pacing timer: `has_transmit` is true only when a packet can go, so
/// a driver never spends a turn on a QP its pacer holds.
#[test]
fn a_paced_qp_waits_for_its_turn_off_the_ready_list() {
    let mut cfg = [EngineConfig::new(vec![ip(A)]), EngineConfig::new(vec![ip(B)])];
    cfg[A].cc = cc::CcAlgorithm::Dcqcn(cc::DcqcnParams::default());
    // 1 Gb/s: a 1 KiB packet's turn is some 8 us.
    cfg[A].line_rate_bps = 1_000_000_000;
    let mut p = Pair::with_configs(cfg, [5, 6]);
    let c = p.connect(PathMtu::Mtu1024, [100, 200], |_| {});
    let src = p.region(A, 65536, 0x1000, Access::ALL);
    let dst = p.region(B, 65536, 0x10_0000, Access::ALL);
    p.e[A].post_send(c.qpn[0], write(1, &dst, &src, 8 * 1024)).unwrap();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut sent = 0;
    let mut turns = Vec::new();
    while sent < 8 {
        assert!(p.e[A].has_transmit(), "a packet can go at {:?}", p.now);
        let tx = p.e[A].poll_transmit(p.now, &mut buf).expect("a packet");
        assert!(tx.len > 1024);
        sent += 1;
        turns.push(p.now);
        if sent == 8 {
            break;
        }
        // Paced: nothing to send now, and the timer names the next turn.
        assert!(!p.e[A].has_transmit(), "packet {sent} still on the ready list");
        assert!(p.e[A].poll_transmit(p.now, &mut buf).is_none());
        let next = p.e[A].poll_timeout().expect("the pacing timer");
        assert!(next > p.now);
        p.now = next;
        p.e[A].handle_timeout(next);
    }
    // The turns are the line rate's: 1 KiB and headers at 1 Gb/s.
    let gaps: Vec<u64> = turns.windows(2).map(|w| w[1].as_nanos() - w[0].as_nanos()).collect();
    assert!(gaps.iter().all(|&g| (8_000..10_000).contains(&g)), "{gaps:?}");
    // The transfer completes as before.
    p.run();
    assert_eq!(p.poll(A)[0].status, WcStatus::Success);
}
