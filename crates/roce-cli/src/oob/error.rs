//! What can fail in `roce perf` and `roce ping`, as the user is told it.
//!
//! One enum says which part failed: the arguments, the device, the local
//! sockets, the TCP exchange with the peer (I/O, a peer that closed, a
//! malformed or incompatible message, a deadline), the key agreement, or
//! the test itself. The messages are the ones the tools print after
//! `error: `.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// An error of `roce perf` or `roce ping`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument, or a combination of them, no peer can make right.
    #[error("{0}")]
    BadArgs(String),
    /// The pre-shared key file of `--psk` cannot be read.
    #[error("cannot read the pre-shared key {}: {source}", path.display())]
    Psk { path: std::path::PathBuf, source: io::Error },
    /// A verb or device call failed.
    #[error(transparent)]
    Device(#[from] roce::Error),
    /// The device could not be opened on its UDP address.
    #[error("cannot open the RDMA device on UDP {bind}: {source}{}", open_hint(source))]
    OpenDevice { bind: SocketAddr, source: roce::Error },
    /// A local socket or thread could not be set up (`what` says which).
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    /// The TCP listener of a server.
    #[error("cannot listen on TCP port {port}: {source}")]
    Listen { port: u16, source: io::Error },
    /// The server's name does not resolve.
    #[error("cannot resolve the server address {server:?}: {source}")]
    Resolve { server: String, source: io::Error },
    /// The server's name resolves to no address.
    #[error("the server address {server:?} resolves to nothing")]
    NoAddress { server: String },
    /// No server answered at `addr` within `after`.
    #[error(
        "cannot reach the server at {addr}: {source} (gave up after {:.1} s; is `roce {tool}` running there?)",
        after.as_secs_f64()
    )]
    Unreachable { addr: SocketAddr, source: io::Error, after: Duration, tool: Tool },
    /// Sending to or receiving from the peer over TCP failed (`what`
    /// says which message).
    #[error("{what}: {source}")]
    Exchange { what: String, source: io::Error },
    /// The peer closed the TCP connection (`early`: in the middle of a
    /// message we were waiting for).
    #[error("the peer closed the TCP connection{}", if *early { " early" } else { "" })]
    Closed { early: bool },
    /// The peer said something we cannot take: a malformed message, an
    /// incompatible version, one end encrypting and the other not.
    #[error("{0}")]
    Protocol(String),
    /// A server's whole exchange with a client did not end within its budget.
    #[error("timed out in the exchange after {} s", budget.as_secs())]
    ExchangeTimeout { budget: Duration },
    /// A wait for the peer gave up (`what` says on what).
    #[error("{what}")]
    Timeout { what: String },
    /// The X25519 key agreement of `--encrypt`.
    #[error("encryption: {0}")]
    Encryption(roce::Error),
    /// The test ran and failed: a completion error, corrupted data, a
    /// stalled transfer.
    #[error("{0}")]
    Failed(String),
    /// `source`, followed by what the device saw that explains it (a
    /// datagram the kernel refused, the device's death).
    #[error("{source}{notes}")]
    WithDevice { source: Box<Error>, notes: String },
    /// `source`, with what the user may do about it.
    #[error("{source} ({hint})")]
    Hinted { source: Box<Error>, hint: &'static str },
    /// A `--loopback` run: the server's end failed.
    #[error("server: {0}")]
    Server(Box<Error>),
    /// A `--loopback` run: both ends failed (the server's failure may be
    /// the cause of the client's).
    #[error("{client}\n       server: {server}")]
    BothEnds { client: Box<Error>, server: Box<Error> },
    /// A `--loopback` run: the server's thread panicked.
    #[error("the server thread panicked")]
    ServerPanicked,
}

/// Which tool a message names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Perf,
    Ping,
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tool::Perf => "perf",
            Tool::Ping => "ping",
        })
    }
}

/// What to try when the device cannot be opened.
fn open_hint(e: &roce::Error) -> &'static str {
    match e {
        roce::Error::Io(io) if io.kind() == io::ErrorKind::AddrInUse => {
            " (the UDP port is taken: choose another with --udp-port; 0 picks a free one)"
        }
        roce::Error::Io(io) if io.kind() == io::ErrorKind::AddrNotAvailable => {
            " (is that an address of this host?)"
        }
        _ => "",
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Says what a local I/O operation was doing when it failed
/// ([`Error::Io`]).
pub trait Context<T> {
    fn context(self, what: impl fmt::Display) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, io::Error> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|source| Error::Io { what: what.to_string(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_failed() {
        let refused = || io::Error::from(io::ErrorKind::ConnectionRefused);
        let e = Error::Unreachable {
            addr: "127.0.0.1:18515".parse().unwrap(),
            source: refused(),
            after: Duration::from_millis(1500),
            tool: Tool::Ping,
        };
        assert_eq!(
            e.to_string(),
            format!(
                "cannot reach the server at 127.0.0.1:18515: {} (gave up after 1.5 s; is `roce ping` running there?)",
                refused()
            )
        );
        let e = Error::OpenDevice {
            bind: "127.0.0.1:4791".parse().unwrap(),
            source: roce::Error::Io(io::ErrorKind::AddrInUse.into()),
        };
        assert!(e.to_string().ends_with("0 picks a free one)"), "{e}");
        let both = Error::BothEnds {
            client: Box::new(Error::Closed { early: true }),
            server: Box::new(Error::ExchangeTimeout { budget: Duration::from_secs(3) }),
        };
        assert_eq!(
            both.to_string(),
            "the peer closed the TCP connection early\n       server: timed out in the exchange after 3 s"
        );
    }
}
