//! `roce perf`: perftest's benchmarks (ib_write_bw, ib_read_lat, ...) over
//! the UDP driver, with perftest's options, output and out-of-band TCP
//! exchange, so that either end can be a stock perftest.
//!
//! * `args`: the options, their checks and perftest's defaults ([`Conf`]);
//! * [`exchange`]: the TCP messages (version, MTU, keys, reports, "done");
//! * [`flow`]: the order of exchanges in each test program;
//! * [`run`]: the RDMA side (device, QPs, buffers, the bandwidth loops;
//!   the latency loops in `run/lat.rs`);
//! * [`report`]: statistics and perftest's tables.
//!
//! Server: `roce perf write-bw`; client: `roce perf write-bw SERVER`;
//! both in one process over 127.0.0.1: `roce perf write-bw --loopback`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::ValueEnum;

pub(crate) mod args;
pub mod exchange;
pub mod flow;
#[cfg(test)]
pub(crate) mod replay_tests;
pub mod report;
pub mod run;

pub use args::{Conf, PerfCommand, MAX_OUT_READS};
use exchange::{Oob, Role};
use flow::Failure;

use crate::oob::{self, Context as _, Error, Result, Tool};

/// The operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Send,
    Write,
    Read,
    Atomic,
}

impl Verb {
    /// perftest's `testsStr`.
    pub fn perftest_name(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bw,
    Lat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Test {
    pub verb: Verb,
    pub kind: Kind,
}

impl Test {
    /// perftest's program name without "ib_" (e.g. "write_bw").
    pub fn name(self) -> String {
        let v = format!("{:?}", self.verb).to_lowercase();
        let k = if self.kind == Kind::Bw { "bw" } else { "lat" };
        format!("{v}_{k}")
    }
}

/// `-A`: the atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AtomicType {
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
}

impl AtomicType {
    pub fn perftest_name(self) -> &'static str {
        match self {
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// `roce perf ...`: exit status 0 on success, 1 when the test fails, 2 for
/// bad arguments.
pub fn main(cmd: &PerfCommand) -> ExitCode {
    let (test, args) = cmd.split();
    let conf = match Conf::new(test, args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    exit_status(&run(&conf, args.loopback, args.server.as_deref()))
}

/// Runs the test in one process (`loopback`), as a client of `server`, or
/// as a server.
fn run(conf: &Conf, loopback_: bool, server_: Option<&str>) -> Result<()> {
    if loopback_ {
        loopback(conf)
    } else if let Some(s) = server_ {
        client(conf, s)
    } else {
        server(conf, None, None, false, true)
    }
}

/// The exit status of a test that ran: 0, or 1 with the error on stderr.
fn exit_status(r: &Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Options of one end of a test.
struct End {
    role: Role,
    udp_port: u16,
    pcap: Option<PathBuf>,
    quiet: bool,
}

fn client(conf: &Conf, server: &str) -> Result<()> {
    let addrs = oob::tcp::resolve(server, conf.tcp_port.unwrap_or(oob::DEFAULT_PORT))?;
    let stream = oob::tcp::connect(&addrs, conf.timeout, Tool::Perf)?;
    let end = End { role: Role::Client, udp_port: conf.udp_port, pcap: conf.pcap.clone(), quiet: false };
    client_end(conf, stream, &end)
}

/// The client's end of a test over `stream`.
fn client_end(conf: &Conf, stream: TcpStream, end: &End) -> Result<()> {
    let mut oob = Oob::new(stream, Role::Client);
    oob.set_encryption(conf.encrypt.clone());
    let ip = match conf.bind {
        Some(ip) => ip,
        None => oob.local_ip()?,
    };
    let mut side = open_side(conf, ip, end)?;
    let r = run_end(conf, &mut oob, &mut side, ip);
    side.finish(r.map_err(Failure::into_error))
}

/// Waits for a client on `listener` (or on `--bind`/any address and
/// `-p`), then runs the test. With `retry`, a client that fails the
/// exchange before the test is dropped (one line on stderr, its QPs and
/// buffers destroyed) and the next one served; the server ends with the
/// first test that begins.
fn server(
    conf: &Conf,
    listener: Option<TcpListener>,
    side: Option<run::RdmaSide>,
    quiet: bool,
    retry: bool,
) -> Result<()> {
    let end = End { role: Role::Server, udp_port: conf.udp_port, pcap: conf.pcap.clone(), quiet };
    // With a known address, open the device first: a busy UDP port is
    // reported before anybody connects.
    let mut side = match (side, conf.bind) {
        (Some(s), _) => Some(s),
        (None, Some(ip)) => Some(open_side(conf, ip, &end)?),
        (None, None) => None,
    };
    let mut listener = match listener {
        Some(l) => l,
        None => oob::tcp::listen(conf.tcp_port.unwrap_or(oob::DEFAULT_PORT))?,
    };
    if !quiet && !conf.json {
        println!("\n************************************");
        println!("* Waiting for client to connect... *");
        println!("************************************");
    }
    loop {
        let (stream, peer) = listener.accept().context("accepting the client")?;
        let accepted = Instant::now();
        let mut oob = Oob::new(stream, Role::Server);
        oob.set_encryption(conf.encrypt.clone());
        let ip = match conf.bind {
            Some(ip) => ip,
            None => oob.local_ip()?,
        };
        // Without --bind, the device is on the address the client reached:
        // one opened for an earlier client serves only the same address.
        if conf.bind.is_none() && side.as_ref().is_some_and(|s| s.device().gid() != ip) {
            side = None;
        }
        let mut s = match side.take() {
            Some(s) => s,
            None => open_side(conf, ip, &end)?,
        };
        oob.admit(accepted, conf.timeout, listener);
        s.hold_output();
        let r = run_end(conf, &mut oob, &mut s, ip);
        match (r, oob.take_listener()) {
            (Err(Failure::Exchange(e)), Some(l)) if retry => {
                eprintln!("roce perf: dropped client {}: {e}", oob::tcp::canonical(peer));
                drop(oob);
                s.reset();
                side = Some(s);
                listener = l;
            }
            (r, _) => return s.finish(r.map_err(Failure::into_error)),
        }
    }
}

fn open_side(conf: &Conf, ip: IpAddr, end: &End) -> Result<run::RdmaSide> {
    run::RdmaSide::open(conf, end.role, SocketAddr::new(ip, end.udp_port), end.pcap.clone(), end.quiet)
}

/// Runs the test over `oob` on `side`, whose device is on `ip`.
fn run_end(
    conf: &Conf,
    oob: &mut Oob,
    side: &mut run::RdmaSide,
    ip: IpAddr,
) -> std::result::Result<(), Failure> {
    let spec = flow::FlowSpec {
        test: conf.test,
        duplex: conf.duplex,
        sizes: conf.sizes.clone(),
        mtu: conf.mtu_for(ip),
        linger: conf.timeout,
    };
    let dev = side.device();
    oob.set_patience(conf.timeout, Box::new(move || dev.counters().rcvd_pkts));
    if conf.busy_poll {
        // A busy-polling device receives only when driven: keep it going
        // while we wait for the peer over TCP.
        let dev = side.device();
        oob.set_pump(Box::new(move || {
            let _ = dev.progress();
        }));
    }
    flow::drive(oob, &spec, side)
}

/// Server and client in one process, over real UDP between two devices.
fn loopback(conf: &Conf) -> Result<()> {
    let ip = conf.bind.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let listener =
        TcpListener::bind((ip, conf.tcp_port.unwrap_or(0))).context(format!("cannot listen on TCP {ip}"))?;
    let addr = listener.local_addr().context("TCP listener")?;
    let mut sconf = conf.clone();
    sconf.bind = Some(ip);
    sconf.pcap = None;
    sconf.json = false;
    // With -R the client owns --udp-port (4791): the server's CM answers
    // there, the client names the server's port (from the exchange).
    let (srv_port, cli_port) = if conf.rdma_cm { (0, conf.udp_port) } else { (conf.udp_port, 0) };
    let send = End { role: Role::Server, udp_port: srv_port, pcap: None, quiet: true };
    let side = open_side(&sconf, ip, &send)?;
    let srv = std::thread::Builder::new()
        .name("perf-server".into())
        .spawn(move || server(&sconf, Some(listener), Some(side), true, false))
        .context("starting the server thread")?;
    let mut cconf = conf.clone();
    cconf.bind = Some(ip);
    let end = End { role: Role::Client, udp_port: cli_port, pcap: conf.pcap.clone(), quiet: false };
    let c = oob::tcp::connect(&[addr], conf.timeout, Tool::Perf)
        .and_then(|stream| client_end(&cconf, stream, &end));
    let s = srv.join().unwrap_or(Err(Error::ServerPanicked));
    match (c, s) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(c), Ok(())) => Err(c),
        (Ok(()), Err(s)) => Err(Error::Server(Box::new(s))),
        (Err(c), Err(s)) => Err(Error::BothEnds { client: Box::new(c), server: Box::new(s) }),
    }
}

/// A device that dies under a test (its driver thread killed once opened,
/// as an engine panic would) fails the test with an error that says so,
/// and the exit status is 1.
#[cfg(test)]
mod dead_device_tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Command};

    #[test]
    fn perf_reports_a_dead_device_and_fails() {
        let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        crate::report::KILL_ON_OPEN.lock().unwrap().push(port);
        let p = port.to_string();
        let argv =
            ["roce", "perf", "write-bw", "--loopback", "--udp-port", &p, "-n", "20", "--timeout", "10"];
        let Command::Perf { test } = Cli::try_parse_from(argv).unwrap().command else { unreachable!() };
        let (t, args) = test.split();
        let conf = Conf::new(t, args).unwrap();
        let r = run(&conf, args.loopback, args.server.as_deref());
        let e = r.as_ref().expect_err("a test on a dead device fails");
        assert!(e.to_string().contains("the driver thread panicked: injected by a test of the tools"), "{e}");
        assert_eq!(format!("{:?}", exit_status(&r)), format!("{:?}", ExitCode::from(1)));
    }
}
