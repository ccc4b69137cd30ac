//! The ping tool against captured stock conversations, its pacing, and
//! how a run on a dead device fails.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use roce::WcStatus;

use super::end::results;
use super::exchange::{client_exchange, server_exchange, Dest, MSG_LEN};
use super::tally::{Seen, Tally, RECV_WRID, SEND_WRID};
use super::{exit_status, run};
use crate::oob::gid_bytes;
use crate::oob::test_support::{tcp_stream, Segment};

/// A device that dies under the ping-pong (its driver thread killed
/// once opened, as an engine panic would) fails the run with an error
/// that says so, and the exit status is 1.
#[test]
fn ping_reports_a_dead_device_and_fails() {
    use clap::Parser;
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    crate::report::KILL_ON_OPEN.lock().unwrap().push(port);
    let p = port.to_string();
    let argv = ["roce", "ping", "--loopback", "--udp-port", &p, "-n", "20", "--timeout", "10"];
    let crate::Command::Ping(a) = crate::Cli::try_parse_from(argv).unwrap().command else { unreachable!() };
    let r = run(&a);
    let e = r.as_ref().expect_err("a run on a dead device fails");
    assert!(e.to_string().contains("the driver thread panicked: injected by a test of the tools"), "{e}");
    assert_eq!(format!("{:?}", exit_status(r)), format!("{:?}", ExitCode::from(1)));
}
#[test]
fn address_message_matches_ibv_rc_pingpong() {
    let captured = b"0000:000012:6bbad9:00000000000000000000ffff0a2f0002\0";
    assert_eq!(captured.len(), MSG_LEN);
    let d = Dest::decode(captured).unwrap();
    assert_eq!((d.lid, d.qpn, d.psn), (0, 0x12, 0x6bbad9));
    assert_eq!(d.gid_text(), "::ffff:10.47.0.2");
    assert_eq!(&d.encode(), captured);
    assert_eq!(
        d.line("local"),
        "  local address:  LID 0x0000, QPN 0x000012, PSN 0x6bbad9, GID ::ffff:10.47.0.2"
    );
    assert!(Dest::decode(b"0000:12:zz:00\0").is_err());
    assert!(Dest::decode("0000:000012:6bbad9:é0000000000000000000ffff0a2f000".as_bytes()).is_err());
    let t = results(4096, 4, Duration::from_micros(41267));
    assert_eq!(
        t,
        "32768 bytes in 0.04 seconds = 6.35 Mbit/sec\n4 iters in 0.04 seconds = 10316.75 usec/iter"
    );
}

/// A client's run: every send and every answer, in pingpong order.
fn client_run(t: &mut Tally, iters: u64) {
    for _ in 0..iters - 1 {
        assert_eq!(t.take(SEND_WRID, WcStatus::Success).unwrap(), Seen::Send);
        assert!(!t.send_due());
        assert_eq!(t.take(RECV_WRID, WcStatus::Success).unwrap(), Seen::Recv);
        assert!(t.send_due());
    }
}

#[test]
fn tally_paces_sends_like_rc_pingpong() {
    let mut t = Tally::new(3, true);
    client_run(&mut t, 3);
    assert!(!t.done());
    // The answer may overtake the SEND's completion.
    assert_eq!(t.take(RECV_WRID, WcStatus::Success).unwrap(), Seen::Recv);
    assert!(!t.send_due() && !t.done());
    assert_eq!(t.take(SEND_WRID, WcStatus::Success).unwrap(), Seen::Send);
    assert!(!t.send_due() && t.done());
    // The server sends only after a receive.
    let mut s = Tally::new(2, false);
    assert!(!s.send_due());
    s.take(RECV_WRID, WcStatus::Success).unwrap();
    assert!(s.send_due());
    assert!(s.take(7, WcStatus::Success).is_err());
}

/// The last ACK lost and the server gone: the client's last SEND fails
/// after every answer arrived, which completes the run; any other
/// failure does not.
#[test]
fn tally_forgives_only_the_last_ack() {
    let mut t = Tally::new(3, true);
    client_run(&mut t, 3);
    t.take(RECV_WRID, WcStatus::Success).unwrap();
    assert_eq!(t.take(SEND_WRID, WcStatus::RetryExcErr).unwrap(), Seen::LastAckLost);
    assert!(t.done());

    // Answers missing: a real failure.
    let mut t = Tally::new(3, true);
    client_run(&mut t, 3);
    assert!(t.take(SEND_WRID, WcStatus::RetryExcErr).is_err());
    // An earlier SEND: a real failure.
    let mut t = Tally::new(3, true);
    assert!(t.take(SEND_WRID, WcStatus::RetryExcErr).is_err());
    // Another status, or the server side: a real failure.
    let mut t = Tally::new(3, true);
    client_run(&mut t, 3);
    t.take(RECV_WRID, WcStatus::Success).unwrap();
    assert!(t.take(SEND_WRID, WcStatus::RemAccessErr).is_err());
    let mut s = Tally::new(1, false);
    s.take(RECV_WRID, WcStatus::Success).unwrap();
    assert!(s.send_due());
    assert!(s.take(SEND_WRID, WcStatus::RetryExcErr).is_err());
    // A flushed receive before the end: a real failure.
    let mut t = Tally::new(3, true);
    assert!(t.take(RECV_WRID, WcStatus::WrFlushErr).is_err());
}

fn segments(name: &str) -> Vec<Segment> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/softroce").join(name);
    tcp_stream(&p, 18515)
}

fn mine() -> Dest {
    Dest { lid: 0, qpn: 0x21, psn: 0xabcdef, gid: gid_bytes("127.0.0.1".parse().unwrap()) }
}

/// Our client against the captured server, our server against the captured client.
#[test]
fn exchange_replays_ibv_rc_pingpong() {
    for name in ["rc_pingpong.pcap", "rc_pingpong_64B.pcap"] {
        let segs = segments(name);
        assert_eq!(
            segs.iter().map(|s| (s.from_client, s.data.len())).collect::<Vec<_>>(),
            [(true, 52), (false, 52), (true, 5)]
        );
        // client
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server_msg = segs[1].data.clone();
        let fake = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut a = [0u8; MSG_LEN];
            s.read_exact(&mut a).unwrap();
            s.write_all(&server_msg).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            (a, rest)
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let (peer, _) = client_exchange(&mut s, &mine(), &None).unwrap();
        drop(s);
        assert_eq!(peer, Dest::decode(&segs[1].data).unwrap());
        let (a, rest) = fake.join().unwrap();
        assert_eq!(Dest::decode(&a).unwrap(), mine());
        assert_eq!(rest, b"done\0");
        // server
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (c1, c2) = (segs[0].data.clone(), segs[2].data.clone());
        let fake = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&c1).unwrap();
            let mut a = [0u8; MSG_LEN];
            s.read_exact(&mut a).unwrap();
            s.write_all(&c2).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            (a, rest)
        });
        let (mut s, _) = l.accept().unwrap();
        let mut connected = None;
        let t = Duration::from_secs(10);
        let peer = server_exchange(&mut s, &mine(), Instant::now() + t, t, &None, |d, _| {
            connected = Some(*d);
            Ok(())
        })
        .unwrap();
        drop(s);
        assert_eq!(connected, Some(peer));
        assert_eq!(peer, Dest::decode(&segs[0].data).unwrap());
        let (a, rest) = fake.join().unwrap();
        assert_eq!(Dest::decode(&a).unwrap(), mine());
        assert!(rest.is_empty());
    }
}

/// The server's exchange fails with an error that says what went wrong:
/// a malformed address, a client gone before its "done", a client that
/// says nothing until the budget is spent.
#[test]
fn server_exchange_errors_say_what_failed() {
    use crate::oob::Error;
    let serve = |client: fn(TcpStream), budget: Duration| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let fake = std::thread::spawn(move || client(TcpStream::connect(addr).unwrap()));
        let (mut s, _) = l.accept().unwrap();
        let r = server_exchange(&mut s, &mine(), Instant::now() + budget, budget, &None, |_, _| Ok(()));
        drop(s);
        fake.join().unwrap();
        r
    };
    let long = Duration::from_secs(10);
    let r = serve(|mut c| c.write_all(&[b'x'; MSG_LEN]).unwrap(), long);
    assert!(
        matches!(&r, Err(Error::Protocol(m)) if m.starts_with("malformed address from the peer")),
        "{r:?}"
    );
    let r = serve(
        |mut c| {
            c.write_all(&mine().encode()).unwrap();
            let mut a = [0u8; MSG_LEN];
            c.read_exact(&mut a).unwrap();
        },
        long,
    );
    let e = r.expect_err("a client gone before its done fails the exchange");
    assert!(matches!(&e, Error::Exchange { what, .. } if what.contains("done")), "{e:?}");
    let r = serve(
        |mut c| {
            let mut rest = Vec::new();
            let _ = c.read_to_end(&mut rest);
        },
        Duration::from_millis(200),
    );
    let e = r.expect_err("a silent client fails the exchange");
    assert!(matches!(e, Error::ExchangeTimeout { .. }), "{e:?}");
    assert!(e.to_string().starts_with("timed out in the exchange after "), "{e}");
}
