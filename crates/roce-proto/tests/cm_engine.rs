//! The connection manager inside the engine: two engines connect RC QPs
//! through CM MADs on QP 1 (REQ, REP, RTU as UD packets with the GSI's
//! keys), with the QPs brought to RTS by the engine, then carry data.

use roce_proto::cm::{AcceptParams, CmEvent, ConnectParams, PortSpace};
use roce_proto::testkit::*;
use roce_proto::*;
use roce_wire::{DethRepr, RocePacketRepr};

fn params(p: &Pair) -> ConnectParams {
    ConnectParams {
        dst_ip: p.ip[B],
        dst_port: 7174,
        src_port: 50000,
        qpn: 0,
        starting_psn: 0,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        private_data: b"ping".to_vec(),
    }
}

fn events(p: &mut Pair, side: usize) -> Vec<CmEvent> {
    std::iter::from_fn(|| p.e[side].poll_cm_event()).collect()
}

/// Moves packets both ways until none is left, without advancing time;
/// `drop` (sender, bytes) may drop some.
fn pump(p: &mut Pair, drop: &mut impl FnMut(usize, &[u8]) -> bool) {
    loop {
        let mut moved = false;
        for s in [A, B] {
            for (meta, bytes) in p.take(s) {
                moved = true;
                if !drop(s, &bytes) {
                    p.deliver(1 - s, &meta, &bytes);
                }
            }
        }
        if !moved {
            return;
        }
    }
}

/// Connects A to B's listener; `drop` may drop packets (sender, bytes).
fn connect(p: &mut Pair, mut drop: impl FnMut(usize, &[u8]) -> bool) -> [u32; 2] {
    p.e[B].cm_mut().listen(PortSpace::Tcp, 7174).unwrap();
    let qa = p.e[A].create_qp(p.qp_init(A, QpType::Rc)).unwrap();
    let id_a = p.e[A].cm_connect(p.now, qa, params(p), None, true).unwrap();
    pump(p, &mut drop);
    let Some(CmEvent::ConnectRequest { id, req, .. }) = events(p, B).pop() else {
        panic!("no connect request")
    };
    assert_eq!(&req.private_data[..4], b"ping");
    let qb = p.e[B].create_qp(p.qp_init(B, QpType::Rc)).unwrap();
    let acc =
        AcceptParams { responder_resources: 1, initiator_depth: 1, rnr_retry_count: 7, ..Default::default() };
    p.e[B].cm_accept(p.now, id, qb, &req, acc).unwrap();
    pump(p, &mut drop);
    let ev = events(p, A);
    assert!(
        matches!(&ev[..], [CmEvent::ConnectResponse { id, .. }, CmEvent::Established { id: e }] if *id == id_a && *e == id_a),
        "{ev:?}"
    );
    assert_eq!(p.e[A].qp_state(qa), Some(QpState::Rts));
    assert_eq!(p.e[B].qp_state(qb), Some(QpState::Rts));
    [qa, qb]
}

fn send(p: &mut Pair, qpn: [u32; 2]) {
    let src = p.region(A, 64, 0x1000, Access::ALL);
    let dst = p.region(B, 64, 0x2000, Access::ALL);
    p.put(&src, 0, b"over the CM");
    p.e[B].post_recv(qpn[B], RecvWr { wr_id: 9, sg_list: vec![sge(&dst, 0, 64)] }).unwrap();
    p.e[A].post_send(qpn[A], SendWr::new(1, SendOp::Send, vec![sge(&src, 0, 11)])).unwrap();
    p.run();
    assert_eq!(p.get(&dst, 0, 11), b"over the CM");
}

#[test]
fn rc_connect_through_the_cm_then_send() {
    let mut p = Pair::new(7);
    let mut mads = 0;
    let mut psns = (0, 0);
    let qpn = connect(&mut p, |_, b| {
        let pkt = RocePacketRepr::parse(b).unwrap();
        if pkt.bth.dest_qp == 1 {
            mads += 1;
            match roce_wire::CmMadRepr::parse(pkt.payload).unwrap().msg {
                roce_wire::CmMsgRepr::Req(r) => psns.0 = r.starting_psn,
                roce_wire::CmMsgRepr::Rep(r) => psns.1 = r.starting_psn,
                _ => {}
            }
            assert_eq!((pkt.bth.opcode, pkt.bth.pkey), (0x64, 0xffff));
            assert_eq!(pkt.ext.deth, Some(DethRepr { qkey: 0x8001_0000, src_qp: 1 }));
            assert_eq!(pkt.payload.len(), 256);
        }
        false
    });
    assert_eq!(mads, 3, "REQ, REP, RTU");
    // Each side sends from the PSN the other announced (the kernel's rule,
    // seen on the wire against rxe) and expects its own.
    let (qa, qb) = (p.e[A].query_qp(qpn[A]).unwrap(), p.e[B].query_qp(qpn[B]).unwrap());
    assert_eq!((qa.rq_psn.value(), qb.sq_psn.value()), (psns.0, psns.0), "the REQ's PSN");
    assert_eq!((qb.rq_psn.value(), qa.sq_psn.value()), (psns.1, psns.1), "the REP's PSN");
    assert!(matches!(events(&mut p, B).as_slice(), [CmEvent::Established { .. }]));
    send(&mut p, qpn);
    assert_eq!(p.e[B].counters().gsi_rcvd, 2);
}

#[test]
fn lost_rtu_the_first_packet_establishes_the_passive_side() {
    let mut p = Pair::new(9);
    let mut n = 0;
    // Drop the third MAD: the RTU.
    let qpn = connect(&mut p, |s, b| {
        let gsi = RocePacketRepr::parse(b).unwrap().bth.dest_qp == 1;
        n += u32::from(gsi);
        gsi && s == A && n == 3
    });
    assert!(events(&mut p, B).is_empty(), "no RTU yet");
    send(&mut p, qpn);
    assert!(matches!(events(&mut p, B).as_slice(), [CmEvent::Established { .. }]));
    assert_eq!(p.e[B].cm().poll_timeout(), None, "the REP timer went with it");
}

#[test]
fn bad_gsi_keys_are_dropped() {
    let mut p = Pair::new(11);
    p.e[B].cm_mut().listen(PortSpace::Tcp, 7174).unwrap();
    let qa = p.e[A].create_qp(p.qp_init(A, QpType::Rc)).unwrap();
    p.e[A].cm_connect(p.now, qa, params(&p), None, true).unwrap();
    let (meta, mut bytes) = p.take(A).pop().unwrap();
    // Q_Key 0x80010001: rxe's check_keys drops it, and so do we.
    bytes[15] = 1;
    let body = bytes.len() - 4;
    let crc = roce_proto::engine::datagram_icrc(&meta, &bytes[..body]).unwrap();
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    p.deliver(B, &meta, &bytes);
    assert_eq!(p.e[B].counters().gsi_dropped, 1);
    assert!(events(&mut p, B).is_empty());
}
