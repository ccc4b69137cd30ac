//! The TCP side of the out-of-band channel: a server's dual-stack
//! listener, a client's connect with retries until a deadline, name
//! resolution, and reads and writes bounded by a deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::error::{Error, Result, Tool};

/// The server's TCP listener: every address of the host, IPv4 and IPv6
/// alike (a dual-stack `[::]` socket, or `0.0.0.0` where IPv6 is off), as
/// perftest and ibv_rc_pingpong listen. The exchange's address family is
/// independent of the device's: the stock tools speak it over IPv4 only, so
/// a RoCE run over IPv6 GIDs takes its exchange over IPv4.
pub fn listen(port: u16) -> Result<TcpListener> {
    let any6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
    let dual = || -> std::io::Result<TcpListener> {
        let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None)?;
        s.set_only_v6(false)?;
        s.set_reuse_address(true)?;
        s.bind(&any6.into())?;
        s.listen(16)?;
        Ok(s.into())
    };
    dual()
        .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
        .map_err(|source| Error::Listen { port, source })
}

/// `a` with an IPv4-mapped IPv6 address written as IPv4 (a client of the
/// dual-stack listener).
pub fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// The addresses of `server` on TCP `port` (at least one).
pub fn resolve(server: &str, port: u16) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = (server, port)
        .to_socket_addrs()
        .map_err(|source| Error::Resolve { server: server.to_string(), source })?
        .collect();
    if addrs.is_empty() {
        return Err(Error::NoAddress { server: server.to_string() });
    }
    Ok(addrs)
}

/// Connects to the first reachable address, retrying refused connections
/// (the server may not listen yet) until `timeout` has passed. `tool`
/// names the server the user should check.
pub fn connect(addrs: &[SocketAddr], timeout: Duration, tool: Tool) -> Result<TcpStream> {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        for a in addrs {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(10));
            match TcpStream::connect_timeout(a, left) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = Some((*a, e)),
            }
        }
        if Instant::now() >= deadline {
            let (addr, source) =
                last.ok_or_else(|| Error::BadArgs("no server address to connect to".into()))?;
            return Err(Error::Unreachable { addr, source, after: timeout, tool });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The time left until `deadline` (at least 1 ms: a zero timeout blocks),
/// or a `TimedOut` error once it has passed.
fn left(deadline: Instant) -> std::io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(d) if !d.is_zero() => Ok(d.max(Duration::from_millis(1))),
        _ => Err(ErrorKind::TimedOut.into()),
    }
}

/// Fills `b` from `s` by `deadline` (`TimedOut` after it, `UnexpectedEof`
/// if the peer closes first).
pub fn read_by(s: &mut TcpStream, b: &mut [u8], deadline: Instant) -> std::io::Result<()> {
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

/// Writes all of `b` to `s` by `deadline` (`TimedOut` after it).
pub fn write_by(s: &mut TcpStream, mut b: &[u8], deadline: Instant) -> std::io::Result<()> {
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
