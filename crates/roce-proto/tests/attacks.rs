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

/// Every datagram `side` has to send now, with where it goes.
fn take(p: &mut Pair, side: usize) -> Vec<(DatagramMeta, Vec<u8>)> {
    let mut buf = vec![0; MAX_DATAGRAM];
    let mut out = Vec::new();
    while let Some(tx) = p.e[side].poll_transmit(p.now, &mut buf) {
        out.push((tx.meta, buf[..tx.len].to_vec()));
    }
    out
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
    let (meta, pkt) = take(&mut p, A).remove(0);
    let evil = from(&meta, MALLORY);
    p.deliver(B, &evil, &forge(&evil, &pkt, |_| {}));
    assert_eq!(p.get(&dst, 0, 64), vec![0; 64], "the forged WRITE landed");
    assert_eq!(p.e[B].counters().addr_mismatch_dropped, 1);
    assert!(take(&mut p, B).is_empty(), "answered a stranger");
}

/// Forged NAK (ReDMArk's "QP killing"): a remote access error NAK for the
/// live PSN, from another address, must not end the requester's QP.
#[test]
fn forged_nak_from_another_address_does_not_end_the_qp() {
    let (mut p, c, src, dst) = setup(2);
    p.put(&src, 0, &[0x5a; 4096]);
    p.e[A].post_send(c.qpn[0], write(1, &dst, 0, &src, 0, 4096)).unwrap();
    let reqs = take(&mut p, A);
    let psn = RocePacketRepr::parse(&reqs[0].1).unwrap().bth.psn;
    for (m, b) in &reqs {
        p.deliver(B, m, b);
    }
    let (ack_meta, ack) = take(&mut p, B).remove(0);
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
    let reqs = take(&mut p, A);
    let last = RocePacketRepr::parse(&reqs.last().unwrap().1).unwrap().bth.psn;
    // An ACK as B would send it, learnt from another connection's traffic
    // shape: build it from a real one of a second pair.
    let (mut q, qc, qsrc, qdst) = setup(3);
    q.e[A].post_send(qc.qpn[0], write(1, &qdst, 0, &qsrc, 0, 8)).unwrap();
    for (m, b) in take(&mut q, A) {
        q.deliver(B, &m, &b);
    }
    let (mut ack_meta, ack) = take(&mut q, B).remove(0);
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
    let reqs = take(&mut p, A);
    for (m, b) in &reqs {
        p.deliver(B, m, b);
    }
    let (ack_meta, ack) = take(&mut p, B).remove(0);
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
    let (meta, pkt) = take(&mut p, A).remove(0);
    let other = DatagramMeta { src_port: meta.src_port ^ 1, ..meta };
    p.deliver(B, &other, &forge(&other, &pkt, |_| {}));
    assert_eq!(p.e[B].counters().port_mismatch_dropped, 1);
    assert_eq!(p.get(&dst, 8, 8), vec![0; 8]);
    p.deliver(B, &meta, &pkt);
    p.run();
    assert_eq!(p.get(&dst, 8, 8), vec![1; 8]);
}
