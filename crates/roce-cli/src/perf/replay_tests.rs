//! Our exchange against real perftest 4.5 conversations: the TCP streams
//! of `testdata/softroce/*.pcap` are replayed, the captured server's side
//! against our client and the captured client's side against our server.
//! Our end must send the same messages (sizes, order and kind, with its own
//! values) and nothing more.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use roce::PathMtu;

use super::exchange::{BwReport, KeyMsg, Oob, Role, Verdict, KEY_MSG_LEN};
use super::flow::{self, FlowSpec, Lat, Side};
use super::report::LatReport;
use super::{Kind, Test, Verb};
use crate::oob::gid_bytes;
use crate::oob::test_support::{tcp_stream, Segment};
use crate::oob::Result;

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/softroce").join(name)
}

/// The kind of a perftest message, from its size and content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Version,
    Int32,
    Mtu,
    Keys,
    Report,
    Done,
}

fn classify(b: &[u8]) -> Option<Msg> {
    match b.len() {
        16 if b[0].is_ascii_digit() && b.contains(&0) => Some(Msg::Version),
        4 => Some(Msg::Int32),
        2 if (b'1'..=b'5').contains(&b[0]) && b[1] == 0 => Some(Msg::Mtu),
        KEY_MSG_LEN if KeyMsg::decode(b).is_ok() => Some(Msg::Keys),
        8 => Some(Msg::Report),
        5 if b == b"done\0" => Some(Msg::Done),
        _ => None,
    }
}

/// A side without RDMA: fixed keys, instant runs.
struct FakeSide {
    keys: Vec<KeyMsg>,
    peer_keys: Vec<KeyMsg>,
    runs: usize,
}

impl FakeSide {
    fn new() -> FakeSide {
        let k = KeyMsg {
            out_reads: 1,
            qpn: 0x11,
            psn: 0x123456,
            rkey: 0xabc,
            vaddr: 0x7f00_0000_1000,
            gid: gid_bytes("127.0.0.1".parse().unwrap()),
            ..KeyMsg::default()
        };
        FakeSide { keys: vec![k], peer_keys: Vec::new(), runs: 0 }
    }
}

impl Side for FakeSide {
    fn setup(&mut self, _mtu: PathMtu, _cycle_buffer: usize) -> Result<Vec<KeyMsg>> {
        Ok(self.keys.clone())
    }
    fn print_header(&mut self) {}
    fn connect(
        &mut self,
        remote: &[KeyMsg],
        _peer_is_roce: bool,
        _session: Option<&roce::crypto::Session>,
    ) -> Result<()> {
        self.peer_keys = remote.to_vec();
        Ok(())
    }
    fn print_local(&mut self, _local: &[KeyMsg]) {}
    fn print_remote(&mut self, _remote: &KeyMsg) {}
    fn print_results_header(&mut self) {}
    fn prepare_recv(&mut self, _size: u64) -> Result<()> {
        Ok(())
    }
    fn run_bw(&mut self, size: u64) -> Result<BwReport> {
        self.runs += 1;
        Ok(BwReport { size, iters: 5, bw_peak: 1.0, bw_avg: 1.0, msg_rate: 0.1 })
    }
    fn run_bw_server(&mut self, size: u64) -> Result<BwReport> {
        self.run_bw(size)
    }
    fn run_lat(&mut self, size: u64) -> Result<Lat> {
        self.runs += 1;
        Ok(Lat::Iters(LatReport {
            size,
            iters: 5,
            t_min: 1.0,
            t_max: 1.0,
            t_typical: 1.0,
            t_avg: 1.0,
            t_stdev: 0.0,
            p99: 1.0,
            p99_9: 1.0,
        }))
    }
    fn show_bw(&mut self, _mine: &BwReport, _peer: Option<&BwReport>) {}
    fn show_lat(&mut self, _r: &Lat) {}
    fn print_footer(&mut self) {}
    fn check(&mut self, _size: u64, _peer_iters: u64) -> Verdict {
        Verdict::Skipped
    }
    fn peer_verdict(&mut self, _v: Verdict) {}
}

/// Plays the captured messages of one end (`play_client`) over `s`, reads
/// what the other end (ours) sends in the sizes the capture has, and then
/// everything until our end closes. Returns our messages and the extra bytes.
fn play(mut s: TcpStream, segs: &[Segment], play_client: bool) -> (Vec<Vec<u8>>, Vec<u8>) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut ours = Vec::new();
    for seg in segs {
        if seg.from_client == play_client {
            s.write_all(&seg.data).unwrap();
        } else {
            let mut b = vec![0u8; seg.data.len()];
            s.read_exact(&mut b).unwrap_or_else(|e| panic!("reading our message {}: {e}", ours.len()));
            ours.push(b);
        }
    }
    let mut extra = Vec::new();
    let _ = s.read_to_end(&mut extra);
    (ours, extra)
}

fn spec(verb: Verb, kind: Kind, size: u64) -> FlowSpec {
    FlowSpec {
        test: Test { verb, kind },
        duplex: false,
        sizes: vec![size],
        mtu: PathMtu::Mtu4096,
        linger: Duration::from_secs(10),
    }
}

fn check_ours(name: &str, segs: &[Segment], ours_are_client: bool, ours: &[Vec<u8>], extra: &[u8]) {
    let theirs: Vec<&Segment> = segs.iter().filter(|s| s.from_client == ours_are_client).collect();
    assert_eq!(ours.len(), theirs.len(), "{name}");
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        let (ko, kt) = (classify(o), classify(&t.data));
        assert!(kt.is_some(), "{name}: captured message {i} unknown: {:?}", t.data);
        assert_eq!(ko, kt, "{name}: message {i}: ours {o:?}, perftest's {:?}", t.data);
        if ko == Some(Msg::Keys) {
            let k = KeyMsg::decode(o).unwrap();
            assert_eq!((k.qpn, k.psn, k.rkey), (0x11, 0x123456, 0xabc), "{name}: our own keys");
        }
        if ko == Some(Msg::Version) {
            assert!(o.starts_with(b"6.06\0"), "{name}");
        }
    }
    assert!(extra.is_empty(), "{name}: we sent {} bytes more than perftest: {extra:?}", extra.len());
}

fn replay(name: &str, s: FlowSpec) {
    let segs = tcp_stream(&testdata(&format!("{name}.pcap")), 18515);
    assert!(segs.len() > 10, "{name}: TCP stream found");
    // Our client against the captured server.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let segs2 = segs.clone();
    let fake = std::thread::spawn(move || play(l.accept().unwrap().0, &segs2, false));
    let mut oob = Oob::new(TcpStream::connect(addr).unwrap(), Role::Client);
    let mut side = FakeSide::new();
    flow::drive(&mut oob, &s, &mut side).unwrap_or_else(|e| panic!("{name} client: {e}"));
    drop(oob);
    let (ours, extra) = fake.join().unwrap();
    check_ours(&format!("{name} (our client)"), &segs, true, &ours, &extra);
    assert!(side.runs >= 1 || s.test.kind == Kind::Bw, "{name}");
    let captured_server =
        KeyMsg::decode(&segs.iter().find(|s| !s.from_client && s.data.len() == KEY_MSG_LEN).unwrap().data);
    assert_eq!(side.peer_keys, vec![captured_server.unwrap()], "{name}: the captured server's keys");

    // Our server against the captured client.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let segs2 = segs.clone();
    let fake = std::thread::spawn(move || play(TcpStream::connect(addr).unwrap(), &segs2, true));
    let mut oob = Oob::new(l.accept().unwrap().0, Role::Server);
    let mut side = FakeSide::new();
    flow::drive(&mut oob, &s, &mut side).unwrap_or_else(|e| panic!("{name} server: {e}"));
    drop(oob);
    let (ours, extra) = fake.join().unwrap();
    check_ours(&format!("{name} (our server)"), &segs, false, &ours, &extra);
}

#[test]
fn write_bw_exchange_matches_perftest() {
    replay("write_bw_4k", spec(Verb::Write, Kind::Bw, 4096));
    replay("write_bw_64k_mtu1024", spec(Verb::Write, Kind::Bw, 65536));
}

#[test]
fn read_bw_exchange_matches_perftest() {
    replay("read_bw_4k", spec(Verb::Read, Kind::Bw, 4096));
}

#[test]
fn send_bw_exchange_matches_perftest() {
    replay("send_bw_4k", spec(Verb::Send, Kind::Bw, 4096));
}

#[test]
fn atomic_bw_exchange_matches_perftest() {
    replay("atomic_cmp_swap", spec(Verb::Atomic, Kind::Bw, 8));
}

#[test]
fn write_lat_exchange_matches_perftest() {
    replay("write_lat_64B", spec(Verb::Write, Kind::Lat, 64));
}

#[test]
fn send_lat_exchange_matches_perftest() {
    replay("send_lat_64B", spec(Verb::Send, Kind::Lat, 64));
}

#[test]
fn captured_values_decode() {
    let segs = tcp_stream(&testdata("write_bw_4k.pcap"), 18515);
    assert_eq!(segs[0].data, b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
    assert_eq!(segs[4].data, [0, 0, 0, 0x40]);
    assert_eq!(segs[6].data, b"3\0");
    // The client's report: size 4096, 5 iterations, 2.56 MB/sec.
    let rep: Vec<&Segment> = segs.iter().filter(|s| s.from_client && s.data.len() == 8).collect();
    let slots: [[u8; 8]; 5] = std::array::from_fn(|i| rep[i].data.clone().try_into().unwrap());
    let r = BwReport::from_slots(&slots);
    assert_eq!((r.size, r.iters), (4096, 5));
    assert!((r.bw_peak - 2.56).abs() < 0.01 && (r.msg_rate - 0.000656).abs() < 1e-6, "{r:?}");
}
