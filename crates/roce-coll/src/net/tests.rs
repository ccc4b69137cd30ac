//! The transport between two ranks (threads) on loopback.

use super::*;
use crate::rendezvous::RendezvousConfig;

fn pair(channels: usize, f: impl Fn(&mut RoceTransport) + Send + Sync + Copy + 'static) {
    group(2, channels, f)
}

fn group(world: usize, channels: usize, f: impl Fn(&mut RoceTransport) + Send + Sync + Copy + 'static) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let hs: Vec<_> = (0..world)
        .map(|rank| {
            thread::spawn(move || {
                let mut rdv = Rendezvous::join(RendezvousConfig {
                    addr: format!("127.0.0.1:{port}"),
                    rank,
                    world,
                    timeout: Duration::from_secs(10),
                })
                .unwrap();
                let layout = Layout { channels, slots: 4, slot_bytes: 4096 };
                let mut t =
                    RoceTransport::connect(&mut rdv, NetConfig { layout, ..NetConfig::default() }).unwrap();
                f(&mut t);
                rdv.finish().unwrap();
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// Waits until `done` says the completions so far are enough.
fn collect(t: &mut RoceTransport, out: &mut Vec<Completion>, done: impl Fn(&[Completion]) -> bool) {
    let deadline = t.now_ns() + 10_000_000_000;
    while !done(out) {
        assert!(t.now_ns() < deadline, "only {out:?}");
        t.wait(t.now_ns() + 50_000_000).unwrap();
        t.poll(out).unwrap();
    }
}

fn is_credit(c: &Completion) -> bool {
    matches!(c, Completion::Arrived { imm, .. } if matches!(Imm::parse(*imm), Imm::Credit { .. }))
}

/// Data written into every (channel, slot) arrives intact in the peer's
/// slot with its immediate; the writer sees each token once; credits
/// arrive as zero-length notifies.
#[test]
fn writes_and_notifies_arrive_on_every_channel() {
    pair(2, |t| {
        let peer = 1 - t.rank();
        let mut tokens = Vec::new();
        for c in 0..2 {
            for s in 0..4 {
                let len = 100 + 1000 * s + c;
                let fill = (t.rank() * 16 + c * 4 + s) as u8;
                t.stage(peer, c, s, &mut |b| b[..len].fill(fill)).unwrap();
                t.write(peer, c, s, len, Imm::data(7, s), (c * 10 + s) as u64).unwrap();
                tokens.push((c * 10 + s) as u64);
            }
        }
        let mut got = Vec::new();
        collect(t, &mut got, |g| g.iter().filter(|c| !is_credit(c)).count() == 16);
        let mut sent: Vec<u64> = got
            .iter()
            .filter_map(|c| match c {
                Completion::Sent { peer: p, token, .. } if *p == peer => Some(*token),
                _ => None,
            })
            .collect();
        sent.sort();
        assert_eq!(sent, tokens);
        for comp in &got {
            if is_credit(comp) {
                continue;
            }
            if let Completion::Arrived { peer: p, channel, imm } = *comp {
                assert_eq!(p, peer);
                let Imm::Data { slot, .. } = Imm::parse(imm) else { panic!("{imm:#x}") };
                let len = 100 + 1000 * slot + channel;
                let fill = (peer * 16 + channel * 4 + slot) as u8;
                let mut ok = false;
                t.read_slot(peer, channel, slot, &mut |b| ok = b[..len].iter().all(|&x| x == fill)).unwrap();
                assert!(ok, "channel {channel} slot {slot}");
            }
        }
        for c in 0..2 {
            t.notify(peer, c, Imm::credit(3)).unwrap();
        }
        collect(t, &mut got, |g| g.iter().filter(|c| is_credit(c)).count() == 2);
        assert_eq!(got.len(), 18);
        assert!(got.iter().filter(|c| is_credit(c)).all(
            |c| matches!(c, Completion::Arrived { imm, .. } if Imm::parse(*imm) == Imm::Credit { slot: 3 })
        ));
        // Let the last ACKs out before the QPs go.
        let _ = t.wait(t.now_ns() + 100_000_000);
    });
}

/// Each channel has its own UDP port: the QPs of a peer pair leave from
/// different source ports.
#[test]
fn channels_use_distinct_source_ports() {
    pair(3, |t| {
        let ports: std::collections::HashSet<u16> = t.local_addrs().iter().map(|a| a.port()).collect();
        assert_eq!(ports.len(), 3);
    });
}

/// Three ranks, so peer indices differ between the two ends of a pair:
/// every (sender, channel, slot) lands where the receiver reads it.
#[test]
fn every_peer_channel_and_slot_lands_in_its_place() {
    group(3, 2, |t| {
        let me = t.rank();
        let peers: Vec<usize> = (0..3).filter(|&p| p != me).collect();
        for &p in &peers {
            for c in 0..2 {
                for s in 0..4 {
                    let fill = (me * 50 + p * 10 + c * 4 + s) as u8;
                    t.stage(p, c, s, &mut |b| b[..500].fill(fill)).unwrap();
                    t.write(p, c, s, 500, Imm::data(1, s), 0).unwrap();
                }
            }
        }
        let mut got = Vec::new();
        collect(t, &mut got, |g| g.iter().filter(|c| matches!(c, Completion::Arrived { .. })).count() == 16);
        for comp in &got {
            if let Completion::Arrived { peer, channel, imm } = *comp {
                let Imm::Data { slot, .. } = Imm::parse(imm) else { panic!("{imm:#x}") };
                let fill = (peer * 50 + me * 10 + channel * 4 + slot) as u8;
                let mut ok = false;
                t.read_slot(peer, channel, slot, &mut |b| ok = b[..500].iter().all(|&x| x == fill)).unwrap();
                assert!(ok, "from {peer} {channel} {slot}");
            }
        }
        collect(t, &mut got, |g| g.iter().filter(|c| matches!(c, Completion::Sent { .. })).count() == 16);
        let _ = t.wait(t.now_ns() + 100_000_000);
    });
}

/// Ranks count each other as one host when they share an address or are
/// all on loopback (what `--np` does), and not otherwise.
#[test]
fn ranks_on_one_host_are_counted_by_address() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(same_host(ip("10.0.0.1"), ip("10.0.0.1")));
    assert!(same_host(ip("127.0.0.1"), ip("127.0.0.3")));
    assert!(same_host(ip("::1"), ip("127.0.0.2")));
    assert!(same_host(ip("::ffff:10.0.0.1"), ip("10.0.0.1")));
    assert!(!same_host(ip("10.0.0.1"), ip("10.0.0.2")));
    assert!(!same_host(ip("127.0.0.1"), ip("10.0.0.1")));
    // A core each: spin; more ranks than cores: sleep at once.
    assert_eq!(auto_spin(2, 2), AUTO_SPIN);
    assert_eq!(auto_spin(1, 1), AUTO_SPIN);
    assert_eq!(auto_spin(3, 2), Duration::ZERO);
    group(3, 1, |t| {
        let p = t.wait_policy();
        assert_eq!(p.ranks_here, 3);
        assert!(p.auto);
        assert_eq!(p.spin, auto_spin(3, p.cores));
    });
}

/// More credits than the credit QP's send queue holds (`slots + 8` = 12):
/// `notify` holds the rest and `poll` posts them as completions make room;
/// all 40 arrive, none fails.
#[test]
fn credits_beyond_the_queue_are_held_then_delivered() {
    pair(1, |t| {
        let peer = 1 - t.rank();
        for k in 0..40 {
            t.notify(peer, 0, Imm::credit(k % 4)).unwrap();
        }
        let mut out = Vec::new();
        collect(t, &mut out, |o| o.iter().filter(|c| is_credit(c)).count() >= 40);
        assert_eq!(out.iter().filter(|c| is_credit(c)).count(), 40);
        // the peer's 40 came in; let ours finish before the QPs go
        let deadline = t.now_ns() + 2_000_000_000;
        while !t.credit_backlog.is_empty() && t.now_ns() < deadline {
            t.wait(t.now_ns() + 10_000_000).unwrap();
            t.poll(&mut out).unwrap();
        }
        assert!(t.credit_backlog.is_empty());
    });
}
