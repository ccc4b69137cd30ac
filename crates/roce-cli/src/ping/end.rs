//! One end of the ping-pong: its device, CQ, QP and buffer, the
//! connection to the peer's QP, the ping-pong loop, and the output.

use std::cell::Cell;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use roce::crypto::Session;
use roce::{
    alloc_buffer, Access, AddressVector, AttrMask, ConnectOptions, Cq, Device, DeviceConfig, Endpoint, Mr,
    PathMtu, Psn, Qp, QpAttr, QpBuilder, QpState, RecvWr, SendOp, SendWr, UdDest, WC_ZERO,
};

use super::args::{check_args, PingArgs};
use super::exchange::Dest;
use super::tally::{Seen, Tally, RECV_WRID, SEND_WRID};
use crate::oob::{gid_bytes, Error, Result, ROCE_UDP_PORT};

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

/// The device and objects of one end.
pub(super) struct End {
    pub(super) dev: Device,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    pub(super) me: Dest,
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

impl End {
    pub(super) fn open(a: &PingArgs, bind: SocketAddr, pcap: Option<PathBuf>) -> Result<End> {
        check_args(a)?;
        let mut cfg = DeviceConfig::new(bind);
        cfg.busy_poll = a.busy_poll;
        cfg.pcap = pcap;
        cfg.gso = !a.no_gso;
        let dev = Device::open(cfg).map_err(|source| Error::OpenDevice { bind, source })?;
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
    pub(super) fn renew(&self) -> Result<()> {
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
                return Err(Error::Failed(format!("invalid data in page {page}: {:#04x}", b[0])));
            }
        }
        Ok(())
    }

    /// The local address line as the stock tool prints it.
    pub(super) fn local_line(&self) -> String {
        self.me.line_sep("local", if self.ud_dest.is_some() { ':' } else { ',' })
    }

    /// `pp_connect_ctx`, then the receives (rc_pingpong posts them in
    /// INIT; `Qp::connect` moves the QP from RESET to RTS in one call, and
    /// receives are posted before the peer can send: the server answers the
    /// exchange only after this, the client sends only after this).
    pub(super) fn connect(&self, peer: &Dest, mtu: PathMtu, session: Option<&Session>) -> Result<()> {
        if peer.gid == [0; 16] {
            return Err(Error::Protocol(
                "the peer sent no GID: run ibv_rc_pingpong with -g <gid index>".into(),
            ));
        }
        let ip = Ipv6Addr::from(peer.gid).to_canonical();
        if ip.is_ipv4() != self.dev.gid().is_ipv4() {
            return Err(Error::Protocol(format!(
                "the peer's GID {ip} is not of our IP version ({})",
                self.dev.gid()
            )));
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
        self.post_recvs()
    }

    /// The QP's receive queue filled (`rx_depth` receives).
    pub(super) fn post_recvs(&self) -> Result<()> {
        for _ in 0..self.rx_depth {
            self.post_recv()?;
        }
        Ok(())
    }

    /// The QP (for the RDMA CM path, which connects it itself).
    pub(super) fn qp(&self) -> &Qp {
        &self.qp
    }

    /// The ping-pong; returns the elapsed time.
    pub(super) fn run(&self, iters: u64, client: bool, timeout: Duration) -> Result<Duration> {
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
                    return Err(Error::Timeout {
                        what: format!(
                            "no completion for {} s after {} sends and {} receives (is the peer running?)",
                            timeout.as_secs(),
                            tally.scnt,
                            tally.rcnt
                        ),
                    });
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

    /// ucmatose's order instead of the ping-pong (`-R --burst`): with
    /// `send_first` (ucmatose's server) all `iters` messages go out one
    /// after another, then `iters` are received; otherwise (its client)
    /// all are received first, then sent. Returns the elapsed time.
    pub(super) fn run_burst(&self, iters: u64, send_first: bool, timeout: Duration) -> Result<Duration> {
        let (mut sent, mut recvd, mut in_flight) = (0u64, 0u64, false);
        let mut wcs = [WC_ZERO; 4];
        let start = Instant::now();
        let mut last = start;
        while sent < iters || recvd < iters {
            if sent < iters && !in_flight && (send_first || recvd == iters) {
                self.post_send()?;
                in_flight = true;
            }
            let left = timeout.saturating_sub(last.elapsed());
            let n = match self.cq.wait(&mut wcs, left.max(Duration::from_millis(1))) {
                Ok(n) => n,
                Err(roce::Error::Timeout(_)) if last.elapsed() >= timeout => {
                    return Err(Error::Timeout {
                        what: format!(
                            "no completion for {} s after {sent} sends and {recvd} receives (is the peer running?)",
                            timeout.as_secs()
                        ),
                    })
                }
                Err(roce::Error::Timeout(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            last = Instant::now();
            for wc in &wcs[..n] {
                if wc.status != roce::WcStatus::Success {
                    return Err(Error::Failed(format!(
                        "completion with status {:?} (wr_id {})",
                        wc.status, wc.wr_id
                    )));
                }
                if wc.wr_id == SEND_WRID {
                    sent += 1;
                    in_flight = false;
                } else {
                    recvd += 1;
                    self.post_recv()?;
                }
            }
        }
        let t = start.elapsed();
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

/// Prints rc_pingpong's two result lines.
pub(super) fn results(size: u32, iters: u64, t: Duration) -> String {
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

impl End {
    /// The output of a finished (or failed) run: results, counters, and
    /// the first datagram the kernel refused, if any.
    pub(super) fn finish(&self, a: &PingArgs, mut out: String, t: Result<Duration>) -> Result<String> {
        let counters = a.counters.then(|| crate::report::counters_table(&self.dev));
        let t = match t {
            Ok(t) => t,
            Err(e) => {
                if let Some(c) = counters {
                    eprintln!("{c}");
                }
                return Err(crate::report::with_send_error(&self.dev, e));
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
