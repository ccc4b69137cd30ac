//! The CM's rules against the kernel's, in virtual time: two CMs wired
//! back to back, MADs delivered (or lost) by the test.

use super::*;
use roce_wire::cm::{CmMadRepr, CmMsgRepr};

const A: &str = "10.0.0.1";
const B: &str = "10.0.0.2";

struct Net {
    cm: [Cm; 2],
    now: Instant,
}

fn one(mut v: Vec<CmEvent>) -> CmEvent {
    assert_eq!(v.len(), 1, "{v:?}");
    v.pop().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl Net {
    fn new() -> Net {
        Net {
            cm: [Cm::new(CmConfig::new(ip(A), 0xa), 1), Cm::new(CmConfig::new(ip(B), 0xb), 2)],
            now: Instant::ZERO,
        }
    }

    /// The MADs side `from` has queued, as (name, bytes).
    fn take(&mut self, from: usize) -> Vec<(String, [u8; MAD_LEN])> {
        let mut out = Vec::new();
        while let Some(t) = self.cm[from].poll_transmit() {
            let name = CmMadRepr::parse(&t.mad).unwrap().msg.name().to_string();
            out.push((name, t.mad));
        }
        out
    }

    fn give(&mut self, to: usize, mad: &[u8; MAD_LEN]) {
        let src = ip(if to == 0 { B } else { A });
        self.cm[to].handle_mad(self.now, src, mad);
    }

    /// Delivers everything queued both ways until quiet; returns the names
    /// in the order they crossed.
    fn run(&mut self) -> Vec<String> {
        let mut log = Vec::new();
        loop {
            let mut any = false;
            for from in 0..2 {
                for (name, mad) in self.take(from) {
                    any = true;
                    log.push(format!("{}{name}", if from == 0 { ">" } else { "<" }));
                    self.give(1 - from, &mad);
                }
            }
            if !any {
                return log;
            }
        }
    }

    fn events(&mut self, side: usize) -> Vec<CmEvent> {
        std::iter::from_fn(|| self.cm[side].poll_event()).collect()
    }

    /// Advances virtual time to `side`'s next timer and runs it.
    fn fire(&mut self, side: usize) -> Duration {
        let t = self.cm[side].poll_timeout().expect("a timer");
        let waited = t - self.now;
        self.now = t;
        self.cm[side].handle_timeout(t);
        waited
    }

    fn params(&self, qpn: u32) -> ConnectParams {
        ConnectParams {
            dst_ip: ip(B),
            dst_port: 7174,
            src_port: 40000,
            qpn,
            starting_psn: 0x111,
            responder_resources: 4,
            initiator_depth: 4,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            private_data: b"hello".to_vec(),
        }
    }

    /// A listener on B, a REQ from A delivered: (A's id, B's id, B's ReqInfo).
    fn requested(&mut self, qpn: u32) -> (CmId, CmId, ReqInfo) {
        if self.cm[1].listeners.is_empty() {
            self.cm[1].listen(PortSpace::Tcp, 7174).unwrap();
        }
        let p = self.params(qpn);
        let a = self.cm[0].connect(self.now, &p).unwrap();
        assert_eq!(self.run(), [">REQ"]);
        let Some(CmEvent::ConnectRequest { id, req, .. }) = self.events(1).pop() else {
            panic!("no request")
        };
        (a, id, req)
    }

    fn accept_params(qpn: u32) -> AcceptParams {
        AcceptParams {
            qpn,
            starting_psn: 0x222,
            responder_resources: 2,
            initiator_depth: 2,
            rnr_retry_count: 7,
            ..Default::default()
        }
    }

    /// A connection established both ways.
    fn connected(&mut self, qpn: u32) -> (CmId, CmId) {
        let (a, b, _) = self.requested(qpn);
        self.cm[1].accept(self.now, b, &Self::accept_params(0x99)).unwrap();
        assert_eq!(self.run(), ["<REP"]);
        assert!(matches!(self.events(0).as_slice(), [CmEvent::ConnectResponse { .. }]));
        self.cm[0].establish(a).unwrap();
        assert_eq!(self.run(), [">RTU"]);
        assert_eq!(self.events(0), [CmEvent::Established { id: a }]);
        assert_eq!(self.events(1), [CmEvent::Established { id: b }]);
        (a, b)
    }
}

#[test]
fn connect_carries_the_fields_and_the_ip_header() {
    let mut n = Net::new();
    let (a, b, req) = n.requested(0x42);
    assert_eq!(req.service_id, 0x0106_1c06);
    assert_eq!((req.remote_qpn, req.starting_psn, req.path_mtu, req.local_ack_timeout), (0x42, 0x111, 3, 17));
    assert_eq!((req.src_ip, req.src_port, req.dst_ip, req.dst_port), (ip(A), 40000, ip(B), 7174));
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(req.private_data.len(), 56);
    n.cm[1].accept(n.now, b, &Net::accept_params(0x99)).unwrap();
    n.run();
    let CmEvent::ConnectResponse { rep, .. } = one(n.events(0)) else { panic!() };
    assert_eq!((rep.remote_qpn, rep.starting_psn, rep.responder_resources), (0x99, 0x222, 2));
    // cm_ack_timeout(15, 18) = 19, as the kernel computes it.
    assert_eq!(rep.ack_timeout, 19);
    assert_eq!(n.cm[0].state(a), Some(CmState::MraRepSent));
}

#[test]
fn no_listener_is_rej_8_and_a_wrong_address_rej_28() {
    let mut n = Net::new();
    let p = n.params(1);
    let a = n.cm[0].connect(n.now, &p).unwrap();
    assert_eq!(n.run(), [">REQ", "<REJ"]);
    assert!(matches!(n.events(0).as_slice(), [CmEvent::Rejected { id, reason: 8, .. }] if *id == a));
    assert_eq!(n.cm[0].state(a), Some(CmState::Idle));
    // A REQ whose RDMA CM header names another address than B's.
    n.cm[1].listen(PortSpace::Tcp, 7174).unwrap();
    n.cm[0].cfg.local_ip = ip("10.0.0.9");
    let a = n.cm[0].connect(n.now, &ConnectParams { dst_ip: ip("10.0.0.8"), ..p }).unwrap();
    let mad = n.take(0).pop().unwrap().1;
    n.give(1, &mad);
    assert_eq!(n.run(), ["<REJ"]);
    assert!(matches!(n.events(0).as_slice(), [CmEvent::Rejected { id, reason: 28, .. }] if *id == a));
    assert!(n.events(1).is_empty());
}

#[test]
fn lost_req_is_resent_on_the_kernel_schedule_until_max_retries() {
    let mut n = Net::new();
    let p = n.params(1);
    let a = n.cm[0].connect(n.now, &p).unwrap();
    assert_eq!(n.take(0).len(), 1, "the REQ, lost");
    // 2 * conv(18) + conv(20) = 2 * 1024 + 4096 ms.
    for _ in 0..15 {
        assert_eq!(n.fire(0), Duration::from_millis(6144));
        assert_eq!(n.take(0).len(), 1, "a re-sent REQ");
    }
    n.fire(0);
    assert!(n.take(0).is_empty());
    assert_eq!(n.events(0), [CmEvent::Unreachable { id: a }]);
    assert_eq!(n.cm[0].poll_timeout(), None);
}

#[test]
fn duplicate_req_before_accept_gets_an_mra_which_stretches_the_req_timer() {
    let mut n = Net::new();
    let (a, b, _) = n.requested(7);
    // A's REQ timer fires: the REQ again, B answers with MRA (24).
    n.fire(0);
    let log = n.run();
    assert_eq!(log, [">REQ", "<MRA"]);
    assert!(n.events(1).is_empty(), "a duplicate is not a new request");
    assert_eq!(n.cm[1].state(b), Some(CmState::MraReqSent));
    assert_eq!(n.cm[0].state(a), Some(CmState::MraReqRcvd));
    // conv(24) + conv(17) ms from now.
    assert_eq!(n.cm[0].poll_timeout(), Some(n.now + cm_timeout(24) + cm_timeout(17)));
    // The accept still completes the connection.
    n.cm[1].accept(n.now, b, &Net::accept_params(9)).unwrap();
    assert_eq!(n.run(), ["<REP"]);
    n.cm[0].establish(a).unwrap();
    assert_eq!(n.run(), [">RTU"]);
    assert_eq!(n.cm[1].state(b), Some(CmState::Established));
}

#[test]
fn lost_rep_is_resent_every_conv_of_the_req_response_timeout() {
    let mut n = Net::new();
    let (a, b, _) = n.requested(7);
    n.cm[1].accept(n.now, b, &Net::accept_params(9)).unwrap();
    assert_eq!(n.take(1).len(), 1, "the REP, lost");
    assert_eq!(n.fire(1), Duration::from_millis(4096), "conv(20)");
    assert_eq!(n.run(), ["<REP"]);
    n.cm[0].establish(a).unwrap();
    n.run();
    assert_eq!(n.cm[1].state(b), Some(CmState::Established));
    // Exhaustion: a REP never answered gives Unreachable after 15 re-sends.
    let (_, b2, _) = n.requested(8);
    n.cm[1].accept(n.now, b2, &Net::accept_params(10)).unwrap();
    n.events(1);
    for _ in 0..16 {
        n.fire(1);
        n.take(1);
    }
    assert_eq!(n.events(1), [CmEvent::Unreachable { id: b2 }]);
}

#[test]
fn lost_rtu_first_packet_or_duplicate_rep_recovers() {
    let mut n = Net::new();
    let (a, b, _) = n.requested(7);
    n.cm[1].accept(n.now, b, &Net::accept_params(9)).unwrap();
    n.run();
    // Before the user establishes, a duplicate REP is answered with MRA.
    n.fire(1);
    assert_eq!(n.run(), ["<REP", ">MRA"]);
    assert_eq!(n.cm[1].state(b), Some(CmState::MraRepRcvd));
    n.cm[0].establish(a).unwrap();
    assert_eq!(n.take(0).len(), 1, "the RTU, lost");
    // B re-sends the REP (stretched by the MRA); A answers with the RTU again.
    n.fire(1);
    assert_eq!(n.run(), ["<REP", ">RTU"]);
    assert_eq!(n.events(1), [CmEvent::Established { id: b }]);
    // Or: the RTU lost and the first data packet establishes the passive side.
    let (a2, b2, _) = n.requested(8);
    n.cm[1].accept(n.now, b2, &Net::accept_params(10)).unwrap();
    n.run();
    n.cm[0].establish(a2).unwrap();
    n.take(0);
    n.cm[1].notify_established(b2).unwrap();
    assert_eq!(n.events(1), [CmEvent::Established { id: b2 }]);
    assert_eq!(n.cm[1].poll_timeout(), None, "no REP timer left");
}

#[test]
fn disconnect_timewait_and_dreq_crossing_dreq() {
    let mut n = Net::new();
    let (a, b) = n.connected(7);
    n.cm[0].disconnect(n.now, a, &[]).unwrap();
    assert_eq!(n.run(), [">DREQ"]);
    assert!(matches!(n.events(1).as_slice(), [CmEvent::Disconnected { id, .. }] if *id == b));
    n.cm[1].disconnect(n.now, b, &[]).unwrap();
    assert_eq!(n.run(), ["<DREP"]);
    assert!(matches!(n.events(0).as_slice(), [CmEvent::Disconnected { id, .. }] if *id == a));
    assert_eq!((n.cm[0].state(a), n.cm[1].state(b)), (Some(CmState::Timewait), Some(CmState::Timewait)));
    // A DREQ repeated in timewait gets the DREP again.
    // Timewait = conv(ack timeout): 19 on A (from the REP), 17 on B (the REQ's).
    assert_eq!(n.fire(1), cm_timeout(17));
    assert_eq!(n.events(1), [CmEvent::TimewaitExit { id: b }]);

    let mut n = Net::new();
    let (a, b) = n.connected(7);
    n.cm[0].disconnect(n.now, a, &[]).unwrap();
    n.cm[1].disconnect(n.now, b, &[]).unwrap();
    // Both DREQs cross; each answers the other's with a DREP.
    let log = n.run();
    assert_eq!(log, [">DREQ", "<DREQ", "<DREP", ">DREP"]);
    assert_eq!((n.cm[0].state(a), n.cm[1].state(b)), (Some(CmState::Timewait), Some(CmState::Timewait)));
    assert_eq!(n.events(0).len(), 1, "one Disconnected each");
    assert_eq!(n.events(1).len(), 1);
}

#[test]
fn unanswered_dreq_ends_in_timewait() {
    let mut n = Net::new();
    let (a, _) = n.connected(7);
    n.cm[0].disconnect(n.now, a, &[]).unwrap();
    for _ in 0..16 {
        n.take(0);
        n.fire(0);
    }
    assert!(matches!(n.events(0).as_slice(), [CmEvent::Disconnected { .. }]));
    assert_eq!(n.cm[0].state(a), Some(CmState::Timewait));
}

#[test]
fn stale_connection_rules() {
    let mut n = Net::new();
    let (a, b) = n.connected(7);
    // A new REQ from the same CA GUID and QPN while the old connection
    // lives: REJ 10 to it, DREQ to the old one.
    let p = n.params(7);
    let a2 = n.cm[0].connect(n.now, &p).unwrap();
    let log = n.run();
    assert_eq!(log[..3], [">REQ", "<REJ", "<DREQ"]);
    assert!(n.events(0).iter().any(|e| matches!(e, CmEvent::Rejected { id, reason: 10, .. } if *id == a2)));
    assert_eq!(n.cm[0].state(a2), Some(CmState::Timewait), "REJ 10 sends the active side to timewait");
    let _ = (a, b);
    // During timewait the QPN stays taken; after it, it is free.
    let mut n = Net::new();
    let (a, b) = n.connected(7);
    n.cm[0].disconnect(n.now, a, &[]).unwrap();
    n.run();
    n.cm[1].disconnect(n.now, b, &[]).unwrap();
    n.run();
    n.events(0);
    n.events(1);
    let p = n.params(7);
    let a3 = n.cm[0].connect(n.now, &p).unwrap();
    assert_eq!(n.run(), [">REQ", "<REJ"]);
    assert!(matches!(n.events(0).as_slice(), [CmEvent::Rejected { reason: 10, .. }]));
    let _ = a3;
    while n.cm[1].state(b) == Some(CmState::Timewait) {
        n.fire(1);
    }
    let (_, _, req) = n.requested(7);
    assert_eq!(req.remote_qpn, 7);
}

#[test]
fn abandoned_req_reaches_the_listener_as_rej_timeout() {
    let mut n = Net::new();
    let (a, b, _) = n.requested(7);
    n.cm[0].destroy(n.now, a).unwrap();
    let rej = n.take(0);
    let CmMsgRepr::Rej(r) = CmMadRepr::parse(&rej[0].1).unwrap().msg else { panic!("not a REJ") };
    assert_eq!((r.reason, r.ari), (reason::TIMEOUT, &0xau64.to_be_bytes()[..]));
    n.give(1, &rej[0].1);
    assert!(matches!(n.events(1).as_slice(), [CmEvent::Rejected { id, reason: 4, .. }] if *id == b));
}

#[test]
fn duplicate_req_in_timewait_is_rej_stale() {
    let mut n = Net::new();
    n.cm[1].listen(PortSpace::Tcp, 7174).unwrap();
    let p = n.params(7);
    let a = n.cm[0].connect(n.now, &p).unwrap();
    let req = n.take(0).pop().unwrap().1;
    n.give(1, &req);
    let CmEvent::ConnectRequest { id: b, .. } = one(n.events(1)) else { panic!() };
    n.cm[1].accept(n.now, b, &Net::accept_params(9)).unwrap();
    n.run();
    n.cm[0].establish(a).unwrap();
    n.run();
    n.cm[1].disconnect(n.now, b, &[]).unwrap();
    n.run();
    n.cm[0].disconnect(n.now, a, &[]).unwrap();
    n.run();
    assert_eq!(n.cm[1].state(b), Some(CmState::Timewait));
    // The old REQ arrives late (a retransmission stuck in the network).
    n.give(1, &req);
    let out = n.take(1);
    let CmMsgRepr::Rej(r) = CmMadRepr::parse(&out[0].1).unwrap().msg else { panic!("{:?}", out[0].0) };
    assert_eq!(r.reason, reason::STALE_CONN);
    assert_eq!(n.cm[1].counters().duplicates, 1);
}

#[test]
fn reject_and_destroy_say_goodbye() {
    let mut n = Net::new();
    let (a, b, _) = n.requested(7);
    n.cm[1].reject(n.now, b, b"busy").unwrap();
    assert_eq!(n.run(), ["<REJ"]);
    let CmEvent::Rejected { reason, private_data, .. } = one(n.events(0)) else { panic!() };
    assert_eq!((reason, &private_data[..4]), (28, &b"busy"[..]));
    assert_eq!(n.cm[0].state(a), Some(CmState::Idle));
    // Destroying an established connection sends a DREQ and still answers.
    let (a, b) = n.connected(8);
    n.cm[0].destroy(n.now, a).unwrap();
    assert_eq!(n.run(), [">DREQ"]);
    n.cm[1].disconnect(n.now, b, &[]).unwrap();
    assert_eq!(n.run(), ["<DREP"]);
    assert!(n.events(0).is_empty(), "no events for a destroyed id");
    n.fire(0);
    assert_eq!(n.cm[0].state(a), None, "gone after timewait");
    // Wrong calls are refused, not panics.
    assert_eq!(n.cm[0].establish(CmId(12345)), Err(CmError::NoSuchId));
    assert!(matches!(n.cm[1].accept(n.now, b, &Net::accept_params(1)), Err(CmError::WrongState(_))));
    let too_long = ConnectParams { private_data: vec![0; 57], ..n.params(1) };
    assert_eq!(n.cm[0].connect(n.now, &too_long), Err(CmError::PrivateDataTooLong { len: 57, max: 56 }));
    assert_eq!(n.cm[1].listen(PortSpace::Tcp, 7174), Err(CmError::AddressInUse(7174)));
}

#[test]
fn sidr_resolves_a_ud_service() {
    let mut n = Net::new();
    n.cm[1].listen(PortSpace::Udp, 7174).unwrap();
    let a = n.cm[0].sidr_request(n.now, ip(B), 7174, 40001, b"ud").unwrap();
    assert_eq!(n.run(), [">SIDR_REQ"]);
    let CmEvent::SidrRequest { id, req, .. } = one(n.events(1)) else { panic!() };
    assert_eq!((req.service_id, req.src_port, &req.private_data[..2]), (0x0111_1c06, 40001, &b"ud"[..]));
    n.cm[1].sidr_reply(id, sidr_status::SUCCESS, 0x55, roce_wire::cma::UDP_QKEY, &[]).unwrap();
    assert_eq!(n.run(), ["<SIDR_REP"]);
    let CmEvent::SidrReply { id: got, status: 0, qpn: 0x55, qkey, .. } = one(n.events(0)) else { panic!() };
    assert_eq!((got, qkey), (a, 0x0123_4567));
    // No listener: status 1.
    let a = n.cm[0].sidr_request(n.now, ip(B), 9, 40001, &[]).unwrap();
    n.run();
    assert!(matches!(n.events(0).as_slice(), [CmEvent::SidrReply { id, status: 1, .. }] if *id == a));
}

#[test]
fn garbage_is_counted_not_fatal() {
    let mut n = Net::new();
    n.cm[0].handle_mad(n.now, ip(B), &[0u8; 10]);
    n.cm[0].handle_mad(n.now, ip(B), &[0xffu8; 256]);
    assert_eq!(n.cm[0].counters().malformed, 2);
    // A DREQ for nothing is answered with a DREP (cm_issue_drep).
    let mut m = [0u8; MAD_LEN];
    let dreq =
        roce_wire::cm::DreqRepr { local_comm_id: 5, remote_comm_id: 6, remote_qpn: 7, private_data: &[] };
    CmMadRepr::new(1, CmMsgRepr::Dreq(dreq)).emit(&mut m).unwrap();
    n.give(0, &m);
    assert_eq!(n.take(0)[0].0, "DREP");
}
