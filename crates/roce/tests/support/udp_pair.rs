//! Two devices in one process over real UDP on loopback, each with a PD, a
//! CQ, an RC QP and a registered MR, the two QPs connected to each other
//! through the public API (`Qp::endpoint`, then `Qp::connect`): the set-up
//! the `roce` tests and the `vs_udp` bench share.
//!
//! Included as a module, not a crate:
//! `#[path = "support/udp_pair.rs"] mod udp_pair;` in a test,
//! `#[path = "../tests/support/udp_pair.rs"] mod udp_pair;` in a bench.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use roce::*;

/// How one side is made. The default is the loopback tests' side: IPv4
/// loopback, a driver thread, a 1024-entry CQ, 256 send and receive WRs,
/// a 1 MiB MR with every access right.
#[derive(Clone, Debug)]
pub struct SideOptions {
    /// Address and port the device binds ("127.0.0.1:0", "[::1]:0").
    pub bind: SocketAddr,
    /// `DeviceConfig::busy_poll`: the application's calls move the device,
    /// not a driver thread.
    pub busy_poll: bool,
    pub cq_depth: usize,
    /// `None`: `QpBuilder`'s default.
    pub max_send_wr: Option<u32>,
    /// `None`: `QpBuilder`'s default.
    pub max_recv_wr: Option<u32>,
    /// Length of the MR's buffer, from `alloc_buffer` (a plain
    /// `MemBuf::new` below `HUGE_PAGE_SIZE`, huge-page backed from it).
    pub mr_len: usize,
}

impl Default for SideOptions {
    fn default() -> Self {
        SideOptions {
            bind: "127.0.0.1:0".parse().unwrap(),
            busy_poll: false,
            cq_depth: 1024,
            max_send_wr: Some(256),
            max_recv_wr: Some(256),
            mr_len: 1 << 20,
        }
    }
}

impl SideOptions {
    pub fn bind(mut self, addr: &str) -> Self {
        self.bind = addr.parse().unwrap_or_else(|e| panic!("bind address {addr:?}: {e}"));
        self
    }
    pub fn busy_poll(mut self, on: bool) -> Self {
        self.busy_poll = on;
        self
    }
    pub fn cq_depth(mut self, depth: usize) -> Self {
        self.cq_depth = depth;
        self
    }
    /// Send and receive queue depths.
    pub fn qp_depths(mut self, send: u32, recv: u32) -> Self {
        (self.max_send_wr, self.max_recv_wr) = (Some(send), Some(recv));
        self
    }
    /// The queue depths `QpBuilder` chooses.
    pub fn default_qp_depths(mut self) -> Self {
        (self.max_send_wr, self.max_recv_wr) = (None, None);
        self
    }
    pub fn mr_len(mut self, len: usize) -> Self {
        self.mr_len = len;
        self
    }

    /// The device alone, for tests that build their own QPs.
    pub fn device(&self) -> Device {
        let mut cfg = DeviceConfig::new(self.bind);
        cfg.busy_poll = self.busy_poll;
        Device::open(cfg).unwrap()
    }

    /// A device with its PD, CQ, RC QP (in RESET) and MR.
    pub fn open(&self) -> Side {
        let dev = self.device();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(self.cq_depth).unwrap();
        let mut qb = QpBuilder::rc(&cq);
        if let Some(n) = self.max_send_wr {
            qb = qb.max_send_wr(n);
        }
        if let Some(n) = self.max_recv_wr {
            qb = qb.max_recv_wr(n);
        }
        let qp = pd.create_qp(qb).unwrap();
        let mr = pd.reg_mr(alloc_buffer(self.mr_len), Access::ALL).unwrap();
        Side { dev, pd, cq, qp, mr }
    }
}

/// One end. Fields drop in this order: the device handle first, the MR last.
pub struct Side {
    pub dev: Device,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

/// Two sides and how their QPs connect. `x` is opened first, then `y`;
/// `x` connects to `y`, then `y` to `x`.
#[derive(Clone, Debug)]
pub struct UdpPair {
    pub x: SideOptions,
    pub y: SideOptions,
    pub connect: ConnectOptions,
    /// Protect both QPs (`Qp::protect`) with keys agreed by X25519.
    pub encrypt: bool,
}

impl UdpPair {
    /// Both sides alike, `ConnectOptions::default()`.
    pub fn new(side: SideOptions) -> Self {
        UdpPair { x: side.clone(), y: side, connect: ConnectOptions::default(), encrypt: false }
    }
    /// `y` made differently from `x`.
    pub fn y(mut self, side: SideOptions) -> Self {
        self.y = side;
        self
    }
    pub fn mtu(mut self, mtu: PathMtu) -> Self {
        self.connect.mtu = mtu;
        self
    }
    /// With `Qp::protect` on both QPs.
    pub fn encrypted(mut self, on: bool) -> Self {
        self.encrypt = on;
        self
    }
    /// Opens both sides and connects their QPs.
    pub fn open(&self) -> (Side, Side) {
        let (x, y) = (self.x.open(), self.y.open());
        if self.encrypt {
            use roce::crypto::KeyExchange;
            let (kx, ky) = (KeyExchange::new().unwrap(), KeyExchange::new().unwrap());
            let (px, py) = (kx.public_key(), ky.public_key());
            let (sx, sy) = (kx.agree(&py, true, None).unwrap(), ky.agree(&px, false, None).unwrap());
            let (qx, qy) = (x.qp.endpoint().qpn, y.qp.endpoint().qpn);
            x.qp.protect(&sx.qp_keys(qx, qy)).unwrap();
            y.qp.protect(&sy.qp_keys(qy, qx)).unwrap();
        }
        connect(&x, &y, &self.connect);
        (x, y)
    }
}

/// Connects `x`'s QP to `y`'s and `y`'s to `x`'s.
pub fn connect(x: &Side, y: &Side, opts: &ConnectOptions) {
    let (ex, ey) = (x.qp.endpoint(), y.qp.endpoint());
    x.qp.connect(&ey, opts).unwrap();
    y.qp.connect(&ex, opts).unwrap();
}

/// Waits for at least `n` completions on `cq` (all that arrive with the
/// last of them), failing after 10 s without one instead of hanging.
pub fn wait_n(cq: &Cq, n: usize) -> Vec<Wc> {
    let mut all = Vec::new();
    let mut buf = [WC_ZERO; 64];
    while all.len() < n {
        let k = cq.wait(&mut buf, Duration::from_secs(10)).expect("completion within 10 s");
        all.extend_from_slice(&buf[..k]);
    }
    all
}
