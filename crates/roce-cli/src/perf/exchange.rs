//! perftest's out-of-band exchange over TCP ("Data ex. method : Ethernet").
//!
//! The byte layout follows perftest 4.5 (version string "6.06") as captured
//! in `testdata/softroce/*.pcap`. Every exchange is symmetric: the client
//! writes its message first and then reads the server's; the server reads
//! first and then writes. The messages, in the order the tests use them:
//!
//! * version: 16 bytes, a NUL-terminated version string ("6.06");
//! * system data: the cycle buffer (page size) and the cache line size, each
//!   a 4-byte big-endian integer; both sides take the maximum;
//! * MTU: 2 bytes, the `enum ibv_mtu` code as decimal ASCII and a NUL ("3\0"
//!   is 1024); both sides take the minimum;
//! * keys: 108 bytes of ASCII, `lid:out_reads:qpn:psn:rkey:vaddr:` then the
//!   16 GID bytes as `%02x:` and the SRQ number, NUL-terminated, sent once per
//!   QP and again as a barrier ("hand shake");
//! * bandwidth reports: size, iterations (8-byte big-endian integers), peak
//!   and average bandwidth and message rate (big-endian IEEE doubles);
//! * close: a final hand shake, then "done\0".
//!
//! Our own extensions stay invisible to a stock perftest: after the version
//! string's NUL we write "roce", so two `roce` peers know each other; the
//! SRQ number (unused by RC) carries the UDP port of a device not on 4791;
//! a `roce` server answers the client's last report with a verification
//! verdict in the slot perftest's server fills with whatever its stack held.

use std::fmt;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use roce::PathMtu;

use crate::oob::{Context as _, Encryption, Error, Result, ROCE_UDP_PORT};

/// The perftest version we announce (perftest 4.5 says "6.06").
pub const VERSION: &str = "6.06";
/// Oldest peer version perftest itself accepts.
const MIN_VERSION: f64 = 5.70;
const VERSION_LEN: usize = 16;
/// Size of a key message with a GID.
pub const KEY_MSG_LEN: usize = 108;
/// Marks a `roce` peer after the version string's NUL.
const ROCE_TAG: &[u8; 4] = b"roce";
/// After `ROCE_TAG`: this end asks for an encrypted test (`--encrypt`).
const ENCRYPT_TAG: u8 = b'E';
/// The buffer granularity we announce (the page size) and the cache line.
pub const CYCLE_BUFFER: u32 = 4096;
pub const CACHE_LINE: u32 = 64;

/// Which end of the TCP connection we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// What a peer needs to reach one QP and its buffer (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyMsg {
    pub lid: u16,
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: [u8; 16],
    pub srqn: u32,
}

impl KeyMsg {
    /// The 108-byte message, `%04x:%04x:%06x:%06x:%08x:%016x:` + GID + `%08x:`.
    pub fn encode(&self) -> [u8; KEY_MSG_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; KEY_MSG_LEN];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    /// Parses a key message (the text up to the first NUL).
    pub fn decode(b: &[u8]) -> Result<KeyMsg> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let text = std::str::from_utf8(&b[..end]).map_err(|_| bad_key(b))?;
        let f: Vec<&str> = text.split(':').collect();
        // 6 fields, 16 GID bytes, the SRQ number, and the empty tail after the last ':'.
        if f.len() != 24 || !f[23].is_empty() {
            return Err(bad_key(b));
        }
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad_key(b));
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::try_from(hex(f[6 + i])?).map_err(|_| bad_key(b))?;
        }
        let small = |s: &str, max: u64| hex(s).and_then(|v| if v <= max { Ok(v) } else { Err(bad_key(b)) });
        Ok(KeyMsg {
            lid: small(f[0], 0xffff)? as u16,
            out_reads: small(f[1], 0xffff)? as u16,
            qpn: small(f[2], 0xff_ffff)? as u32,
            psn: small(f[3], 0xff_ffff)? as u32,
            rkey: small(f[4], 0xffff_ffff)? as u32,
            vaddr: hex(f[5])?,
            gid,
            srqn: small(f[22], 0xffff_ffff)? as u32,
        })
    }

    /// The UDP port of the peer's device: our extension in the SRQ number
    /// (only from a `roce` peer), RoCEv2's 4791 otherwise.
    pub fn udp_port(&self, peer_is_roce: bool) -> u16 {
        match u16::try_from(self.srqn) {
            Ok(p) if peer_is_roce && p != 0 => p,
            _ => ROCE_UDP_PORT,
        }
    }
}

fn bad_key(b: &[u8]) -> Error {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len()).min(KEY_MSG_LEN);
    Error::Protocol(format!("malformed key message from the peer: {:?}", String::from_utf8_lossy(&b[..end])))
}

/// A bandwidth report as `xchg_bw_reports` sends it.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct BwReport {
    pub size: u64,
    pub iters: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    pub msg_rate: f64,
}

/// The five 8-byte slots of a report on the wire.
pub type ReportSlots = [[u8; 8]; 5];

impl BwReport {
    pub fn to_slots(self) -> ReportSlots {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    pub fn from_slots(s: &ReportSlots) -> BwReport {
        let f = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        BwReport {
            size: u64::from_be_bytes(s[0]),
            iters: u64::from_be_bytes(s[1]),
            bw_peak: f(s[2]),
            bw_avg: f(s[3]),
            msg_rate: f(s[4]),
        }
    }
}

/// Whether the data a peer placed in our memory was checked, and how it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Bad(String),
    Skipped,
}

impl Verdict {
    /// The slot a `roce` server sends instead of its (meaningless) message rate.
    pub fn to_slot(&self) -> [u8; 8] {
        match self {
            Verdict::Ok => *b"roce-ok\0",
            Verdict::Bad(_) => *b"roce-bad",
            Verdict::Skipped => *b"roce-n/a",
        }
    }

    pub fn from_slot(s: &[u8; 8]) -> Option<Verdict> {
        match s {
            b"roce-ok\0" => Some(Verdict::Ok),
            b"roce-bad" => Some(Verdict::Bad("the server found the data it received corrupted".into())),
            b"roce-n/a" => Some(Verdict::Skipped),
            _ => None,
        }
    }
}

/// Called while we wait for the peer: a busy-polling device receives only
/// when its application drives it.
pub type Pump = Box<dyn FnMut() + Send>;

/// A measure of the peer's RDMA traffic (packets received from it): while
/// it grows, the peer is alive even if it says nothing over TCP.
pub type Activity = Box<dyn FnMut() -> u64 + Send>;

/// How often a wait over TCP looks at the RDMA traffic.
const PATIENCE_TICK: Duration = Duration::from_millis(250);

/// The TCP connection to the peer and the protocol on it.
pub struct Oob {
    stream: TcpStream,
    pub role: Role,
    /// The peer announced itself as `roce` (see the module docs).
    pub peer_is_roce: bool,
    pub peer_version: String,
    pump: Option<Pump>,
    /// Give up a wait over TCP after this long without a byte from the
    /// peer and without a change in `activity`.
    patience: Option<(Duration, Activity)>,
    /// A server's bound on the exchange before the test ([`Oob::admit`]).
    admission: Option<Admission>,
    /// `--encrypt` on this end.
    encrypt: Option<Encryption>,
    /// The agreed secret of an encrypted test, once the keys crossed.
    pub session: Option<roce::crypto::Session>,
}

/// The exchange before the test, on a server: when it must be over, and
/// the listener to close once the test begins.
struct Admission {
    deadline: Instant,
    budget: Duration,
    listener: Option<TcpListener>,
}

impl fmt::Debug for Oob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Oob({:?}, {:?})", self.role, self.stream.peer_addr().ok())
    }
}

impl Oob {
    pub fn new(stream: TcpStream, role: Role) -> Oob {
        let _ = stream.set_nodelay(true);
        Oob {
            stream,
            role,
            peer_is_roce: false,
            peer_version: String::new(),
            pump: None,
            patience: None,
            admission: None,
            encrypt: None,
            session: None,
        }
    }

    /// Asks for an encrypted test (`--encrypt`): announced with the version
    /// (see `versions`), the keys agreed by `agree_keys`.
    pub fn set_encryption(&mut self, encrypt: Option<Encryption>) {
        self.encrypt = encrypt;
    }

    /// An encrypted test: both ends send an X25519 public key (after the
    /// version, so both know it comes) and derive the session.
    pub fn agree_keys(&mut self) -> Result<()> {
        let Some(enc) = self.encrypt.clone() else { return Ok(()) };
        let kx = enc.start()?;
        let mut theirs = [0u8; roce::crypto::PUBLIC_KEY_LEN];
        self.xchg(&kx.public_key(), &mut theirs)?;
        self.session = Some(enc.agree(kx, &theirs, self.role == Role::Client)?);
        Ok(())
    }

    /// A server's exchange with a client accepted at `accepted`: all of it
    /// before the test must be over within `budget`, however the client
    /// paces its bytes. `listener` closes when the test begins (later
    /// clients are refused) unless [`Oob::take_listener`] takes it back.
    pub fn admit(&mut self, accepted: Instant, budget: Duration, listener: TcpListener) {
        self.admission = Some(Admission { deadline: accepted + budget, budget, listener: Some(listener) });
    }

    /// Moves the exchange's deadline by `d`, the time our own work took
    /// (creating QPs and buffers), which is not the client's.
    pub fn postpone(&mut self, d: Duration) {
        if let Some(a) = &mut self.admission {
            a.deadline += d;
        }
    }

    /// The exchange is over and the test begins: no deadline any more (the
    /// patience of [`Oob::set_patience`] goes on), the listener closes.
    pub fn end_exchange(&mut self) {
        if self.admission.take().is_some() {
            let _ = self.stream.set_write_timeout(None);
        }
    }

    /// The listener given to [`Oob::admit`], while the exchange is not over.
    pub fn take_listener(&mut self) -> Option<TcpListener> {
        self.admission.as_mut().and_then(|a| a.listener.take())
    }

    /// The exchange's deadline, if it has one.
    fn deadline(&self) -> Option<Instant> {
        self.admission.as_ref().map(|a| a.deadline)
    }

    /// An error once the exchange's deadline has passed.
    fn check_deadline(&self) -> Result<()> {
        match &self.admission {
            Some(a) if Instant::now() >= a.deadline => Err(Error::ExchangeTimeout { budget: a.budget }),
            _ => Ok(()),
        }
    }

    /// Bounds every wait for the peer over TCP: it fails once `limit` has
    /// passed with neither a byte over TCP nor a change in `activity`. A
    /// bandwidth server says nothing over TCP while the client runs, but
    /// its RDMA traffic arrives; a peer that does neither is gone.
    pub fn set_patience(&mut self, limit: Duration, activity: Activity) {
        self.patience = Some((limit, activity));
    }

    /// Runs `pump` over and over while waiting for the peer (the socket
    /// turns non-blocking).
    pub fn set_pump(&mut self, pump: Pump) {
        let _ = self.stream.set_nonblocking(true);
        self.pump = Some(pump);
    }

    /// Reads into `b` (at most `b.len()` bytes, at least one unless EOF),
    /// giving up at `deadline`.
    fn read_some(&mut self, b: &mut [u8], deadline: Option<Instant>) -> std::io::Result<usize> {
        let timed_out = || std::io::Error::from(std::io::ErrorKind::TimedOut);
        match &mut self.pump {
            None => {
                let left = deadline
                    .map(|d| d.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)));
                self.stream.set_read_timeout(left)?;
                self.stream.read(b)
            }
            Some(pump) => loop {
                match self.stream.read(b) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return Err(timed_out());
                        }
                        pump();
                        std::thread::yield_now();
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    r => return r,
                }
            },
        }
    }

    fn read_full(&mut self, b: &mut [u8], deadline: Option<Instant>) -> std::io::Result<()> {
        let mut got = 0;
        while got < b.len() {
            match self.read_some(&mut b[got..], deadline)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => got += n,
            }
        }
        Ok(())
    }

    /// The local address of the TCP connection: the IP the peer reaches us at.
    pub fn local_ip(&self) -> Result<IpAddr> {
        Ok(self.stream.local_addr().context("TCP socket")?.ip().to_canonical())
    }

    fn send(&mut self, mut b: &[u8]) -> Result<()> {
        while !b.is_empty() {
            self.check_deadline()?;
            if let (Some(d), None) = (self.deadline(), &self.pump) {
                let left = d.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                self.stream.set_write_timeout(Some(left)).context("TCP socket")?;
            }
            match self.stream.write(b) {
                Ok(0) => return Err(Error::Closed { early: false }),
                Ok(n) => b = &b[n..],
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    if let Some(p) = &mut self.pump {
                        p();
                    }
                    std::thread::yield_now();
                }
                Err(source) => {
                    return Err(Error::Exchange { what: "sending to the peer over TCP".into(), source })
                }
            }
        }
        Ok(())
    }

    fn recv(&mut self, b: &mut [u8]) -> Result<()> {
        if self.patience.is_some() {
            return self.recv_patiently(b);
        }
        let r = self.read_full(b, self.deadline());
        r.map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::Closed { early: true },
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => match self.check_deadline() {
                Err(late) => late,
                Ok(()) => Error::Timeout { what: "timed out waiting for the peer over TCP".into() },
            },
            _ => Error::Exchange { what: "receiving from the peer over TCP".into(), source: e },
        })
    }

    fn recv_patiently(&mut self, b: &mut [u8]) -> Result<()> {
        let mut got = 0;
        let mut seen = self.patience.as_mut().map(|(_, a)| a());
        let mut quiet_since = Instant::now();
        while got < b.len() {
            self.check_deadline()?;
            let tick = Instant::now() + PATIENCE_TICK;
            let until = self.deadline().map_or(tick, |d| d.min(tick));
            match self.read_some(&mut b[got..], Some(until)) {
                Ok(0) => return Err(Error::Closed { early: true }),
                Ok(n) => {
                    got += n;
                    quiet_since = Instant::now();
                }
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    self.check_deadline()?;
                    let Some((limit, activity)) = self.patience.as_mut() else { continue };
                    let now = Some(activity());
                    if now != seen {
                        seen = now;
                        quiet_since = Instant::now();
                    } else if quiet_since.elapsed() >= *limit {
                        return Err(Error::Timeout {
                            what: format!(
                                "timed out: nothing from the peer over TCP and no RDMA traffic from it for {:.0} s",
                                limit.as_secs_f64()
                            ),
                        });
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(Error::Exchange { what: "receiving from the peer over TCP".into(), source })
                }
            }
        }
        Ok(())
    }

    /// One symmetric exchange (`ctx_xchg_data`): the client writes first.
    pub fn xchg(&mut self, mine: &[u8], theirs: &mut [u8]) -> Result<()> {
        match self.role {
            Role::Client => {
                self.send(mine)?;
                self.recv(theirs)
            }
            Role::Server => {
                self.recv(theirs)?;
                self.send(mine)
            }
        }
    }

    /// `exchange_versions` + `check_version_compatibility`.
    pub fn versions(&mut self) -> Result<()> {
        let mut mine = [0u8; VERSION_LEN];
        mine[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        mine[VERSION.len() + 1..VERSION.len() + 5].copy_from_slice(ROCE_TAG);
        if self.encrypt.is_some() {
            mine[VERSION.len() + 5] = ENCRYPT_TAG;
        }
        let mut theirs = [0u8; VERSION_LEN];
        self.xchg(&mine, &mut theirs)?;
        let end = theirs.iter().position(|&c| c == 0).unwrap_or(VERSION_LEN);
        let v = String::from_utf8_lossy(&theirs[..end]).into_owned();
        self.peer_is_roce = end + 5 <= VERSION_LEN && &theirs[end + 1..end + 5] == ROCE_TAG;
        let peer_encrypts = self.peer_is_roce && end + 6 <= VERSION_LEN && theirs[end + 5] == ENCRYPT_TAG;
        match (self.encrypt.is_some(), peer_encrypts) {
            (true, false) if !self.peer_is_roce => {
                return Err(Error::Protocol(
                    "the peer is not roce and cannot encrypt: run without --encrypt against it".into(),
                ))
            }
            (true, false) => {
                return Err(Error::Protocol("the peer does not encrypt: run both ends with --encrypt".into()))
            }
            (false, true) => {
                return Err(Error::Protocol(
                    "the peer asks for encryption: run both ends with --encrypt".into(),
                ))
            }
            _ => {}
        }
        let num = leading_float(&v);
        if num < MIN_VERSION {
            return Err(Error::Protocol(format!(
                "the peer speaks perftest version {v:?}: versions older than {MIN_VERSION:.2} are not compatible"
            )));
        }
        self.peer_version = v;
        Ok(())
    }

    /// `check_sys_data`: (cycle buffer, cache line size), each the maximum of both sides.
    pub fn sys_data(&mut self, cycle_buffer: u32, cache_line: u32) -> Result<(u32, u32)> {
        let mut a = [0u8; 4];
        self.xchg(&cycle_buffer.to_be_bytes(), &mut a)?;
        let mut b = [0u8; 4];
        self.xchg(&cache_line.to_be_bytes(), &mut b)?;
        Ok((cycle_buffer.max(u32::from_be_bytes(a)), cache_line.max(u32::from_be_bytes(b))))
    }

    /// `check_mtu`: the smaller of both sides' MTUs (a bad remote value is ignored).
    pub fn mtu(&mut self, mtu: PathMtu) -> Result<PathMtu> {
        let code = mtu as u8;
        let mine = [b'0' + code, 0];
        let mut theirs = [0u8; 2];
        self.xchg(&mine, &mut theirs)?;
        let remote = match theirs {
            [d @ b'1'..=b'5', 0] => PathMtu::from_bytes(128usize << (d - b'0')),
            _ => None,
        };
        Ok(remote.map_or(mtu, |r| r.min(mtu)))
    }

    /// `ctx_hand_shake`: sends our keys, returns the peer's.
    pub fn keys(&mut self, mine: &KeyMsg) -> Result<KeyMsg> {
        let mut theirs = [0u8; KEY_MSG_LEN];
        self.xchg(&mine.encode(), &mut theirs)?;
        KeyMsg::decode(&theirs)
    }

    /// `xchg_bw_reports`: five symmetric 8-byte exchanges.
    pub fn report(&mut self, mine: &ReportSlots) -> Result<ReportSlots> {
        let mut theirs = [[0u8; 8]; 5];
        for (m, t) in mine.iter().zip(theirs.iter_mut()) {
            self.xchg(m, t)?;
        }
        Ok(theirs)
    }

    /// The server's half of `xchg_bw_reports` after a one-way test: it reads
    /// the client's report, sends zeros and, in the last slot, the verdict
    /// `judge` gives on the client's report.
    pub fn report_server(&mut self, judge: impl FnOnce(&BwReport) -> [u8; 8]) -> Result<BwReport> {
        assert_eq!(self.role, Role::Server);
        let mut theirs = [[0u8; 8]; 5];
        for t in theirs.iter_mut().take(4) {
            self.xchg(&[0u8; 8], t)?;
        }
        self.recv(&mut theirs[4])?;
        let rep = BwReport::from_slots(&theirs);
        self.send(&judge(&rep))?;
        Ok(rep)
    }

    /// `ctx_close_connection`: a last hand shake, then "done\0". We also
    /// read the peer's "done" (briefly), so that closing with unread data
    /// does not reset the connection under the peer.
    pub fn close(&mut self, mine: &KeyMsg) -> Result<()> {
        self.keys(mine)?;
        self.send(b"done\0")?;
        let mut done = [0u8; 5];
        let _ = self.read_full(&mut done, Some(Instant::now() + Duration::from_secs(2)));
        Ok(())
    }
}

impl Oob {
    /// Tells the peer we are done (half-closes the connection) and waits
    /// until it closes too, or `timeout`. Tests without a closing exchange
    /// (write_lat) end with this, so neither end tears its QP down while
    /// the other still waits for an acknowledgement.
    pub fn linger(&mut self, timeout: Duration) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        let deadline = Instant::now() + timeout;
        let mut b = [0u8; 64];
        while matches!(self.read_some(&mut b, Some(deadline)), Ok(n) if n > 0) {}
    }
}

/// `atof`: the number at the start of a string (0 if none).
fn leading_float(s: &str) -> f64 {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    s[..end].parse().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_message_round_trip_matches_perftest_text() {
        let captured = b"0000:0001:000014:7ab9c9:00000524:00005621ec672000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:2f:00:02:00000000:\0";
        assert_eq!(captured.len(), KEY_MSG_LEN);
        let k = KeyMsg::decode(captured).unwrap();
        assert_eq!((k.lid, k.out_reads, k.qpn, k.psn, k.rkey), (0, 1, 0x14, 0x7ab9c9, 0x524));
        assert_eq!(k.vaddr, 0x5621ec672000);
        assert_eq!(crate::oob::gid_ip(k.gid), "10.47.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(&k.encode(), captured);
        assert_eq!(k.udp_port(true), ROCE_UDP_PORT);
        assert!(KeyMsg::decode(b"0000:zz").is_err());
    }

    /// A malformed key message is the peer's fault, and says so.
    #[test]
    fn a_malformed_key_message_is_a_protocol_error() {
        let e = KeyMsg::decode(b"0000:zz\0").unwrap_err();
        assert!(matches!(&e, Error::Protocol(_)), "{e:?}");
        assert_eq!(e.to_string(), "malformed key message from the peer: \"0000:zz\"");
    }

    #[test]
    fn report_slots_are_big_endian() {
        let r = BwReport { size: 4096, iters: 5, bw_peak: 2.56, bw_avg: 2.5, msg_rate: 0.000656 };
        let s = r.to_slots();
        assert_eq!(s[0], [0, 0, 0, 0, 0, 0, 0x10, 0]);
        assert_eq!(s[2][0], 0x40);
        assert_eq!(BwReport::from_slots(&s), r);
    }

    #[test]
    fn versions_parse_like_atof() {
        assert_eq!(leading_float("6.06"), 6.06);
        assert_eq!(leading_float("5.70-beta"), 5.70);
        assert_eq!(leading_float("x"), 0.0);
    }
}
