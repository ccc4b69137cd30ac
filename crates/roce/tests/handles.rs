//! The handle API over real UDP on loopback: a QP's endpoint names the PSN
//! it will send from (no PSN carried by the caller), shared receive queues
//! through `Srq`, UD sends through checked address handles (`Ah`).

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::{wait_n, SideOptions};

/// A device on IPv4 loopback with a driver thread.
fn device() -> Device {
    SideOptions::default().device()
}

#[test]
fn endpoint_psn_is_the_one_the_qp_sends_from() {
    // A 64-entry CQ, an RC QP of QpBuilder's depths and a 4 KiB MR on each.
    let side = SideOptions::default().cq_depth(64).default_qp_depths().mr_len(4096);
    let (a, b) = (side.open(), side.open());
    let (qa, qb, ca, ma, mb) = (&a.qp, &b.qp, &a.cq, &a.mr, &b.mr);
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    assert_eq!(ea, qa.endpoint(), "the endpoint is stable");
    let opts = ConnectOptions::default();
    qa.connect(&eb, &opts).unwrap();
    qb.connect(&ea, &opts).unwrap();
    let (a_attr, b_attr) = (qa.query().unwrap(), qb.query().unwrap());
    assert_eq!((a_attr.sq_psn, a_attr.rq_psn), (ea.psn, eb.psn));
    assert_eq!((b_attr.sq_psn, b_attr.rq_psn), (eb.psn, ea.psn));
    let wr = SendWr::new(7, SendOp::Write { remote_addr: mb.addr(), rkey: mb.rkey() }, vec![ma.sge(0, 4096)]);
    qa.post_send(wr).unwrap();
    let wc = wait_n(ca, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
}

#[test]
fn shared_receive_queue_feeds_two_qps() {
    let (a, b) = (device(), device());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let srq = pb.create_srq(16, 1).unwrap();
    let mb = pb.reg_mr(MemBuf::new(1 << 16), Access::ALL).unwrap();
    let ma = pa.reg_mr(MemBuf::new(4096), Access::ALL).unwrap();
    for i in 0..4 {
        srq.post_recv(RecvWr { wr_id: 100 + i, sg_list: vec![mb.sge(i * 4096, 4096)] }).unwrap();
    }
    srq.arm_limit(2).unwrap();
    let senders: Vec<Qp> = (0..2).map(|_| pa.create_qp(QpBuilder::rc(&ca)).unwrap()).collect();
    let receivers: Vec<Qp> = (0..2).map(|_| pb.create_qp(QpBuilder::rc(&cb).srq(&srq)).unwrap()).collect();
    assert!(receivers[0].srq().is_some() && senders[0].srq().is_none());
    let opts = ConnectOptions::default();
    for (s, r) in senders.iter().zip(&receivers) {
        s.connect(&r.endpoint(), &opts).unwrap();
        r.connect(&s.endpoint(), &opts).unwrap();
        // The SRQ takes the receives: the QP's own queue is not used.
        assert!(r.post_recv(RecvWr { wr_id: 1, sg_list: vec![mb.sge(0, 8)] }).is_err());
    }
    for (i, s) in senders.iter().enumerate() {
        s.post_send(SendWr::new(i as u64, SendOp::Send, vec![ma.sge(0, 1000)])).unwrap();
    }
    let mut got: Vec<u64> =
        wait_n(&cb, 2).iter().map(|w| (w.status == WcStatus::Success) as u64 * w.wr_id).collect();
    got.sort();
    assert_eq!(got, [100, 101]);
    // Two of the four receives are left, not fewer than the limit: no
    // event yet. One more SEND leaves one: the event, raised when the
    // receive was taken, before its completion.
    assert_eq!(b.poll_event(), None);
    senders[0].post_send(SendWr::new(9, SendOp::Send, vec![ma.sge(0, 10)])).unwrap();
    wait_n(&cb, 1);
    wait_n(&ca, 3);
    let events: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
    assert_eq!(events, [AsyncEvent::SrqLimitReached(srq.id())]);
}

#[test]
fn ud_sends_go_through_checked_address_handles() {
    let (a, b) = (device(), device());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let qa = pa.create_qp(QpBuilder::ud(&ca)).unwrap();
    let qb = pb.create_qp(QpBuilder::ud(&cb)).unwrap();
    qa.ready_ud(0x1111_1111).unwrap();
    qb.ready_ud(0x1111_1111).unwrap();
    let mb = pb.reg_mr(MemBuf::new(4096), Access::LOCAL_WRITE).unwrap();
    let ma = pa.reg_mr(MemBuf::new(4096), Access::LOCAL_WRITE).unwrap();
    qb.post_recv(RecvWr { wr_id: 5, sg_list: vec![mb.sge(0, 40 + 512)] }).unwrap();
    let eb = qb.endpoint();
    let av = AddressVector { udp_port: Some(eb.port), ..AddressVector::new(eb.gid) };
    let ah = pa.create_ah(av).unwrap();
    let mut wr = SendWr::new(1, SendOp::Send, vec![ma.sge(0, 512)]);
    wr.ud = Some(ah.dest(eb.qpn, 0x1111_1111));
    qa.post_send(wr).unwrap();
    let wc = wait_n(&cb, 1);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].byte_len), (5, WcStatus::Success, 40 + 512));
    assert_eq!(wc[0].src_qp, qa.qpn());
    // A source GID the device does not have, or another IP family: refused
    // when the handle is made, and a raw destination when it is posted.
    let bad_index = AddressVector { sgid_index: 1, ..av };
    assert!(matches!(pa.create_ah(bad_index), Err(Error::Verbs(_))));
    let v6 = AddressVector::new("::1".parse().unwrap());
    assert!(matches!(pa.create_ah(v6), Err(Error::Verbs(_))));
    let mut wr = SendWr::new(2, SendOp::Send, vec![ma.sge(0, 8)]);
    wr.ud = Some(UdDest { av: v6, remote_qpn: eb.qpn, remote_qkey: 0x1111_1111 });
    assert!(matches!(qa.post_send(wr), Err(Error::Verbs(_))));
}
