//! The rendezvous: a small TCP store that rank 0 serves, through which the
//! ranks of a job find each other, and which then watches them.
//!
//! It does two things and nothing else:
//! - **all-gather of byte strings** ([`Rendezvous::all_gather`]): each rank
//!   sends one blob per round, the store answers every rank with all
//!   `world` blobs in rank order once the last one is in. The
//!   communicator exchanges its QP endpoints and registered regions this
//!   way, and the shape of each new kind of call (operation, count, type,
//!   reduction), so ranks that disagree are refused with a clear error.
//! - **liveness**: once connected every rank sends a heartbeat every
//!   [`BEAT`], and the store one to every rank. A rank whose connection
//!   closes without a goodbye (it exited or was killed) or whose heartbeats
//!   stop for the stall limit (`SIGSTOP`, a hung process) is announced to
//!   every other rank ([`Monitor::lost`]), which then fails the operation it
//!   is in, naming that rank, instead of waiting on the network.
//!
//! Every wait has a deadline: connecting (rank 0 may start last), the
//! gather rounds and the goodbye. Frames are `u32` little-endian length,
//! one kind byte, then the body.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Heartbeat period, both ways.
pub const BEAT: Duration = Duration::from_millis(100);
/// The largest frame accepted (a gather blob of a big job).
const MAX_FRAME: usize = 64 << 20;

const HELLO: u8 = 1;
const GATHER: u8 = 2;
const ALL: u8 = 3;
const BEATK: u8 = 4;
const LOST: u8 = 5;
const BYE: u8 = 6;
const FIN: u8 = 7;
const REFUSE: u8 = 8;

/// What can go wrong in the rendezvous.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("cannot resolve the rendezvous address {0:?}")]
    Resolve(String),
    #[error("rank {rank}: cannot listen on {addr} for the rendezvous: {err}")]
    Listen { rank: usize, addr: SocketAddr, err: io::Error },
    #[error(
        "cannot reach the rendezvous at {addr} within {secs:.1} s (is rank 0 running? last error: {err})"
    )]
    Connect { addr: SocketAddr, secs: f64, err: io::Error },
    #[error("the rendezvous at {addr} waited {secs:.1} s; ranks never joined: {missing:?}")]
    Missing { addr: SocketAddr, secs: f64, missing: Vec<usize> },
    #[error("rendezvous refused this rank: {0}")]
    Refused(String),
    #[error("rank {rank}: {reason}")]
    Lost { rank: usize, reason: String },
    #[error("rendezvous: {what} took longer than {secs:.1} s")]
    Timeout { what: String, secs: f64 },
    #[error("rendezvous connection: {0}")]
    Io(#[from] io::Error),
    #[error("rendezvous protocol: {0}")]
    Protocol(String),
}

type Result<T> = std::result::Result<T, RendezvousError>;

/// Where to meet and who this rank is.
#[derive(Debug, Clone)]
pub struct RendezvousConfig {
    /// `HOST:PORT` of the store; rank 0 listens on it (on every address if
    /// HOST is not one of its own, e.g. a name that resolves elsewhere).
    pub addr: String,
    pub rank: usize,
    pub world: usize,
    /// Every wait's deadline; heartbeats missing for half of it (at least
    /// one second) make a rank count as stalled.
    pub timeout: Duration,
}

impl RendezvousConfig {
    /// Heartbeats missing this long make a rank count as stalled.
    pub fn stall_limit(&self) -> Duration {
        (self.timeout / 2).max(Duration::from_secs(1))
    }
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(5 + body.len());
    f.extend_from_slice(&((body.len() + 1) as u32).to_le_bytes());
    f.push(kind);
    f.extend_from_slice(body);
    f
}

fn read_frame(s: &mut impl Read) -> io::Result<(u8, Vec<u8>)> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("bad frame length {len}")));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    let kind = body.remove(0);
    Ok((kind, body))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|x| u32::from_le_bytes(x.try_into().expect("4 bytes")))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8).map(|x| u64::from_le_bytes(x.try_into().expect("8 bytes")))
}

/// Blobs as `u32 count, (u32 len, bytes)*`.
fn pack(blobs: &[Vec<u8>]) -> Vec<u8> {
    let mut out = (blobs.len() as u32).to_le_bytes().to_vec();
    for b in blobs {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    out
}

fn unpack(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let n = u32_at(b, 0)? as usize;
    let mut at = 4;
    let mut out = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let len = u32_at(b, at)? as usize;
        at += 4;
        out.push(b.get(at..at + len)?.to_vec());
        at += len;
    }
    (at == b.len()).then_some(out)
}

/// A rank the store gave up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostRank {
    pub rank: usize,
    pub reason: String,
}

/// What this rank knows about the others' liveness; shared with the
/// communicator's wait loops.
#[derive(Debug)]
pub struct Monitor {
    lost: Mutex<Vec<LostRank>>,
    server_seen: Mutex<Instant>,
    stall_limit: Duration,
    /// Set once the store said every rank is done.
    finished: AtomicBool,
}

impl Monitor {
    /// The first rank known to be gone or stalled: announced by the store,
    /// or the store itself (rank 0) when its connection closed or its
    /// heartbeats stopped.
    pub fn lost(&self) -> Option<LostRank> {
        if let Some(l) = self.lost.lock().unwrap_or_else(|p| p.into_inner()).first() {
            return Some(l.clone());
        }
        let seen = *self.server_seen.lock().unwrap_or_else(|p| p.into_inner());
        if !self.finished.load(Ordering::Acquire) && seen.elapsed() > self.stall_limit {
            return Some(LostRank {
                rank: 0,
                reason: format!(
                    "no heartbeat from rank 0 (the rendezvous) for {:.1} s: stopped or stalled",
                    seen.elapsed().as_secs_f64()
                ),
            });
        }
        None
    }

    fn note_lost(&self, l: LostRank) {
        let mut v = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        if !v.iter().any(|x| x.rank == l.rank) {
            v.push(l);
        }
    }
}

/// Messages the reader thread passes to the calls waiting on the store.
enum Reply {
    All(Vec<Vec<u8>>),
    Refused(String),
    Fin,
}

/// One rank's end of the rendezvous.
pub struct Rendezvous {
    cfg: RendezvousConfig,
    addr: SocketAddr,
    writer: Arc<Mutex<TcpStream>>,
    replies: Receiver<Reply>,
    monitor: Arc<Monitor>,
    stop: Arc<AtomicBool>,
    local_ip: IpAddr,
    threads: Vec<JoinHandle<()>>,
    server: Option<JoinHandle<()>>,
    round: u64,
    said_bye: bool,
}

fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|_| RendezvousError::Resolve(addr.to_string()))?
        .next()
        .ok_or_else(|| RendezvousError::Resolve(addr.to_string()))
}

impl Rendezvous {
    /// Joins the job: rank 0 starts the store first; every rank connects
    /// (retrying until the deadline, rank 0 may start last) and says who it
    /// is. Returns once connected; the first [`Rendezvous::all_gather`]
    /// waits for the others.
    pub fn join(cfg: RendezvousConfig) -> Result<Rendezvous> {
        if cfg.world == 0 || cfg.rank >= cfg.world {
            return Err(RendezvousError::Refused(format!(
                "rank {} is not in a world of {}",
                cfg.rank, cfg.world
            )));
        }
        let addr = resolve(&cfg.addr)?;
        let server = if cfg.rank == 0 {
            let listener = TcpListener::bind(addr)
                .or_else(|e| {
                    // A name that resolves to an address of another
                    // interface, or not one of ours: listen on all of them.
                    if e.kind() == io::ErrorKind::AddrNotAvailable {
                        let any: IpAddr = if addr.is_ipv4() { [0, 0, 0, 0].into() } else { [0u16; 8].into() };
                        TcpListener::bind(SocketAddr::new(any, addr.port()))
                    } else {
                        Err(e)
                    }
                })
                .map_err(|err| RendezvousError::Listen { rank: 0, addr, err })?;
            let c = cfg.clone();
            Some(thread::Builder::new().name("coll-store".into()).spawn(move || serve(listener, c))?)
        } else {
            None
        };
        let deadline = Instant::now() + cfg.timeout;
        let stream = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(s) => break s,
                Err(err) => {
                    if Instant::now() >= deadline {
                        return Err(RendezvousError::Connect { addr, secs: cfg.timeout.as_secs_f64(), err });
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            }
        };
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(cfg.timeout))?;
        let local_ip = stream.local_addr()?.ip();
        let mut hello = (cfg.rank as u32).to_le_bytes().to_vec();
        hello.extend_from_slice(&(cfg.world as u32).to_le_bytes());
        (&stream).write_all(&frame(HELLO, &hello))?;

        let monitor = Arc::new(Monitor {
            lost: Mutex::new(Vec::new()),
            server_seen: Mutex::new(Instant::now()),
            stall_limit: cfg.stall_limit(),
            finished: AtomicBool::new(false),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let writer = Arc::new(Mutex::new(stream.try_clone()?));
        let (tx, replies) = mpsc::channel();
        let mut threads = Vec::new();
        {
            let (m, st, mut rd) = (monitor.clone(), stop.clone(), stream.try_clone()?);
            threads.push(thread::Builder::new().name("coll-rdv-rx".into()).spawn(move || {
                client_reader(&mut rd, &m, &st, &tx);
            })?);
        }
        {
            let (w, st) = (writer.clone(), stop.clone());
            threads.push(thread::Builder::new().name("coll-rdv-beat".into()).spawn(move || {
                let beat = frame(BEATK, &[]);
                while !st.load(Ordering::Acquire) {
                    if w.lock().unwrap_or_else(|p| p.into_inner()).write_all(&beat).is_err() {
                        return;
                    }
                    thread::sleep(BEAT);
                }
            })?);
        }
        Ok(Rendezvous {
            cfg,
            addr,
            writer,
            replies,
            monitor,
            stop,
            local_ip,
            threads,
            server,
            round: 0,
            said_bye: false,
        })
    }

    pub fn rank(&self) -> usize {
        self.cfg.rank
    }
    pub fn world(&self) -> usize {
        self.cfg.world
    }
    pub fn timeout(&self) -> Duration {
        self.cfg.timeout
    }

    /// The address this host reaches the store from: the one to bind the
    /// RDMA devices to, so that peers on other hosts can reach them.
    pub fn local_ip(&self) -> IpAddr {
        self.local_ip
    }

    /// The liveness view, for wait loops.
    pub fn monitor(&self) -> Arc<Monitor> {
        self.monitor.clone()
    }

    /// Sends `blob`, returns every rank's blob of this round in rank order.
    /// Fails if a rank is lost meanwhile or the round takes longer than the
    /// timeout.
    pub fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.round += 1;
        let mut body = self.round.to_le_bytes().to_vec();
        body.extend_from_slice(blob);
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).write_all(&frame(GATHER, &body))?;
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            match self.replies.recv_timeout(Duration::from_millis(50)) {
                Ok(Reply::All(v)) => {
                    if v.len() != self.cfg.world {
                        return Err(RendezvousError::Protocol(format!(
                            "{} blobs for a world of {}",
                            v.len(),
                            self.cfg.world
                        )));
                    }
                    return Ok(v);
                }
                Ok(Reply::Refused(why)) => return Err(RendezvousError::Refused(why)),
                Ok(Reply::Fin) => return Err(RendezvousError::Protocol("FIN during a gather".into())),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.lost_or(RendezvousError::Lost {
                        rank: 0,
                        reason: "the rendezvous connection closed (rank 0 exited or was killed)".into(),
                    }))
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if let Some(l) = self.monitor.lost() {
                return Err(RendezvousError::Lost { rank: l.rank, reason: l.reason });
            }
            if Instant::now() >= deadline {
                return Err(RendezvousError::Timeout {
                    what: format!("gather round {} at {}", self.round, self.addr),
                    secs: self.cfg.timeout.as_secs_f64(),
                });
            }
        }
    }

    fn lost_or(&self, e: RendezvousError) -> RendezvousError {
        match self.monitor.lost() {
            Some(l) => RendezvousError::Lost { rank: l.rank, reason: l.reason },
            None => e,
        }
    }

    /// Says goodbye and waits (up to the timeout) until every rank has:
    /// rank 0 hosts the store, so it must not leave before the others, and
    /// a rank's exit is not mistaken for a failure.
    pub fn finish(&mut self) -> Result<()> {
        if self.said_bye {
            return Ok(());
        }
        self.said_bye = true;
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).write_all(&frame(BYE, &[]))?;
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            match self.replies.recv_timeout(Duration::from_millis(50)) {
                Ok(Reply::Fin) => {
                    self.monitor.finished.store(true, Ordering::Release);
                    return Ok(());
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.lost_or(RendezvousError::Lost {
                        rank: 0,
                        reason: "the rendezvous connection closed before every rank finished".into(),
                    }))
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if let Some(l) = self.monitor.lost() {
                return Err(RendezvousError::Lost { rank: l.rank, reason: l.reason });
            }
            if Instant::now() >= deadline {
                return Err(RendezvousError::Timeout {
                    what: "waiting for every rank to finish".into(),
                    secs: self.cfg.timeout.as_secs_f64(),
                });
            }
        }
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Ok(w) = self.writer.lock() {
            let _ = w.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The store ends by itself once every rank said goodbye or is gone.
        if let Some(s) = self.server.take() {
            if self.said_bye {
                let _ = s.join();
            }
        }
    }
}

fn client_reader(rd: &mut TcpStream, m: &Monitor, stop: &AtomicBool, tx: &Sender<Reply>) {
    loop {
        let (kind, body) = match read_frame(rd) {
            Ok(f) => f,
            Err(_) => {
                if !stop.load(Ordering::Acquire) && !m.finished.load(Ordering::Acquire) {
                    m.note_lost(LostRank {
                        rank: 0,
                        reason: "the rendezvous connection closed (rank 0 exited or was killed)".into(),
                    });
                }
                return;
            }
        };
        *m.server_seen.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        match kind {
            BEATK => {}
            ALL => match unpack(&body) {
                Some(v) => {
                    let _ = tx.send(Reply::All(v));
                }
                None => {
                    let _ = tx.send(Reply::Refused("malformed gather reply".into()));
                }
            },
            LOST => {
                if let Some(r) = u32_at(&body, 0) {
                    let reason = String::from_utf8_lossy(&body[4..]).into_owned();
                    m.note_lost(LostRank { rank: r as usize, reason });
                }
            }
            REFUSE => {
                let _ = tx.send(Reply::Refused(String::from_utf8_lossy(&body).into_owned()));
            }
            FIN => {
                m.finished.store(true, Ordering::Release);
                let _ = tx.send(Reply::Fin);
            }
            _ => {}
        }
    }
}

/// What a connection's reader thread tells the store.
enum Event {
    Frame(usize, u8, Vec<u8>),
    Closed(usize),
}

/// The store, on rank 0: accepts `world` ranks, answers gather rounds,
/// relays heartbeats and announces lost ranks, ends when every rank said
/// goodbye or is gone.
fn serve(listener: TcpListener, cfg: RendezvousConfig) {
    let world = cfg.world;
    let deadline = Instant::now() + cfg.timeout;
    let _ = listener.set_nonblocking(true);
    let mut conns: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
    let (tx, rx) = mpsc::channel::<Event>();
    let mut joined = 0;
    // Accept and read hellos until every rank is in.
    let mut pending: Vec<TcpStream> = Vec::new();
    while joined < world {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_nodelay(true);
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                pending.push(s);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => {}
        }
        let mut keep = Vec::new();
        for mut s in pending.drain(..) {
            match read_frame(&mut s) {
                Ok((HELLO, b)) => {
                    let (r, w) =
                        (u32_at(&b, 0).unwrap_or(u32::MAX) as usize, u32_at(&b, 4).unwrap_or(0) as usize);
                    let bad = if w != world {
                        Some(format!("rank {r} says the world has {w} ranks, rank 0 says {world}"))
                    } else if r >= world {
                        Some(format!("rank {r} is not in a world of {world}"))
                    } else if conns[r].is_some() {
                        Some(format!("two processes claim rank {r}"))
                    } else {
                        None
                    };
                    if let Some(why) = bad {
                        let _ = s.write_all(&frame(REFUSE, why.as_bytes()));
                        continue;
                    }
                    let _ = s.set_read_timeout(None);
                    let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
                    if let Ok(mut rd) = s.try_clone() {
                        let tx = tx.clone();
                        let _ = thread::Builder::new().name(format!("coll-store-{r}")).spawn(move || loop {
                            match read_frame(&mut rd) {
                                Ok((k, b)) => {
                                    if tx.send(Event::Frame(r, k, b)).is_err() {
                                        return;
                                    }
                                }
                                Err(_) => {
                                    let _ = tx.send(Event::Closed(r));
                                    return;
                                }
                            }
                        });
                    }
                    conns[r] = Some(s);
                    joined += 1;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
                    keep.push(s)
                }
                Err(_) => {}
            }
        }
        pending = keep;
        if joined < world {
            if Instant::now() >= deadline {
                let missing: Vec<usize> = (0..world).filter(|&r| conns[r].is_none()).collect();
                let why = format!(
                    "ranks {missing:?} did not join the rendezvous within {:.1} s",
                    cfg.timeout.as_secs_f64()
                );
                for s in conns.iter_mut().flatten() {
                    let _ = s.write_all(&frame(REFUSE, why.as_bytes()));
                }
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
    drop(listener);
    drop(tx);

    let stall = cfg.stall_limit();
    let mut seen = vec![Instant::now(); world];
    let mut bye = vec![false; world];
    let mut gone = vec![false; world];
    let mut announced = vec![false; world];
    let mut rounds: BTreeMap<u64, Vec<Option<Vec<u8>>>> = BTreeMap::new();
    let mut last_beat = Instant::now();
    let beat = frame(BEATK, &[]);
    let send = |conns: &mut Vec<Option<TcpStream>>, r: usize, f: &[u8]| {
        if let Some(s) = &mut conns[r] {
            if s.write_all(f).is_err() {
                // A stopped rank's buffer filled up; it is announced by its
                // silence, and writes to it are not retried.
                conns[r] = None;
            }
        }
    };
    loop {
        if (0..world).all(|r| bye[r] || gone[r]) {
            let fin = frame(FIN, &[]);
            for r in 0..world {
                send(&mut conns, r, &fin);
            }
            return;
        }
        let mut lost_now: Vec<(usize, String)> = Vec::new();
        match rx.recv_timeout(BEAT / 2) {
            Ok(Event::Frame(r, k, b)) => {
                seen[r] = Instant::now();
                match k {
                    GATHER => {
                        let Some(round) = u64_at(&b, 0) else { continue };
                        let slot = rounds.entry(round).or_insert_with(|| vec![None; world]);
                        slot[r] = Some(b[8..].to_vec());
                        if slot.iter().all(Option::is_some) {
                            let blobs: Vec<Vec<u8>> =
                                rounds.remove(&round).expect("present").into_iter().flatten().collect();
                            let f = frame(ALL, &pack(&blobs));
                            for q in 0..world {
                                send(&mut conns, q, &f);
                            }
                        }
                    }
                    BYE => bye[r] = true,
                    _ => {}
                }
            }
            Ok(Event::Closed(r)) => {
                gone[r] = true;
                if !bye[r] {
                    lost_now.push((
                        r,
                        "its connection to the rendezvous closed: the process exited or was killed".into(),
                    ));
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        for r in 0..world {
            if !bye[r] && !gone[r] && seen[r].elapsed() > stall {
                lost_now.push((
                    r,
                    format!(
                        "no heartbeat for {:.1} s: the process is stopped or stalled",
                        seen[r].elapsed().as_secs_f64()
                    ),
                ));
            }
        }
        for (r, why) in lost_now {
            if announced[r] {
                continue;
            }
            announced[r] = true;
            let mut body = (r as u32).to_le_bytes().to_vec();
            body.extend_from_slice(why.as_bytes());
            let f = frame(LOST, &body);
            for q in 0..world {
                if q != r {
                    send(&mut conns, q, &f);
                }
            }
        }
        if last_beat.elapsed() >= BEAT {
            last_beat = Instant::now();
            for (r, g) in gone.iter().enumerate() {
                if !g {
                    send(&mut conns, r, &beat);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    fn cfg(port: u16, rank: usize, world: usize) -> RendezvousConfig {
        RendezvousConfig { addr: format!("127.0.0.1:{port}"), rank, world, timeout: Duration::from_secs(5) }
    }

    #[test]
    fn gathers_in_rank_order_and_finishes() {
        let port = free_port();
        let hs: Vec<_> = (0..4)
            .rev()
            .map(|r| {
                thread::spawn(move || {
                    let mut rv = Rendezvous::join(cfg(port, r, 4)).unwrap();
                    let a = rv.all_gather(format!("rank{r}").as_bytes()).unwrap();
                    let b = rv.all_gather(&[r as u8; 3]).unwrap();
                    rv.finish().unwrap();
                    (a, b)
                })
            })
            .collect();
        for h in hs {
            let (a, b) = h.join().unwrap();
            assert_eq!(a, (0..4).map(|r| format!("rank{r}").into_bytes()).collect::<Vec<_>>());
            assert_eq!(b, (0..4).map(|r| vec![r as u8; 3]).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_rank_that_leaves_is_named() {
        let port = free_port();
        let h0 = thread::spawn(move || {
            let mut rv = Rendezvous::join(cfg(port, 0, 3)).unwrap();
            rv.all_gather(b"x").unwrap();
            rv.all_gather(b"y").unwrap_err()
        });
        let h1 = thread::spawn(move || {
            let mut rv = Rendezvous::join(cfg(port, 1, 3)).unwrap();
            rv.all_gather(b"x").unwrap();
            rv.all_gather(b"y").unwrap_err()
        });
        let mut rv2 = Rendezvous::join(cfg(port, 2, 3)).unwrap();
        rv2.all_gather(b"x").unwrap();
        drop(rv2); // leaves without a goodbye
        for h in [h0, h1] {
            match h.join().unwrap() {
                RendezvousError::Lost { rank, reason } => {
                    assert_eq!(rank, 2);
                    assert!(reason.contains("closed"), "{reason}");
                }
                e => panic!("unexpected {e}"),
            }
        }
    }

    #[test]
    fn a_missing_rank_times_out_naming_it() {
        let port = free_port();
        let mut c = cfg(port, 0, 2);
        c.timeout = Duration::from_millis(600);
        let mut rv = Rendezvous::join(c).unwrap();
        let e = rv.all_gather(b"x").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("[1]") || s.contains("took longer"), "{s}");
    }

    #[test]
    fn pack_round_trips_and_rejects_garbage() {
        let v = vec![vec![], vec![1, 2, 3], vec![9; 300]];
        assert_eq!(unpack(&pack(&v)), Some(v));
        assert_eq!(unpack(&[5, 0, 0, 0, 1]), None);
        assert_eq!(unpack(&[]), None);
    }
}
