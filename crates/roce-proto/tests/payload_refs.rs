//! Payload left in registered memory (`Engine::poll_transmit_batch_refs`):
//! a driver that sends each packet's payload straight from the region
//! (sendmsg iovecs) puts the same bytes on the wire, ICRC included, as one
//! that takes whole packets; what cannot be sent that way (encrypted QPs)
//! comes whole; a failed gather leaves no hole behind; and the memory of a
//! hole can be read back only while its region stands.

use roce_proto::testkit::*;
use roce_proto::*;

/// Datagrams in the order sent: (sender, bytes).
type Trace = Vec<(usize, Vec<u8>)>;

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29).wrapping_add(salt)).collect()
}

/// Moves packets between the pair's engines as a batching driver would:
/// GSO-style batches of up to 16 datagrams, each delivered on its own, until
/// both are quiet (timers fired when the wire is idle). With `refs`, the
/// batches come with their payload left in memory and the holes are filled
/// in (`Engine::fill_holes`, what a driver's iovecs amount to) before
/// delivery. Every datagram joins the returned trace; the second value
/// counts the holes.
fn run(p: &mut Pair, refs: bool) -> (Trace, usize) {
    let mut buf = vec![0u8; 16 * MAX_DATAGRAM];
    let mut holes = Vec::new();
    let (mut trace, mut seen) = (Vec::new(), 0);
    loop {
        let mut moved = false;
        for s in [A, B] {
            loop {
                holes.clear();
                let tx = if refs {
                    p.e[s].poll_transmit_batch_refs(p.now, &mut buf, 16, &mut holes)
                } else {
                    p.e[s].poll_transmit_batch(p.now, &mut buf, 16)
                };
                let Some(tx) = tx else { break };
                moved = true;
                seen += holes.len();
                for h in &holes {
                    // every hole lies inside one datagram, after its BTH,
                    // before its ICRC
                    let (k, seg) = (h.at / tx.segment_size, tx.segment_size);
                    let end = ((k + 1) * seg).min(tx.len);
                    assert!(h.at >= k * seg + 12 && h.end() <= end - 4, "{h:?} in {tx:?}");
                }
                p.e[s].fill_holes(&mut buf, &holes).unwrap();
                for d in buf[..tx.len].chunks(tx.segment_size) {
                    p.e[1 - s].handle_datagram(p.now, &tx.meta, d);
                    trace.push((s, d.to_vec()));
                }
            }
        }
        if !moved && !p.advance() {
            return (trace, seen);
        }
    }
}

/// A WRITE of 10,000 bytes gathered from two regions, a SEND of 3,000 and a
/// READ of 5,000 at MTU 1024 on one QP; on another, a WRITE whose second
/// SGE names no region (its first SGE's pieces are gathered before the
/// failure); then another WRITE on the first. `keys`: every QP encrypts.
fn exchange(refs: bool, keys: bool) -> (Pair, Trace, usize, [Region; 3]) {
    let mut p = Pair::new(31);
    let [qa, qb] = [A, B].map(|s| p.e[s].create_qp(p.qp_init(s, QpType::Rc)).unwrap());
    let [qa2, qb2] = [A, B].map(|s| p.e[s].create_qp(p.qp_init(s, QpType::Rc)).unwrap());
    if keys {
        let k = |tx: u8, rx: u8| QpKeys {
            tx: DirectionKey { key: [tx; 16], salt: [tx; 4] },
            rx: DirectionKey { key: [rx; 16], salt: [rx; 4] },
        };
        for (q, r) in [(qa, qb), (qa2, qb2)] {
            p.e[A].set_qp_keys(q, &k(1, 2)).unwrap();
            p.e[B].set_qp_keys(r, &k(2, 1)).unwrap();
        }
    }
    p.connect_qps([qa, qb], PathMtu::Mtu1024, [100, 200], |_, _| {}).unwrap();
    p.connect_qps([qa2, qb2], PathMtu::Mtu1024, [300, 400], |_, _| {}).unwrap();
    let src = p.region(A, 65536, 0x1000_0000, Access::ALL);
    let src2 = p.region(A, 8192, 0x3000_0000, Access::ALL);
    let dst = p.region(B, 65536, 0x2000_0000, Access::ALL);
    p.put(&src, 0, &pattern(60_000, 7));
    p.put(&src2, 0, &pattern(8192, 91));
    p.put(&dst, 40_000, &pattern(5000, 33));
    let write = |id, at: u64, sges| {
        SendWr::new(id, SendOp::Write { remote_addr: dst.keys.addr + at, rkey: dst.keys.rkey }, sges)
    };
    p.e[A].post_send(qa, write(1, 0, vec![sge(&src, 0, 6000), sge(&src2, 100, 4000)])).unwrap();
    p.e[B].post_recv(qb, RecvWr { wr_id: 77, sg_list: vec![sge(&dst, 20_000, 4000)] }).unwrap();
    p.e[A].post_send(qa, SendWr::new(2, SendOp::Send, vec![sge(&src, 100, 3000)])).unwrap();
    let read = SendOp::Read { remote_addr: dst.keys.addr + 40_000, rkey: dst.keys.rkey };
    p.e[A].post_send(qa, SendWr::new(3, read, vec![sge(&src, 30_000, 5000)])).unwrap();
    let bad = Sge { addr: 0x5000_0000, length: 3000, lkey: 0xdead_0000 };
    p.e[A].post_send(qa2, write(4, 50_000, vec![sge(&src, 0, 2000), bad])).unwrap();
    p.e[A].post_send(qa, write(5, 56_000, vec![sge(&src, 40_000, 2500)])).unwrap();
    let (trace, holes) = run(&mut p, refs);
    (p, trace, holes, [src, src2, dst])
}

fn completions(p: &mut Pair, side: usize) -> Vec<(u64, WcStatus, u32)> {
    p.poll(side).iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect()
}

#[test]
fn payload_sent_from_memory_gives_the_same_bytes_on_the_wire() {
    let (mut c, ct, none, _) = exchange(false, false);
    let (mut r, rt, holes, [src, _, dst]) = exchange(true, false);
    assert_eq!(none, 0);
    // WRITE: 10 packets, the one across the two regions with two holes;
    // SEND: 3; READ responses: 5; the last WRITE: 3. Each leaves its
    // payload in memory but for a packet that waits for the next batch
    // (one that is longer than the batch's: a FIRST after a LAST).
    let payload_packets = 10 + 3 + 5 + 3;
    assert!(holes > payload_packets / 2 && holes <= payload_packets + 1, "{holes} holes");
    assert_eq!(rt.len(), ct.len());
    for (i, (a, b)) in rt.iter().zip(&ct).enumerate() {
        assert_eq!(a, b, "datagram {i} differs");
    }
    for side in [A, B] {
        assert_eq!(completions(&mut r, side), completions(&mut c, side), "side {side}");
    }
    let wa = completions(&mut exchange(true, false).0, A);
    assert!(wa.iter().any(|w| w.0 == 4 && w.1 == WcStatus::LocProtErr), "{wa:?}");
    assert!(wa.contains(&(5, WcStatus::Success, 2500)), "{wa:?}");
    // and the data landed
    let b = r.mem(&dst);
    let data = pattern(60_000, 7);
    assert_eq!(b[..6000], data[..6000]);
    assert_eq!(b[6000..10_000], pattern(8192, 91)[100..4100]);
    assert_eq!(b[20_000..23_000], data[100..3100]);
    assert_eq!(b[56_000..58_500], data[40_000..42_500]);
    assert_eq!(r.mem(&src)[30_000..35_000], pattern(5000, 33)[..]);
}

#[test]
fn an_encrypting_qp_sends_whole_packets() {
    let (_, ct, _, _) = exchange(false, true);
    let (mut r, rt, holes, [src, ..]) = exchange(true, true);
    assert_eq!(rt, ct);
    assert_eq!(holes, 0);
    assert_eq!(r.mem(&src)[30_000..35_000], pattern(5000, 33)[..]);
}

#[test]
fn a_holes_memory_is_read_back_only_while_its_region_stands() {
    let mut p = Pair::new(5);
    let c = p.connect(PathMtu::Mtu1024, [1, 2], |_| {});
    let src = p.region(A, 8192, 0x1000, Access::ALL);
    let dst = p.region(B, 8192, 0x9000, Access::ALL);
    p.put(&src, 0, &pattern(8192, 3));
    let wr = SendWr::new(
        1,
        SendOp::Write { remote_addr: dst.keys.addr, rkey: dst.keys.rkey },
        vec![sge(&src, 0, 3000)],
    );
    p.e[A].post_send(c.qpn[0], wr).unwrap();
    let mut buf = vec![0u8; 4 * MAX_DATAGRAM];
    let mut holes = Vec::new();
    let tx = p.e[A].poll_transmit_batch_refs(p.now, &mut buf, 4, &mut holes).unwrap();
    assert_eq!((tx.segments(), holes.len()), (2, 2));
    let mut whole = buf.clone();
    p.e[A].fill_holes(&mut whole, &holes).unwrap();
    assert_eq!(whole[holes[0].at..holes[0].end()], pattern(8192, 3)[..1024]);
    // a hole outside the buffer given is refused
    assert!(matches!(p.e[A].fill_holes(&mut whole[..100], &holes), Err(VerbsError::OutsideRegion { .. })));
    p.e[A].dereg_mr(src.keys.lkey).unwrap();
    assert_eq!(p.e[A].fill_holes(&mut buf, &holes), Err(VerbsError::NotFound(Object::Mr)));
}
