use roce_proto::testkit::{sge, Pair, A, B};
use roce_proto::{Access, PathMtu, SendOp, SendWr, Wc, WcStatus};

use super::*;
use crate::hooks::{Copy, Fate, Verdict};
use crate::scenario::PS_PER_US;

/// A copy as recorded: sent, arrive, from, to, copy number, fate, opcode.
type Seen = (Time, Option<Time>, NodeId, Option<NodeId>, u8, Fate, u8);

/// Records every copy; drops, delays or duplicates by the datagram's
/// first byte (the BTH opcode) and sender.
#[derive(Default)]
struct Watch {
    copies: Vec<Seen>,
    rule: Option<(NodeId, u8, Verdict)>,
    judged: usize,
}

impl LinkHooks for Watch {
    fn judge(&mut self, _: Time, from: NodeId, _: NodeId, bytes: &[u8]) -> Verdict {
        self.judged += 1;
        match self.rule {
            Some((f, op, v)) if f == from && bytes[0] == op => {
                self.rule = None;
                v
            }
            _ => Verdict::Pass,
        }
    }

    fn on_copy(&mut self, c: &Copy<'_>) {
        self.copies.push((c.sent, c.arrive, c.from, c.to, c.copy, c.fate, c.bytes[0]));
    }
}

const WRITE_ONLY: u8 = 0x0a;
const ACK: u8 = 0x11;

/// A connected RC pair on a mesh whose link A -> B takes 10 us and
/// B -> A 3 us, A's WRITE of 64 bytes posted; runs to the end.
fn write_across(rule: Option<(NodeId, u8, Verdict)>) -> (Mesh<Watch>, Vec<Wc>, Vec<u8>) {
    let mut p = Pair::with_seeds([1, 2]);
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x2000, Access::ALL);
    p.put(&src, 0, &[0x5a; 64]);
    let conn = p.connect(PathMtu::Mtu1024, [10, 20], |c| c.timeout = 8);
    let wr = SendWr::new(
        7,
        SendOp::Write { remote_addr: dst.keys.addr, rkey: dst.keys.rkey },
        vec![sge(&src, 0, 64)],
    );
    p.e[A].post_send(conn.qpn[A], wr).unwrap();
    let cq = p.cq[A];
    let [ea, eb] = p.e;
    let link = |from, _| MeshLink {
        delay: if from == A { 10 * PS_PER_US } else { 3 * PS_PER_US },
        rate_bps: None,
        faults: Faults::default(),
    };
    let watch = Watch { rule, ..Watch::default() };
    let mut mesh = Mesh::new(vec![ea, eb], link, SimRng::new(9), watch).unwrap();
    mesh.kick();
    while mesh.step(Time::MAX, 100_000) == StepEnd::Ran {
        mesh.kick();
    }
    let mut wc = vec![Wc::EMPTY; 8];
    let n = mesh.engine_mut(A).poll_cq(cq, &mut wc).unwrap();
    wc.truncate(n);
    let mut got = vec![0; 64];
    mesh.engine_mut(B).mr_read(dst.keys.lkey, 0, &mut got).unwrap();
    (mesh, wc, got)
}

#[test]
fn a_write_crosses_each_direction_with_its_own_delay() {
    let (mesh, wc, got) = write_across(None);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
    assert_eq!(got, [0x5a; 64]);
    let c = &mesh.hooks().copies;
    // The WRITE, then its ACK, each shown once, delivered after its
    // direction's delay (infinitely fast links: no serialisation).
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!((c[0].2, c[0].3, c[0].5, c[0].6), (A, Some(B), Fate::Delivered, WRITE_ONLY));
    assert_eq!(c[0].1, Some(c[0].0 + 10 * PS_PER_US));
    assert_eq!((c[1].2, c[1].3, c[1].5, c[1].6), (B, Some(A), Fate::Delivered, ACK));
    assert_eq!(c[1].1, Some(c[1].0 + 3 * PS_PER_US));
    assert_eq!(mesh.hooks().judged, 2);
    assert_eq!(mesh.pending(), 0);
}

#[test]
fn verdicts_drop_delay_and_duplicate() {
    // Dropped: the requester's ACK timer resends it (code 8: ~1 ms).
    let (mesh, wc, got) = write_across(Some((A, WRITE_ONLY, Verdict::Drop)));
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success));
    assert_eq!(got, [0x5a; 64]);
    let c = &mesh.hooks().copies;
    assert_eq!((c[0].5, c[0].1), (Fate::Lost, None));
    assert_eq!((c[1].5, c[1].6), (Fate::Delivered, WRITE_ONLY));
    assert!(c[1].0 >= c[0].0 + 1_000 * PS_PER_US, "resent after the ACK timeout: {c:?}");
    assert_eq!(mesh.counters().dropped_link, 1);

    // Delayed: one copy, later than the link brings it.
    let (mesh, wc, _) = write_across(Some((A, WRITE_ONLY, Verdict::Delay(5 * PS_PER_US))));
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success));
    let c = &mesh.hooks().copies;
    assert_eq!(c[0].1, Some(c[0].0 + 15 * PS_PER_US));

    // Duplicated: two copies; the responder answers the second as a
    // duplicate (another ACK), the requester completes once.
    let (mesh, wc, _) = write_across(Some((A, WRITE_ONLY, Verdict::Duplicate)));
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success));
    let c = &mesh.hooks().copies;
    assert_eq!((c[0].4, c[1].4), (0, 1));
    assert_eq!((c[0].1, c[1].1), (c[1].1, Some(c[0].0 + 10 * PS_PER_US)));
    assert_eq!(mesh.counters().duplicated, 1);
    assert_eq!(mesh.engine(B).counters().duplicate_request, 1);
}

#[test]
fn a_mesh_needs_two_hosts_with_their_own_addresses() {
    let p = Pair::with_seeds([1, 2]);
    let [ea, _] = p.e;
    let link = |_, _| MeshLink { delay: 0, rate_bps: None, faults: Faults::default() };
    assert!(Mesh::new(vec![ea], link, SimRng::new(1), Watch::default()).is_err());
    let p = Pair::with_configs(
        [
            roce_proto::EngineConfig::new(vec![roce_proto::testkit::ip(A)]),
            roce_proto::EngineConfig::new(vec![roce_proto::testkit::ip(A)]),
        ],
        [1, 2],
    );
    let err = Mesh::new(Vec::from(p.e), link, SimRng::new(1), Watch::default()).err().unwrap();
    assert!(err.to_string().contains("assigned to two hosts"), "{err}");
}

/// A and B on two switches joined by one link; A's WRITE of 64 bytes
/// crosses both, its ACK comes back.
#[test]
fn a_write_crosses_a_switched_fabric_and_the_hooks_see_the_first_hop() {
    let mut p = Pair::with_seeds([1, 2]);
    let src = p.region(A, 4096, 0x1000, Access::ALL);
    let dst = p.region(B, 4096, 0x2000, Access::ALL);
    p.put(&src, 0, &[0x5a; 64]);
    let conn = p.connect(PathMtu::Mtu1024, [10, 20], |c| c.timeout = 8);
    let wr = SendWr::new(
        7,
        SendOp::Write { remote_addr: dst.keys.addr, rkey: dst.keys.rkey },
        vec![sge(&src, 0, 64)],
    );
    p.e[A].post_send(conn.qpn[A], wr).unwrap();
    let cq = p.cq[A];
    let [ea, eb] = p.e;
    let mut scn = switched_scenario(
        &[1, 1],
        (100_000_000_000, PS_PER_US),
        (10_000_000_000, 2 * PS_PER_US),
        SwitchConfig { lossless_mask: 0xff, ..SwitchConfig::hpcc() },
    );
    scn.deadlock_check_ps = 50 * PS_PER_US;
    let mut mesh = Mesh::on_fabric(scn, vec![(A, ea), (B, eb)], SimRng::new(9), Watch::default()).unwrap();
    mesh.kick();
    while mesh.step(Time::MAX, 100_000) == StepEnd::Ran {
        mesh.kick();
    }
    let mut wc = vec![Wc::EMPTY; 8];
    let n = mesh.engine_mut(A).poll_cq(cq, &mut wc).unwrap();
    assert_eq!((n, wc[0].wr_id, wc[0].status), (1, 7, WcStatus::Success));
    let mut got = vec![0; 64];
    mesh.engine_mut(B).mr_read(dst.keys.lkey, 0, &mut got).unwrap();
    assert_eq!(got, [0x5a; 64]);
    // Each datagram once, on its first hop, naming the destination host;
    // it reaches the first switch after the host link's delay plus its
    // serialisation.
    let c = &mesh.hooks().copies;
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!((c[0].2, c[0].3, c[0].5, c[0].6), (A, Some(B), Fate::Delivered, WRITE_ONLY));
    assert_eq!((c[1].2, c[1].3, c[1].5, c[1].6), (B, Some(A), Fate::Delivered, ACK));
    assert!(c[0].1.unwrap() > c[0].0 + PS_PER_US, "{c:?}");
    assert_eq!(mesh.hooks().judged, 2);
    assert!(mesh.deadlock().is_none());
    assert_eq!(mesh.counters().dropped_buffer, 0);
    // Faults are set on a host's own link, not between two hosts.
    assert!(mesh.set_faults(A, 2, Faults { loss: 1.0, ..Faults::default() }).is_ok());
    let err = mesh.set_faults(A, B, Faults::default()).unwrap_err();
    assert!(err.to_string().contains("no link"), "{err}");
}

#[test]
fn a_switched_fabric_refuses_hosts_it_cannot_place() {
    let scn = switched_scenario(&[2], (10_000_000_000, PS_PER_US), (0, 0), SwitchConfig::hpcc());
    let place = |nodes: [NodeId; 2]| {
        let [ea, eb] = Pair::with_seeds([1, 2]).e;
        let hosts = vec![(nodes[0], ea), (nodes[1], eb)];
        Mesh::on_fabric(scn.clone(), hosts, SimRng::new(1), Watch::default()).err().map(|e| e.to_string())
    };
    assert!(place([0, 1]).is_none());
    assert!(place([0, 2]).unwrap().contains("not a host node"));
    assert!(place([0, 0]).unwrap().contains("two hosts on it"));
    assert!(place([0, 7]).unwrap().contains("no such node"));
    let [ea, _] = Pair::with_seeds([1, 2]).e;
    let err = Mesh::on_fabric(scn, vec![(0, ea)], SimRng::new(1), Watch::default()).err().unwrap();
    assert!(err.to_string().contains("two at least"), "{err}");
}
