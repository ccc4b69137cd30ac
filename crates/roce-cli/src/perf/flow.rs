//! The order of things in each perftest program: which out-of-band
//! exchanges happen when, around connecting the QPs and running the test.
//!
//! A stock perftest peer follows exactly these sequences (its `main` in
//! `write_bw.c`, `send_lat.c`, ...), so ours must match them message for
//! message. The RDMA work is behind [`Side`], so the same sequences run
//! against a real device ([`super::run`]) and against replayed captures in
//! the tests.

use roce::crypto::Session;
use std::fmt;
use std::time::{Duration, Instant};

use roce::PathMtu;

use super::exchange::{BwReport, KeyMsg, Oob, Role, Verdict, CACHE_LINE, CYCLE_BUFFER};
use super::report::{LatDurReport, LatReport};
use super::{Kind, Test, Verb};
use crate::oob::{Error, Result};

/// A latency result: by iterations or by time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lat {
    Iters(LatReport),
    Duration(LatDurReport),
}

/// What the test does on this end, independent of the exchange.
pub trait Side {
    /// Creates QPs and buffers (`mtu` and `cycle_buffer` as agreed with the
    /// peer); returns one key message per QP.
    fn setup(&mut self, mtu: PathMtu, cycle_buffer: usize) -> Result<Vec<KeyMsg>>;
    /// The information block.
    fn print_header(&mut self);
    /// Moves the QPs to RTS towards the peer's.
    /// `session`: the keys of an encrypted test (`--encrypt`).
    fn connect(&mut self, remote: &[KeyMsg], peer_is_roce: bool, session: Option<&Session>) -> Result<()>;
    fn print_local(&mut self, local: &[KeyMsg]);
    fn print_remote(&mut self, remote: &KeyMsg);
    fn print_results_header(&mut self);
    /// Posts receives for messages of `size` bytes (SEND tests).
    fn prepare_recv(&mut self, size: u64) -> Result<()>;
    /// The sender's bandwidth loop (both directions when bidirectional).
    fn run_bw(&mut self, size: u64) -> Result<BwReport>;
    /// The receiver's loop of a one-way SEND test.
    fn run_bw_server(&mut self, size: u64) -> Result<BwReport>;
    fn run_lat(&mut self, size: u64) -> Result<Lat>;
    fn show_bw(&mut self, mine: &BwReport, peer: Option<&BwReport>);
    fn show_lat(&mut self, r: &Lat);
    fn print_footer(&mut self);
    /// Checks what the peer placed in our memory (`peer_iters` operations
    /// of `size` bytes in all).
    fn check(&mut self, size: u64, peer_iters: u64) -> Verdict;
    /// The server's verdict on our data, from a `roce` server.
    fn peer_verdict(&mut self, v: Verdict);
    /// The exchange is over: the test begins.
    fn begin_test(&mut self) {}
}

/// Why [`drive`] failed.
#[derive(Debug)]
pub enum Failure {
    /// The peer failed the exchange before the test began (silent, slow,
    /// gone, malformed, incompatible): a server can drop it and serve
    /// another.
    Exchange(Error),
    /// The test, the exchanges during and after it, or our own resources.
    Run(Error),
}

impl Failure {
    pub fn into_error(self) -> Error {
        match self {
            Failure::Exchange(e) | Failure::Run(e) => e,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Exchange(e) | Failure::Run(e) => e.fmt(f),
        }
    }
}

/// The test as this end runs it.
#[derive(Debug, Clone)]
pub struct FlowSpec {
    pub test: Test,
    pub duplex: bool,
    /// Message sizes: one, or all powers of two with `-a`.
    pub sizes: Vec<u64>,
    /// Our MTU before the exchange takes the smaller of both sides'.
    pub mtu: PathMtu,
    /// How long to wait for the peer to hang up after a test without a
    /// closing exchange.
    pub linger: Duration,
}

/// Runs one test over an established TCP connection. Data checks that fail
/// do not stop the exchange (the peer must see it through); they are
/// returned as an error at the end.
pub fn drive(oob: &mut Oob, spec: &FlowSpec, side: &mut dyn Side) -> std::result::Result<(), Failure> {
    oob.versions().map_err(Failure::Exchange)?;
    oob.agree_keys().map_err(Failure::Exchange)?;
    let (cycle, _cache_line) = oob.sys_data(CYCLE_BUFFER, CACHE_LINE).map_err(Failure::Exchange)?;
    let mtu = oob.mtu(spec.mtu).map_err(Failure::Exchange)?;
    let t = Instant::now();
    let local = side.setup(mtu, cycle as usize).map_err(Failure::Run)?;
    oob.postpone(t.elapsed());
    side.print_header();
    let mut f = Flow { oob, side, local, remote: Vec::new(), spec, failure: None, begun: false };
    let r = match (spec.test.kind, spec.test.verb) {
        (Kind::Bw, Verb::Send) => f.send_bw(),
        (Kind::Bw, _) => f.rdma_bw(),
        (Kind::Lat, Verb::Write) => f.write_lat(),
        (Kind::Lat, Verb::Send) => f.send_lat(),
        (Kind::Lat, _) => f.read_atomic_lat(),
    };
    match (r, f.failure) {
        (Err(e), _) if !f.begun => Err(Failure::Exchange(e)),
        (Err(e), _) | (Ok(()), Some(e)) => Err(Failure::Run(e)),
        (Ok(()), None) => Ok(()),
    }
}

struct Flow<'a> {
    oob: &'a mut Oob,
    side: &'a mut dyn Side,
    local: Vec<KeyMsg>,
    remote: Vec<KeyMsg>,
    spec: &'a FlowSpec,
    failure: Option<Error>,
    /// The test has begun (the exchange before it is over).
    begun: bool,
}

impl Flow<'_> {
    fn server(&self) -> bool {
        self.oob.role == Role::Server
    }

    /// The exchange is over, the test begins.
    fn begin(&mut self) {
        self.begun = true;
        self.oob.end_exchange();
        self.side.begin_test();
    }

    /// A hand shake that only synchronises (on QP 0's keys).
    fn sync(&mut self) -> Result<()> {
        self.oob.keys(&self.local[0]).map(drop)
    }

    /// One hand shake per QP; the answers are the peer's keys.
    fn exchange_keys(&mut self) -> Result<()> {
        self.remote = Vec::with_capacity(self.local.len());
        for k in self.local.clone() {
            self.remote.push(self.oob.keys(&k)?);
        }
        Ok(())
    }

    fn connect(&mut self) -> Result<()> {
        self.side.connect(&self.remote, self.oob.peer_is_roce, self.oob.session.as_ref())
    }

    /// The second round of hand shakes, printing the peer's addresses.
    fn keys_and_print(&mut self) -> Result<()> {
        self.side.print_local(&self.local);
        for i in 0..self.local.len() {
            let k = self.oob.keys(&self.local[i])?;
            self.side.print_remote(&k);
        }
        Ok(())
    }

    fn note(&mut self, v: &Verdict) {
        if let (Verdict::Bad(why), None) = (v, &self.failure) {
            self.failure = Some(Error::Failed(why.clone()));
        }
    }

    fn close(&mut self) -> Result<()> {
        let k = self.local[0];
        self.oob.close(&k)
    }

    /// `write_bw.c`, `read_bw.c`, `atomic_bw.c`.
    fn rdma_bw(&mut self) -> Result<()> {
        let atomic = self.spec.test.verb == Verb::Atomic;
        let duplex = self.spec.duplex;
        self.exchange_keys()?;
        self.connect()?;
        self.keys_and_print()?;
        self.sync()?;
        self.begin();
        self.side.print_results_header();
        if self.server() && !duplex {
            // The client runs alone; we wait for it, then show its report.
            self.sync()?;
            let side = &mut *self.side;
            let mut verdict = Verdict::Skipped;
            let rep = self.oob.report_server(|r| {
                verdict = side.check(r.size, r.iters);
                verdict.to_slot()
            })?;
            self.note(&verdict);
            self.side.show_bw(&rep, None);
            self.close()?;
            self.side.print_footer();
            return Ok(());
        }
        let sizes = if atomic { &self.spec.sizes[..1] } else { &self.spec.sizes[..] };
        let mut last = BwReport::default();
        for &size in sizes {
            if duplex {
                self.sync()?;
            }
            let rep = self.side.run_bw(size)?;
            if duplex && !atomic {
                self.sync()?;
            }
            if duplex {
                let peer = BwReport::from_slots(&self.oob.report(&rep.to_slots())?);
                self.side.show_bw(&rep, Some(&peer));
                let v = self.side.check(size, peer.iters);
                self.note(&v);
            } else {
                self.side.show_bw(&rep, None);
            }
            last = rep;
        }
        self.side.print_footer();
        if !duplex {
            self.sync()?;
            let srv = self.oob.report(&last.to_slots())?;
            if self.oob.peer_is_roce {
                let v = Verdict::from_slot(&srv[4]).unwrap_or(Verdict::Skipped);
                self.note(&v);
                self.side.peer_verdict(v);
            }
        }
        self.close()
    }

    /// `send_bw.c`.
    fn send_bw(&mut self) -> Result<()> {
        let (duplex, server) = (self.spec.duplex, self.server());
        let run_all = self.spec.sizes.len() > 1;
        self.exchange_keys()?;
        self.connect()?;
        self.sync()?;
        self.keys_and_print()?;
        self.begin();
        self.side.print_results_header();
        for &size in &self.spec.sizes {
            if server || duplex {
                self.side.prepare_recv(size)?;
            }
            self.sync()?;
            let rep =
                if server && !duplex { self.side.run_bw_server(size)? } else { self.side.run_bw(size)? };
            if duplex {
                let peer = BwReport::from_slots(&self.oob.report(&rep.to_slots())?);
                self.side.show_bw(&rep, Some(&peer));
            } else {
                self.side.show_bw(&rep, None);
            }
            if run_all {
                self.sync()?;
            }
            if server || duplex {
                let v = self.side.check(size, rep.iters);
                self.note(&v);
            }
        }
        self.side.print_footer();
        self.close()
    }

    /// `write_lat.c`: no closing exchange at all.
    fn write_lat(&mut self) -> Result<()> {
        self.sync()?;
        self.exchange_keys()?;
        self.connect()?;
        self.keys_and_print()?;
        self.sync()?;
        self.begin();
        self.side.print_results_header();
        for &size in &self.spec.sizes {
            let r = self.side.run_lat(size)?;
            self.side.show_lat(&r);
        }
        self.side.print_footer();
        self.oob.linger(self.spec.linger);
        Ok(())
    }

    /// `read_lat.c`, `atomic_lat.c`: the server leaves once connected.
    fn read_atomic_lat(&mut self) -> Result<()> {
        self.sync()?;
        self.exchange_keys()?;
        self.connect()?;
        self.keys_and_print()?;
        self.sync()?;
        self.begin();
        if self.server() {
            self.close()?;
            self.side.print_footer();
            return Ok(());
        }
        self.side.print_results_header();
        let n = if self.spec.test.verb == Verb::Atomic { 1 } else { self.spec.sizes.len() };
        for &size in &self.spec.sizes[..n] {
            let r = self.side.run_lat(size)?;
            self.side.show_lat(&r);
        }
        self.side.print_footer();
        self.close()
    }

    /// `send_lat.c`.
    fn send_lat(&mut self) -> Result<()> {
        self.exchange_keys()?;
        self.connect()?;
        self.sync()?;
        self.keys_and_print()?;
        self.begin();
        self.side.print_results_header();
        for &size in &self.spec.sizes {
            self.side.prepare_recv(size)?;
            self.sync()?;
            let r = self.side.run_lat(size)?;
            self.side.show_lat(&r);
        }
        self.side.print_footer();
        self.close()
    }
}
