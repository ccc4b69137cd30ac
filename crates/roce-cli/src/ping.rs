//! `roce ping`: ibv_rc_pingpong over the UDP driver, with its options,
//! its TCP exchange and its output, so either end can be a stock
//! `ibv_rc_pingpong -g <index>`; with `--ud`, ibv_ud_pingpong (UD QPs,
//! Q_Key 0x11111111, receive buffers with room for the 40-byte GRH, a
//! message no larger than the path MTU).
//!
//! The exchange (TCP port 18515): the client sends
//! `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, the GID as 32 hex digits) with its
//! NUL, 52 bytes; the server connects its QP and answers the same way; the
//! client sends "done\0". A device on a UDP port other than 4791 announces
//! the port in the LID field (RoCE has no LIDs; a stock peer sends 0).
//! The server gives a client `--timeout` from accept for all of it; a
//! client that fails it is dropped and the next one served.
//!
//! Then both ends ping-pong `-n` SENDs of `-s` bytes: the client sends
//! first, each end sends again once its previous send completed and the
//! peer's message arrived.

use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use roce::{
    alloc_buffer, Access, AddressVector, AttrMask, ConnectOptions, Cq, Device, DeviceConfig, Endpoint, Mr,
    PathMtu, Psn, Qp, QpAttr, QpBuilder, QpState, RecvWr, SendOp, SendWr, UdDest, WcStatus, WC_ZERO,
};

use crate::perf::exchange::{self, gid_bytes, Encryption, ROCE_UDP_PORT};
use crate::perf::{parse_mtu, Context as _, Error, Result};
use roce::crypto::Session;

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
const MSG_LEN: usize = 52;
/// Largest inline send (the QP is created with this much inline room).
const MAX_INLINE: u32 = 256;
/// The Q_Key ibv_ud_pingpong uses on both ends.
const UD_QKEY: u32 = 0x1111_1111;
/// Room for the GRH in front of a UD receive (IBTA §11.4.1.1, 40 bytes).
const GRH_LEN: u32 = 40;
/// After the run, how long the peer must be quiet before the QP goes: two
/// local ACK timeouts of a typical peer (timeout 14: 67 ms), so a
/// retransmission of its last message still gets our ACK.
const LINGER_QUIET: Duration = Duration::from_millis(150);
const LINGER_MAX: Duration = Duration::from_secs(2);

/// Arguments of `roce ping`.
#[derive(Debug, Clone, clap::Args)]
pub struct PingArgs {
    /// Server to connect to; without it, wait for a client.
    #[arg(value_name = "SERVER", conflicts_with = "loopback")]
    pub server: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long, default_value_t = exchange::DEFAULT_PORT)]
    pub port: u16,
    /// Size of each message in bytes.
    #[arg(short = 's', long, value_name = "BYTES", default_value_t = 4096, value_parser = parse_size)]
    pub size: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1000, value_parser = parse_iters)]
    pub iters: u64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, value_name = "BYTES", default_value = "1024", value_parser = parse_mtu)]
    pub mtu: PathMtu,
    /// Receives to keep posted.
    #[arg(short = 'r', long = "rx-depth", value_name = "N", default_value_t = 500, value_parser = parse_rx_depth)]
    pub rx_depth: u32,
    /// Local GID index; this device has one GID, 0 (the bound address).
    #[arg(short = 'g', long = "gid-idx", value_name = "INDEX", value_parser = parse_gid_index)]
    pub gid_idx: Option<u32>,
    /// Accepted for compatibility and ignored.
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ibdev: Option<String>,
    /// IP address of the device (its GID) [default: the address the TCP peer reaches].
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// UDP port of the device (0: any free port).
    #[arg(long = "udp-port", value_name = "PORT", default_value_t = ROCE_UDP_PORT)]
    pub udp_port: u16,
    /// Spin on the socket instead of sleeping.
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,
    /// Write every packet this end sends and receives to a pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Run server and client in this process over 127.0.0.1 (or --bind).
    #[arg(long)]
    pub loopback: bool,
    /// Seconds to wait for the server, for the peer's part of the
    /// exchange, or for any progress.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Unreliable Datagram QPs, like ibv_ud_pingpong (the message must fit
    /// in one packet: -s at most the path MTU).
    #[arg(long)]
    pub ud: bool,
    /// Validate received buffers as the stock tools' --chk does: the sender
    /// writes a marker at the start of every page of the message, the
    /// receiver checks it (a mismatch fails the run).
    #[arg(short = 'c', long)]
    pub chk: bool,
    /// Print the device's counters at the end.
    #[arg(long)]
    pub counters: bool,
    /// Send one datagram per message, without UDP GSO.
    #[arg(long = "no-gso")]
    pub no_gso: bool,
    /// Encrypt and authenticate the QP's packets (AES-128-GCM, keys agreed
    /// by X25519 over TCP before the addresses). RC only; both ends must
    /// ask for it, and only `roce` peers can.
    #[arg(long, conflicts_with = "ud")]
    pub encrypt: bool,
    /// With --encrypt: a file whose bytes both ends mix into the keys.
    #[arg(long, value_name = "FILE", requires = "encrypt")]
    pub psk: Option<PathBuf>,
}

fn encryption(a: &PingArgs) -> Result<Option<Encryption>> {
    Encryption::from_flags(a.encrypt, a.psk.as_deref()).map_err(Error)
}

/// An encrypting end sends this before its address: `rpp1:`, its X25519
/// public key in hex, NUL (70 bytes). A stock peer never does; the first
/// `MSG_LEN` bytes tell a hello from an address.
const HELLO_TAG: &[u8; 5] = b"rpp1:";
const HELLO_LEN: usize = HELLO_TAG.len() + 2 * roce::crypto::PUBLIC_KEY_LEN + 1;

fn hello(kx: &roce::crypto::KeyExchange) -> Vec<u8> {
    let mut h = HELLO_TAG.to_vec();
    for b in kx.public_key() {
        h.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    h.push(0);
    h
}

/// The peer's public key from a hello whose first `MSG_LEN` bytes are
/// `first` and the rest `rest`.
fn parse_hello(first: &[u8], rest: &[u8]) -> Result<[u8; roce::crypto::PUBLIC_KEY_LEN]> {
    let all = [first, rest].concat();
    let hex = &all[HELLO_TAG.len()..HELLO_LEN - 1];
    let mut k = [0u8; roce::crypto::PUBLIC_KEY_LEN];
    for (i, out) in k.iter_mut().enumerate() {
        let s = std::str::from_utf8(&hex[2 * i..2 * i + 2]).ok();
        *out = s
            .and_then(|s| u8::from_str_radix(s, 16).ok())
            .ok_or_else(|| Error("malformed encryption hello from the peer".into()))?;
    }
    Ok(k)
}

fn parse_size(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("the message size must be at least 1 byte".into()),
        Ok(v) if v <= 1 << 30 => Ok(v as u32),
        Ok(_) => Err("the message size must be at most 1 GiB".into()),
        Err(_) => Err(format!("'{s}' is not a valid message size")),
    }
}

fn parse_iters(s: &str) -> std::result::Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("'{s}' is not a valid number of iterations (at least 1)")),
    }
}

fn parse_rx_depth(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(v) if (1..=16_384).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a valid RX depth (1 to 16384)")),
    }
}

fn parse_gid_index(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Ok(0),
        Ok(v) => {
            Err(format!("GID index {v} does not exist: the device has one GID, index 0 (the bound address)"))
        }
        Err(_) => Err(format!("'{s}' is not a valid GID index")),
    }
}

/// What each end tells the other (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: [u8; 16],
}

impl Dest {
    /// The 52-byte message with its NUL.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let s = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn & 0xff_ffff, self.psn & 0xff_ffff);
        let mut out = [0u8; MSG_LEN];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    pub fn decode(b: &[u8]) -> Result<Dest> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let text = String::from_utf8_lossy(&b[..end]).into_owned();
        let bad = || Error(format!("malformed address from the peer: {text:?}"));
        let f: Vec<&str> = text.split(':').collect();
        if f.len() != 4 || f[3].len() != 32 {
            return Err(bad());
        }
        let hex = |s: &str, max: u32| u32::from_str_radix(s, 16).ok().filter(|&v| v <= max).ok_or_else(bad);
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            let pair = f[3].get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *g = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid: hex(f[0], 0xffff)? as u16,
            qpn: hex(f[1], 0xff_ffff)?,
            psn: hex(f[2], 0xff_ffff)?,
            gid,
        })
    }

    /// Printed like `inet_ntop(AF_INET6)` does.
    fn gid_text(&self) -> String {
        Ipv6Addr::from(self.gid).to_string()
    }

    fn line(&self, side: &str) -> String {
        self.line_sep(side, ',')
    }

    /// ibv_ud_pingpong prints its local address with a colon before the GID.
    fn line_sep(&self, side: &str, sep: char) -> String {
        format!(
            "  {side} address:{}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
            if side == "local" { "  " } else { " " },
            self.lid,
            self.qpn,
            self.psn,
            self.gid_text()
        )
    }
}

fn read_msg(s: &mut TcpStream) -> Result<[u8; MSG_LEN]> {
    use std::io::Read;
    let mut b = [0u8; MSG_LEN];
    s.read_exact(&mut b).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Error("couldn't read the remote address: the peer sent nothing within --timeout".into())
        }
        _ => Error(format!("couldn't read the remote address: {e}")),
    })?;
    Ok(b)
}

fn write_all(s: &mut TcpStream, b: &[u8]) -> Result<()> {
    use std::io::Write;
    s.write_all(b).context("couldn't send the local address")
}

/// `pp_client_exch_dest`; with `encrypt`, hellos first (see `HELLO_TAG`)
/// and the agreed session.
pub fn client_exchange(
    s: &mut TcpStream,
    mine: &Dest,
    encrypt: &Option<Encryption>,
) -> Result<(Dest, Option<Session>)> {
    let kx = encrypt.as_ref().map(Encryption::start).transpose()?;
    let no_hello = || Error("the server does not encrypt: run both ends with --encrypt".into());
    // One write: a server that refuses the hello closes at once.
    let mut first_words = kx.as_ref().map(hello).unwrap_or_default();
    first_words.extend_from_slice(&mine.encode());
    write_all(s, &first_words).map_err(|e| if kx.is_some() { no_hello() } else { e })?;
    let mut first = read_msg(s).map_err(|e| match &kx {
        Some(_) => no_hello(),
        None => Error(format!("{} (a roce server run with --encrypt hangs up on a client without it)", e.0)),
    })?;
    let mut session = None;
    match (encrypt.as_ref().zip(kx), first.starts_with(HELLO_TAG)) {
        (Some((enc, kx)), true) => {
            let mut rest = [0u8; HELLO_LEN - MSG_LEN];
            std::io::Read::read_exact(s, &mut rest).context("couldn't read the server's hello")?;
            session = Some(enc.agree(kx, &parse_hello(&first, &rest)?, true)?);
            first = read_msg(s)?;
        }
        (Some(_), false) => return Err(no_hello()),
        (None, true) => {
            return Err(Error("the server asks for encryption: run both ends with --encrypt".into()))
        }
        (None, false) => {}
    }
    let theirs = Dest::decode(&first)?;
    write_all(s, b"done\0")?;
    Ok((theirs, session))
}

/// `pp_server_exch_dest`: `connect` runs between reading the client's
/// address and answering (the server's QP is ready before the client
/// sends). All of it, the client's "done\0" included, must be over by
/// `deadline` (`budget` after accept), however the client paces its bytes.
pub fn server_exchange(
    s: &mut TcpStream,
    mine: &Dest,
    deadline: Instant,
    budget: Duration,
    encrypt: &Option<Encryption>,
    connect: impl FnOnce(&Dest, Option<&Session>) -> Result<()>,
) -> Result<Dest> {
    let late = || Error(format!("timed out in the exchange after {} s", budget.as_secs()));
    let mut msg = [0u8; MSG_LEN];
    let read = |s: &mut TcpStream, b: &mut [u8]| {
        read_by(s, b, deadline).map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => late(),
            _ => Error(format!("couldn't read the remote address: {e}")),
        })
    };
    read(s, &mut msg)?;
    let mut session = None;
    let mut reply = Vec::new();
    match (encrypt, msg.starts_with(HELLO_TAG)) {
        (Some(enc), true) => {
            let mut rest = [0u8; HELLO_LEN - MSG_LEN];
            read(s, &mut rest)?;
            let peer = parse_hello(&msg, &rest)?;
            let kx = enc.start()?;
            reply = hello(&kx);
            session = Some(enc.agree(kx, &peer, false)?);
            read(s, &mut msg)?;
        }
        (Some(_), false) => {
            return Err(Error("the client does not encrypt: run both ends with --encrypt".into()))
        }
        (None, true) => {
            return Err(Error("the client asks for encryption: run both ends with --encrypt".into()))
        }
        (None, false) => {}
    }
    let theirs = Dest::decode(&msg)?;
    connect(&theirs, session.as_ref())?;
    reply.extend_from_slice(&mine.encode());
    write_by(s, &reply, deadline).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => late(),
        _ => Error(format!("couldn't send the local address: {e}")),
    })?;
    let mut done = [0u8; 5];
    read_by(s, &mut done, deadline).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => late(),
        _ => Error(format!("couldn't read the client's \"done\": {e}")),
    })?;
    if &done != b"done\0" {
        return Err(Error(format!(
            "malformed end of the exchange from the peer: {:?} instead of \"done\"",
            String::from_utf8_lossy(&done)
        )));
    }
    Ok(theirs)
}

/// The time left until `deadline` (at least 1 ms: a zero timeout blocks),
/// or a `TimedOut` error once it has passed.
fn left(deadline: Instant) -> std::io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(d) if !d.is_zero() => Ok(d.max(Duration::from_millis(1))),
        _ => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// Fills `b` from `s` by `deadline`.
fn read_by(s: &mut TcpStream, b: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    use std::io::{ErrorKind, Read};
    let mut got = 0;
    while got < b.len() {
        s.set_read_timeout(Some(left(deadline)?))?;
        match s.read(&mut b[got..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `b` to `s` by `deadline`.
fn write_by(s: &mut TcpStream, mut b: &[u8], deadline: Instant) -> std::io::Result<()> {
    use std::io::{ErrorKind, Write};
    while !b.is_empty() {
        s.set_write_timeout(Some(left(deadline)?))?;
        match s.write(b) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => b = &b[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The device and objects of one end.
struct End {
    dev: Device,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    me: Dest,
    size: u32,
    rx_depth: u32,
    busy_poll: bool,
    /// UD: where sends go, once the exchange named the peer.
    ud_dest: Option<Cell<Option<UdDest>>>,
    chk: bool,
}

/// The page size the stock tools' `--chk` marks the message by.
const CHK_PAGE: usize = 4096;

/// The marker `--chk` writes at the start of page `page` of a message:
/// rdma-core's pingpong examples write `page % sizeof(char)`, which is 0.
fn chk_marker(page: usize) -> u8 {
    (page % std::mem::size_of::<std::ffi::c_char>()) as u8
}

/// What no peer can make right: checked by each end, and before a
/// `--loopback` run starts either, so that the error is this one whichever
/// end would meet it first.
fn check_args(a: &PingArgs) -> Result<()> {
    if a.ud && a.size as usize > a.mtu.bytes() {
        return Err(Error(format!(
            "a UD message must fit in one packet: -s {} is larger than the path MTU ({})",
            a.size,
            a.mtu.bytes()
        )));
    }
    Ok(())
}

impl End {
    fn open(a: &PingArgs, bind: SocketAddr, pcap: Option<PathBuf>) -> Result<End> {
        check_args(a)?;
        let mut cfg = DeviceConfig::new(bind);
        cfg.busy_poll = a.busy_poll;
        cfg.pcap = pcap;
        cfg.gso = !a.no_gso;
        let dev = Device::open(cfg).map_err(|e| {
            let hint = match &e {
                roce::Error::Io(io) if io.kind() == std::io::ErrorKind::AddrInUse => {
                    " (the UDP port is taken: choose another with --udp-port; 0 picks a free one)"
                }
                _ => "",
            };
            Error(format!("cannot open the RDMA device on UDP {bind}: {e}{hint}"))
        })?;
        crate::report::opened(&dev);
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(a.rx_depth as usize + 1)?;
        let qp = pd.create_qp(
            if a.ud { QpBuilder::ud(&cq) } else { QpBuilder::rc(&cq) }
                .max_send_wr(1)
                .max_recv_wr(a.rx_depth)
                .max_sge(1, 1)
                .max_inline_data(MAX_INLINE),
        )?;
        // UD receives start with the GRH: the buffer has room for it in
        // front of the message (ibv_ud_pingpong's layout).
        let len = (a.size + if a.ud { GRH_LEN } else { 0 }) as usize;
        let mr = pd.reg_mr(alloc_buffer(len), Access::LOCAL_WRITE)?;
        mr.fill(0, len, 0x7b)?;
        let port = dev.local_addr().port();
        let me = Dest {
            lid: if port == ROCE_UDP_PORT { 0 } else { port },
            qpn: qp.qpn(),
            psn: qp.endpoint().psn.value(),
            gid: gid_bytes(dev.gid()),
        };
        let ud_dest = a.ud.then(|| Cell::new(None));
        let end = End {
            dev,
            cq,
            qp,
            mr,
            me,
            size: a.size,
            rx_depth: a.rx_depth,
            busy_poll: a.busy_poll,
            ud_dest,
            chk: a.chk,
        };
        if a.ud {
            // A UD QP needs nothing from the peer to be ready: RTS and the
            // receives before the exchange, as ibv_ud_pingpong.
            end.qp.ready_ud(UD_QKEY)?;
            for _ in 0..end.rx_depth {
                end.post_recv()?;
            }
        }
        Ok(end)
    }

    /// Makes the QP ready for another client after one was dropped: back
    /// to RESET (UD: to RTS again with a full receive queue), its
    /// completions discarded. The QPN and first PSN stay, so the local
    /// address printed before still holds.
    fn renew(&self) -> Result<()> {
        self.qp.modify(&QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, AttrMask::STATE)?;
        let mut wcs = [WC_ZERO; 16];
        while self.cq.poll(&mut wcs)? > 0 {}
        if let Some(d) = &self.ud_dest {
            d.set(None);
            self.qp.ready_ud(UD_QKEY)?;
            for _ in 0..self.rx_depth {
                self.post_recv()?;
            }
        }
        Ok(())
    }

    fn post_recv(&self) -> Result<()> {
        let len = self.size + if self.ud_dest.is_some() { GRH_LEN } else { 0 };
        Ok(self.qp.post_recv(RecvWr { wr_id: RECV_WRID, sg_list: vec![self.mr.sge(0, len)] })?)
    }

    /// Where the message starts in the buffer (UD: after the GRH).
    fn msg_offset(&self) -> usize {
        if self.ud_dest.is_some() {
            GRH_LEN as usize
        } else {
            0
        }
    }

    fn post_send(&self) -> Result<()> {
        if self.chk {
            for (page, at) in (0..self.size as usize).step_by(CHK_PAGE).enumerate() {
                self.mr.write(self.msg_offset() + at, &[chk_marker(page)])?;
            }
        }
        let mut wr = match &self.ud_dest {
            None => SendWr::new(SEND_WRID, SendOp::Send, vec![self.mr.sge(0, self.size)]),
            Some(d) => {
                let mut wr =
                    SendWr::new(SEND_WRID, SendOp::Send, vec![self.mr.sge(u64::from(GRH_LEN), self.size)]);
                wr.ud = d.get();
                wr
            }
        };
        wr.inline = self.size <= MAX_INLINE;
        Ok(self.qp.post_send(wr)?)
    }

    /// `--chk`: the markers of the message just received.
    fn check_received(&self) -> Result<()> {
        for (page, at) in (0..self.size as usize).step_by(CHK_PAGE).enumerate() {
            let mut b = [0u8];
            self.mr.read(self.msg_offset() + at, &mut b)?;
            if b[0] != chk_marker(page) {
                return Err(Error(format!("invalid data in page {page}: {:#04x}", b[0])));
            }
        }
        Ok(())
    }

    /// The local address line as the stock tool prints it.
    fn local_line(&self) -> String {
        self.me.line_sep("local", if self.ud_dest.is_some() { ':' } else { ',' })
    }

    /// `pp_connect_ctx`, then the receives (rc_pingpong posts them in
    /// INIT; `Qp::connect` moves the QP from RESET to RTS in one call, and
    /// receives are posted before the peer can send: the server answers the
    /// exchange only after this, the client sends only after this).
    fn connect(&self, peer: &Dest, mtu: PathMtu, session: Option<&Session>) -> Result<()> {
        if peer.gid == [0; 16] {
            return Err(Error("the peer sent no GID: run ibv_rc_pingpong with -g <gid index>".into()));
        }
        let ip = Ipv6Addr::from(peer.gid).to_canonical();
        if ip.is_ipv4() != self.dev.gid().is_ipv4() {
            return Err(Error(format!("the peer's GID {ip} is not of our IP version ({})", self.dev.gid())));
        }
        let port = if peer.lid == 0 { ROCE_UDP_PORT } else { peer.lid };
        if let Some(d) = &self.ud_dest {
            let av = AddressVector { udp_port: Some(port), ..AddressVector::new(ip) };
            d.set(Some(UdDest { av, remote_qpn: peer.qpn, remote_qkey: UD_QKEY }));
            return Ok(());
        }
        let ep = Endpoint { gid: ip, port, qpn: peer.qpn, psn: Psn::new(peer.psn) };
        let opts = ConnectOptions {
            mtu,
            access: Access::NONE,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            ..ConnectOptions::default()
        };
        if let Some(s) = session {
            self.qp.protect(&s.qp_keys(self.me.qpn, peer.qpn))?;
        }
        self.qp.connect(&ep, &opts)?;
        for _ in 0..self.rx_depth {
            self.post_recv()?;
        }
        Ok(())
    }

    /// The ping-pong; returns the elapsed time.
    fn run(&self, iters: u64, client: bool, timeout: Duration) -> Result<Duration> {
        let mut tally = Tally::new(iters, client);
        if client {
            self.post_send()?;
        }
        let mut routs = self.rx_depth;
        let mut wcs = [WC_ZERO; 2];
        let start = Instant::now();
        let mut last = start;
        'wait: while !tally.done() {
            let n = match self
                .cq
                .wait(&mut wcs, timeout.saturating_sub(last.elapsed()).max(Duration::from_millis(1)))
            {
                Ok(n) => n,
                Err(roce::Error::Timeout(_)) => 0,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                if last.elapsed() >= timeout {
                    return Err(Error(format!(
                        "no completion for {} s after {} sends and {} receives (is the peer running?)",
                        timeout.as_secs(),
                        tally.scnt,
                        tally.rcnt
                    )));
                }
                continue;
            }
            last = Instant::now();
            for wc in &wcs[..n] {
                match tally.take(wc.wr_id, wc.status)? {
                    Seen::Send => {}
                    Seen::Recv => {
                        if self.chk {
                            self.check_received()?;
                        }
                        routs -= 1;
                        if routs <= 1 {
                            while routs < self.rx_depth {
                                self.post_recv()?;
                                routs += 1;
                            }
                        }
                    }
                    Seen::LastAckLost => {
                        eprintln!(
                            "note: the ACK of the last message was lost and the server has left; \
                             it answered every message, so every message arrived"
                        );
                        // The QP is in the error state now: what follows on
                        // the CQ is the flush of the receives still posted.
                        break 'wait;
                    }
                }
                if tally.send_due() {
                    self.post_send()?;
                }
            }
        }
        let t = start.elapsed();
        if self.busy_poll {
            // A busy-polling device sends the ACK of the peer's last message
            // on the next call: make it, the peer is still waiting for it.
            self.dev.progress()?;
            self.dev.progress()?;
        }
        self.linger();
        Ok(t)
    }

    /// Keeps the QP alive after the last message until the peer has been
    /// quiet for a while (like TCP's TIME_WAIT): if our ACK of its last
    /// message was lost, its retransmission still finds a QP to ACK it,
    /// instead of the peer ending with a retry error. At most `LINGER_MAX`.
    fn linger(&self) {
        let start = Instant::now();
        let mut seen = self.dev.counters().rcvd_pkts;
        let mut quiet_since = start;
        while quiet_since.elapsed() < LINGER_QUIET && start.elapsed() < LINGER_MAX {
            std::thread::sleep(Duration::from_millis(10));
            if self.busy_poll {
                let _ = self.dev.progress();
            }
            let now = self.dev.counters().rcvd_pkts;
            if now != seen {
                seen = now;
                quiet_since = Instant::now();
            }
        }
    }
}

/// What a completion of the ping-pong was.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Send,
    Recv,
    /// The client's last SEND failed for want of an ACK after every answer
    /// had arrived: the run is complete (see [`Tally::take`]).
    LastAckLost,
}

/// rc_pingpong's completion accounting: sends and receives counted, and the
/// next SEND due once both the previous SEND and a receive completed.
#[derive(Debug)]
struct Tally {
    iters: u64,
    client: bool,
    scnt: u64,
    rcnt: u64,
    /// The work requests (`SEND_WRID`, `RECV_WRID` bits) still awaited
    /// before the next SEND.
    pending: u64,
}

impl Tally {
    fn new(iters: u64, client: bool) -> Self {
        let pending = if client { RECV_WRID | SEND_WRID } else { RECV_WRID };
        Tally { iters, client, scnt: 0, rcnt: 0, pending }
    }

    fn done(&self) -> bool {
        self.scnt >= self.iters && self.rcnt >= self.iters
    }

    /// Counts one completion. Any error fails the run but one: the server
    /// sends answer k only after receiving message k, so a client holding
    /// all `iters` answers knows every message arrived, and its last SEND
    /// failing with a retry error means only that the ACK was lost and the
    /// server has already destroyed its QP.
    fn take(&mut self, wr_id: u64, status: WcStatus) -> Result<Seen> {
        if status != WcStatus::Success {
            if self.client
                && self.rcnt >= self.iters
                && self.scnt + 1 == self.iters
                && wr_id == SEND_WRID
                && status == WcStatus::RetryExcErr
            {
                self.scnt = self.iters;
                return Ok(Seen::LastAckLost);
            }
            return Err(Error(format!("Failed status {status:?} ({}) for wr_id {wr_id}", status as u32)));
        }
        let seen = match wr_id {
            SEND_WRID => {
                self.scnt += 1;
                Seen::Send
            }
            RECV_WRID => {
                self.rcnt += 1;
                Seen::Recv
            }
            other => return Err(Error(format!("completion for unknown wr_id {other}"))),
        };
        self.pending &= !wr_id;
        Ok(seen)
    }

    /// Whether the next SEND is due now; if so, it is counted as awaited.
    fn send_due(&mut self) -> bool {
        if self.scnt < self.iters && self.pending == 0 {
            self.pending = RECV_WRID | SEND_WRID;
            true
        } else {
            false
        }
    }
}

/// Prints rc_pingpong's two result lines.
fn results(size: u32, iters: u64, t: Duration) -> String {
    let usec = t.as_secs_f64() * 1e6;
    let bytes = u64::from(size) * iters * 2;
    format!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec\n{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        bytes as f64 * 8.0 / usec,
        usec / 1e6,
        usec / iters as f64
    )
}

fn run_client(a: &PingArgs, server: &str, bind: Option<IpAddr>, pcap: Option<PathBuf>) -> Result<String> {
    let addrs: Vec<SocketAddr> = (server, a.port)
        .to_socket_addrs()
        .map_err(|e| Error(format!("cannot resolve the server address {server:?}: {e}")))?
        .collect();
    let mut s = exchange::connect(&addrs, Duration::from_secs(a.timeout))?;
    bound(&s, a)?;
    let ip = match bind {
        Some(ip) => ip,
        None => s.local_addr().context("TCP socket")?.ip().to_canonical(),
    };
    let udp_port = if a.loopback { 0 } else { a.udp_port };
    let end = End::open(a, SocketAddr::new(ip, udp_port), pcap)?;
    let mut out = end.local_line();
    let (peer, session) = client_exchange(&mut s, &end.me, &encryption(a)?)?;
    out += &format!("\n{}", peer.line("remote"));
    end.connect(&peer, a.mtu, session.as_ref())?;
    let t = end.run(a.iters, true, Duration::from_secs(a.timeout));
    end.finish(a, out, t)
}

/// Bounds every read and write of the exchange by `--timeout`: a peer that
/// connects and then says nothing is given up on.
fn bound(s: &TcpStream, a: &PingArgs) -> Result<()> {
    let t = Some(Duration::from_secs(a.timeout));
    s.set_read_timeout(t).context("TCP socket")?;
    s.set_write_timeout(t).context("TCP socket")
}

impl End {
    /// The output of a finished (or failed) run: results, counters, and
    /// the first datagram the kernel refused, if any.
    fn finish(&self, a: &PingArgs, mut out: String, t: Result<Duration>) -> Result<String> {
        let counters = a.counters.then(|| crate::report::counters_table(&self.dev));
        let t = match t {
            Ok(t) => t,
            Err(e) => {
                if let Some(c) = counters {
                    eprintln!("{c}");
                }
                return Err(Error(crate::report::with_send_error(&self.dev, e.0)));
            }
        };
        out = format!("{out}\n{}", results(a.size, a.iters, t));
        if let Some(c) = counters {
            out = format!("{out}\n{c}");
        }
        if let Some(w) = crate::report::send_error_warning(&self.dev) {
            eprintln!("{w}");
        }
        Ok(out)
    }
}

/// Waits for a client on `listener` and runs the ping-pong with it. With
/// `retry`, a client that fails the exchange is dropped (one line on
/// stderr; the QP is reset for the next) and the next one served; the
/// server ends with the first run that begins.
fn run_server(a: &PingArgs, listener: TcpListener, quiet: bool, retry: bool) -> Result<String> {
    let mut kept = match a.bind {
        Some(ip) => Some(End::open(a, SocketAddr::new(ip, a.udp_port), a.pcap.clone().filter(|_| !quiet))?),
        None => None,
    };
    let printed = kept.is_some();
    if let (Some(e), false) = (&kept, quiet) {
        println!("{}", e.local_line());
    }
    let budget = Duration::from_secs(a.timeout);
    let encrypt = encryption(a)?;
    loop {
        let (mut s, client) = listener.accept().context("accepting the client")?;
        let deadline = Instant::now() + budget;
        let _ = s.set_nodelay(true);
        // Without --bind, the device is on the address the client reached:
        // one opened for an earlier client serves only the same address.
        let ip = match a.bind {
            Some(ip) => ip,
            None => s.local_addr().context("TCP socket")?.ip().to_canonical(),
        };
        let end = match kept.take() {
            Some(e) if a.bind.is_some() || e.dev.gid() == ip => e,
            stale => {
                drop(stale);
                End::open(a, SocketAddr::new(ip, a.udp_port), a.pcap.clone())?
            }
        };
        match server_exchange(&mut s, &end.me, deadline, budget, &encrypt, |p, k| end.connect(p, a.mtu, k)) {
            Ok(peer) => {
                drop(listener);
                let mut out = if printed { String::new() } else { end.local_line() + "\n" };
                out += &peer.line("remote");
                let t = end.run(a.iters, false, budget);
                return end.finish(a, out, t);
            }
            Err(e) if retry => {
                eprintln!("roce ping: dropped client {}: {e}", exchange::canonical(client));
                drop(s);
                end.renew()?;
                kept = Some(end);
            }
            Err(e) => return Err(e),
        }
    }
}

fn run(a: &PingArgs) -> Result<()> {
    if let Some(d) = &a.ibdev {
        eprintln!("note: -d/--ib-dev {d} is ignored: the device is the UDP socket of --bind/--udp-port");
    }
    if a.loopback {
        let ip = a.bind.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        if !ip.is_loopback() {
            return Err(Error(format!("--loopback needs a loopback address, not {ip}")));
        }
        check_args(a)?;
        let l = TcpListener::bind((ip, 0)).context(format!("cannot listen on TCP {ip}"))?;
        let port = l.local_addr().context("TCP listener")?.port();
        let mut sa = a.clone();
        sa.bind = Some(ip);
        let srv = std::thread::spawn(move || run_server(&sa, l, true, false));
        let mut ca = a.clone();
        ca.port = port;
        let c = run_client(&ca, &ip.to_string(), Some(ip), a.pcap.clone());
        let s = srv.join().unwrap_or_else(|_| Err(Error("the server thread panicked".into())));
        return match (c, s) {
            (Ok(out), Ok(_)) => {
                println!("{out}");
                Ok(())
            }
            // The server's failure may be the cause of the client's (its
            // device died and it hung up): say both.
            (Err(c), Err(s)) => Err(Error(format!("{c}\n       server: {s}"))),
            (Err(e), Ok(_)) => Err(e),
            (Ok(_), Err(e)) => Err(Error(format!("server: {e}"))),
        };
    }
    match &a.server {
        Some(server) => {
            let out = run_client(a, server, a.bind, a.pcap.clone())?;
            println!("{out}");
        }
        None => {
            let out = run_server(a, exchange::listen(a.port)?, false, true)?;
            println!("{out}");
        }
    }
    Ok(())
}

/// `roce ping`: exit status 0 on success, 1 on failure.
pub fn main(a: &PingArgs) -> ExitCode {
    exit_status(run(a))
}

/// The exit status of a run: 0, or 1 with the error on stderr.
fn exit_status(r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::replay_tests::{tcp_stream, Segment};

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
        let crate::Command::Ping(a) = crate::Cli::try_parse_from(argv).unwrap().command else {
            unreachable!()
        };
        let r = run(&a);
        let e = r.as_ref().expect_err("a run on a dead device fails");
        assert!(e.0.contains("the driver thread panicked: injected by a test of the tools"), "{e}");
        assert_eq!(format!("{:?}", exit_status(r)), format!("{:?}", ExitCode::from(1)));
    }
    use std::io::{Read, Write};
    use std::path::Path;

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
}
