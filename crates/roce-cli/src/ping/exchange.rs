//! ibv_rc_pingpong's exchange over TCP (port 18515): the client sends
//! `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, the GID as 32 hex digits) with its
//! NUL, 52 bytes; the server connects its QP and answers the same way; the
//! client sends "done\0". A device on a UDP port other than 4791 announces
//! the port in the LID field (RoCE has no LIDs; a stock peer sends 0).
//! With `--encrypt`, each end sends a hello with its X25519 public key
//! before its address (see `HELLO_TAG`).

use std::net::{Ipv6Addr, TcpStream};
use std::time::{Duration, Instant};

use roce::crypto::Session;

use crate::oob::tcp::{read_by, write_by};
use crate::oob::{Encryption, Error, Result};

/// `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
pub(super) const MSG_LEN: usize = 52;

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
            .ok_or_else(|| Error::Protocol("malformed encryption hello from the peer".into()))?;
    }
    Ok(k)
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
        let bad = || Error::Protocol(format!("malformed address from the peer: {text:?}"));
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
    pub(super) fn gid_text(&self) -> String {
        Ipv6Addr::from(self.gid).to_string()
    }

    pub(super) fn line(&self, side: &str) -> String {
        self.line_sep(side, ',')
    }

    /// ibv_ud_pingpong prints its local address with a colon before the GID.
    pub(super) fn line_sep(&self, side: &str, sep: char) -> String {
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
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout {
            what: "couldn't read the remote address: the peer sent nothing within --timeout".into(),
        },
        _ => Error::Exchange { what: "couldn't read the remote address".into(), source: e },
    })?;
    Ok(b)
}

fn write_all(s: &mut TcpStream, b: &[u8]) -> Result<()> {
    use std::io::Write;
    s.write_all(b)
        .map_err(|source| Error::Exchange { what: "couldn't send the local address".into(), source })
}

/// `pp_client_exch_dest`; with `encrypt`, hellos first (see `HELLO_TAG`)
/// and the agreed session.
pub fn client_exchange(
    s: &mut TcpStream,
    mine: &Dest,
    encrypt: &Option<Encryption>,
) -> Result<(Dest, Option<Session>)> {
    let kx = encrypt.as_ref().map(Encryption::start).transpose()?;
    let no_hello = || Error::Protocol("the server does not encrypt: run both ends with --encrypt".into());
    // One write: a server that refuses the hello closes at once.
    let mut first_words = kx.as_ref().map(hello).unwrap_or_default();
    first_words.extend_from_slice(&mine.encode());
    write_all(s, &first_words).map_err(|e| if kx.is_some() { no_hello() } else { e })?;
    let mut first = read_msg(s).map_err(|e| match &kx {
        Some(_) => no_hello(),
        None => Error::Hinted {
            source: Box::new(e),
            hint: "a roce server run with --encrypt hangs up on a client without it",
        },
    })?;
    let mut session = None;
    match (encrypt.as_ref().zip(kx), first.starts_with(HELLO_TAG)) {
        (Some((enc, kx)), true) => {
            let mut rest = [0u8; HELLO_LEN - MSG_LEN];
            std::io::Read::read_exact(s, &mut rest).map_err(|source| Error::Exchange {
                what: "couldn't read the server's hello".into(),
                source,
            })?;
            session = Some(enc.agree(kx, &parse_hello(&first, &rest)?, true)?);
            first = read_msg(s)?;
        }
        (Some(_), false) => return Err(no_hello()),
        (None, true) => {
            return Err(Error::Protocol(
                "the server asks for encryption: run both ends with --encrypt".into(),
            ))
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
    let late = || Error::ExchangeTimeout { budget };
    let mut msg = [0u8; MSG_LEN];
    let read = |s: &mut TcpStream, b: &mut [u8]| {
        read_by(s, b, deadline).map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => late(),
            _ => Error::Exchange { what: "couldn't read the remote address".into(), source: e },
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
            return Err(Error::Protocol("the client does not encrypt: run both ends with --encrypt".into()))
        }
        (None, true) => {
            return Err(Error::Protocol(
                "the client asks for encryption: run both ends with --encrypt".into(),
            ))
        }
        (None, false) => {}
    }
    let theirs = Dest::decode(&msg)?;
    connect(&theirs, session.as_ref())?;
    reply.extend_from_slice(&mine.encode());
    write_by(s, &reply, deadline).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => late(),
        _ => Error::Exchange { what: "couldn't send the local address".into(), source: e },
    })?;
    let mut done = [0u8; 5];
    read_by(s, &mut done, deadline).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => late(),
        _ => Error::Exchange { what: "couldn't read the client's \"done\"".into(), source: e },
    })?;
    if &done != b"done\0" {
        return Err(Error::Protocol(format!(
            "malformed end of the exchange from the peer: {:?} instead of \"done\"",
            String::from_utf8_lossy(&done)
        )));
    }
    Ok(theirs)
}
