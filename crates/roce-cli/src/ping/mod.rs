//! `roce ping`: ibv_rc_pingpong over the UDP driver, with its options,
//! its TCP exchange and its output, so either end can be a stock
//! `ibv_rc_pingpong -g <index>`; with `--ud`, ibv_ud_pingpong (UD QPs,
//! Q_Key 0x11111111, receive buffers with room for the 40-byte GRH, a
//! message no larger than the path MTU).
//!
//! First the TCP exchange of addresses (see [`exchange`]). The server gives a client `--timeout` from accept for all of it; a
//! client that fails it is dropped and the next one served.
//!
//! Then both ends ping-pong `-n` SENDs of `-s` bytes: the client sends
//! first, each end sends again once its previous send completed and the
//! peer's message arrived.
//!
//! * [`args`]: the options;
//! * [`exchange`]: the TCP messages (addresses, encryption hellos);
//! * [`end`]: one end's device and QP, the ping-pong and its output;
//! * [`tally`]: the completion accounting that paces the sends;
//! * here: client, server, `--loopback`, exit status.
//!
//! The TCP plumbing, the errors and the encryption are the shared
//! [`crate::oob`]'s.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod args;
pub(crate) mod cm;
mod end;
mod exchange;
mod tally;
#[cfg(test)]
mod tests;

use args::check_args;
pub use args::PingArgs;
use end::End;
use exchange::{client_exchange, server_exchange};

use crate::oob::{self, Context as _, Encryption, Error, Result, Tool};

fn run_client(a: &PingArgs, server: &str, bind: Option<IpAddr>, pcap: Option<PathBuf>) -> Result<String> {
    let addrs = oob::tcp::resolve(server, a.port)?;
    let mut s = oob::tcp::connect(&addrs, Duration::from_secs(a.timeout), Tool::Ping)?;
    bound(&s, a)?;
    let ip = match bind {
        Some(ip) => ip,
        None => s.local_addr().context("TCP socket")?.ip().to_canonical(),
    };
    let udp_port = if a.loopback { 0 } else { a.udp_port };
    let end = End::open(a, SocketAddr::new(ip, udp_port), pcap)?;
    let mut out = end.local_line();
    let (peer, session) =
        client_exchange(&mut s, &end.me, &Encryption::from_flags(a.encrypt, a.psk.as_deref())?)?;
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
    let encrypt = Encryption::from_flags(a.encrypt, a.psk.as_deref())?;
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
                eprintln!("roce ping: dropped client {}: {e}", oob::tcp::canonical(client));
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
    if a.rdma_cm {
        return run_cm(a);
    }
    if a.loopback {
        let ip = a.bind.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        if !ip.is_loopback() {
            return Err(Error::BadArgs(format!("--loopback needs a loopback address, not {ip}")));
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
        let s = srv.join().unwrap_or(Err(Error::ServerPanicked));
        return match (c, s) {
            (Ok(out), Ok(_)) => {
                println!("{out}");
                Ok(())
            }
            // The server's failure may be the cause of the client's (its
            // device died and it hung up): say both.
            (Err(c), Err(s)) => Err(Error::BothEnds { client: Box::new(c), server: Box::new(s) }),
            (Err(e), Ok(_)) => Err(e),
            (Ok(_), Err(e)) => Err(Error::Server(Box::new(e))),
        };
    }
    match &a.server {
        Some(server) => {
            let out = run_client(a, server, a.bind, a.pcap.clone())?;
            println!("{out}");
        }
        None => {
            let out = run_server(a, oob::tcp::listen(a.port)?, false, true)?;
            println!("{out}");
        }
    }
    Ok(())
}

/// `roce ping -R`: client, server or both ends (`--loopback`: the server
/// on the bound address, or 127.0.0.1, and UDP port 0; the client on the
/// same address and `--udp-port`, naming the server's port).
fn run_cm(a: &PingArgs) -> Result<()> {
    check_args(a)?;
    if a.loopback {
        let ip = a.bind.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        if !ip.is_loopback() {
            return Err(Error::BadArgs(format!("--loopback needs a loopback address, not {ip}")));
        }
        let srv_end = end::End::open(a, SocketAddr::new(ip, 0), None)?;
        let ch = roce::cm::EventChannel::new().map_err(Error::Device)?;
        let listen = srv_end.dev.cm_listen(&ch, roce::cm::PortSpace::Tcp, a.port)?;
        let srv_port = srv_end.dev.local_addr().port();
        let sa = a.clone();
        let srv = std::thread::spawn(move || cm::server_on(&sa, &srv_end, &ch, listen));
        let c = cm::client(a, ip, Some(ip), srv_port);
        let s = srv.join().unwrap_or(Err(Error::ServerPanicked));
        return match (c, s) {
            (Ok(out), Ok(_)) => {
                println!("{out}");
                Ok(())
            }
            (Err(c), Err(s)) => Err(Error::BothEnds { client: Box::new(c), server: Box::new(s) }),
            (Err(e), Ok(_)) => Err(e),
            (Ok(_), Err(e)) => Err(Error::Server(Box::new(e))),
        };
    }
    let out = match &a.server {
        Some(server) => {
            let ip = oob::tcp::resolve(server, a.port)?
                .first()
                .map(|s| s.ip().to_canonical())
                .ok_or_else(|| Error::BadArgs(format!("{server} resolves to no address")))?;
            cm::client(a, ip, a.bind, a.udp_port)?
        }
        None => {
            let ip = a.bind.ok_or_else(|| {
                Error::BadArgs("an RDMA CM server needs --bind ADDR: the address its CM answers on".into())
            })?;
            cm::server(a, ip, a.udp_port, false)?
        }
    };
    println!("{out}");
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
