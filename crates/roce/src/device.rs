//! The verbs API: a device on a UDP socket and RAII handles for its objects.
//!
//! Handles keep what they depend on alive (an MR its PD, a QP its PD and
//! CQs, all of them the device), so they can be dropped in any order and the
//! engine object is destroyed when the last handle goes.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration as StdDuration;

use roce_proto::cc::CcAlgorithm;
use roce_proto::*;
use roce_wire::Psn;

use crate::capture::Capture;
use crate::driver::{self, Core, Shared};
pub use crate::driver::{DriverStats, SendError};
use crate::error::{Error, Result};
use crate::udp::UdpIo;

/// How to open a device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Address and UDP port to bind; the IP is the device's GID. Port 4791
    /// is RoCEv2's; other ports let several devices share a host.
    pub bind: SocketAddr,
    /// Busy-poll mode: the application's threads receive, by calling
    /// `Cq::poll`, `Cq::wait` or `Device::progress` in their loops, and what
    /// a receive produces (ACKs) leaves with the next post or call; the
    /// driver thread only keeps the timers. An application that stops
    /// calling them for long makes its peers time out. Lowest latency.
    pub busy_poll: bool,
    /// Write every packet sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Seed of the engine's identifiers, for reproducible runs only: 64
    /// bits anyone who sees enough QPNs and keys can search. `None` (the
    /// default) draws 256 bits from the OS and fails if it cannot.
    pub seed: Option<u64>,
    /// DSCP for outgoing packets (QPs may override through their address vector).
    pub dscp: u8,
    /// Mark outgoing packets ECN-capable (ECT(0)).
    pub ecn: bool,
    /// Use UDP GSO where the kernel offers it (several datagrams in one
    /// send). Off: one datagram per message.
    pub gso: bool,
    /// The address regions advertise to peers (default: the memory's own
    /// address, as ibverbs does; `ZeroBased` or `Random` keep the process's
    /// memory layout from peers).
    pub mr_addressing: MrAddressing,
    /// Hold each connected QP's peer to the UDP source port of its first
    /// packet (see `EngineConfig::pin_peer_port`).
    pub pin_peer_port: bool,
    /// Congestion control of connected QPs (default none: line rate).
    pub cc: CcAlgorithm,
    /// The rate congestion control starts from, bits/s.
    pub line_rate_bps: u64,
    /// How CE marks are answered with CNPs.
    pub cnp: CnpConfig,
}

/// How a device checks the ICRC of the packets it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RxIcrcCheck {
    /// Every bit (IPv6: the socket shows every field the ICRC covers).
    Full,
    /// IPv4 on a UDP socket, which does not show the Identification field:
    /// the ICRC is checked for the one ID that makes it right, so 16 of its
    /// 32 bits find the ID and a corrupt packet passes with probability
    /// 2^-16 (the IPv4 header checksum still protects the ID).
    Ipv4IdInferred,
}

impl std::fmt::Display for RxIcrcCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RxIcrcCheck::Full => "full (32 bits)",
            RxIcrcCheck::Ipv4IdInferred => {
                "IPv4 ID inferred from the ICRC (a UDP socket cannot see it): 16 of 32 bits check the packet"
            }
        })
    }
}

impl DeviceConfig {
    pub fn new(bind: SocketAddr) -> DeviceConfig {
        DeviceConfig {
            bind,
            busy_poll: false,
            pcap: None,
            seed: None,
            dscp: 0,
            ecn: true,
            gso: true,
            mr_addressing: MrAddressing::Pointer,
            pin_peer_port: false,
            cc: CcAlgorithm::None,
            line_rate_bps: roce_proto::limits::LINE_RATE_BPS,
            cnp: CnpConfig::default(),
        }
    }
}

struct DeviceInner {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    dscp: u8,
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.waker.wake();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
        // Send what busy-poll progress left for the next call (the ACK of
        // the last message received, typically), so the peer completes.
        let mut core = self.shared.lock();
        let now = self.shared.now();
        core.flush(now);
        if let Some(c) = core.capture.take() {
            let _ = c.finish();
        }
    }
}

/// An RDMA device: one engine on one UDP socket.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

/// What a sleeping thread waits for, so progress wakes it only when it
/// may be ready.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// A completion on some CQ of the device.
    Completion,
    /// Anything received (memory an incoming WRITE changes).
    Progress,
}

/// Waits until `ready`, looked at under the device lock, gives a value
/// (`Some`), or `timeout` passes (`None`). In busy-poll mode each look
/// first drives the network and the lock is let go between looks;
/// otherwise the thread sleeps on the signal progress gives (after each
/// receive for [`Until::Progress`], after one that made a completion for
/// [`Until::Completion`]; at most 50 ms at a time), never holding the
/// lock meanwhile.
fn wait_for<T>(
    sh: &Shared,
    until: Until,
    timeout: StdDuration,
    mut ready: impl FnMut(&mut Core) -> Result<Option<T>>,
) -> Result<Option<T>> {
    let deadline = std::time::Instant::now() + timeout;
    let mut core = sh.lock();
    loop {
        if sh.busy_poll {
            let now = sh.now();
            core.progress_deferred(now)?;
        }
        if let Some(v) = ready(&mut core)? {
            return Ok(Some(v));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        if sh.busy_poll {
            drop(core);
            std::thread::yield_now();
            core = sh.lock();
        } else {
            fn count(c: &mut Core, until: Until) -> &mut usize {
                match until {
                    Until::Completion => &mut c.cq_waiters,
                    Until::Progress => &mut c.progress_waiters,
                }
            }
            *count(&mut core, until) += 1;
            core = sh
                .cq_cond
                .wait_timeout(core, left.min(StdDuration::from_millis(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            *count(&mut core, until) -= 1;
        }
    }
}

/// The seed of a device's QPNs, keys and PSNs: 256 bits from the OS
/// (`getrandom(2)`), or an error. There is no fallback: a weak seed would
/// make every QPN and rkey predictable to a peer (ReDMArk's key guessing).
fn os_seed() -> Result<[u8; 32]> {
    seed_from(|b| getrandom::fill(b).map_err(|e| e.to_string()))
}

fn seed_from(fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), String>) -> Result<[u8; 32]> {
    let mut b = [0u8; 32];
    fill(&mut b).map_err(Error::Randomness)?;
    Ok(b)
}

impl Device {
    /// Binds the socket and starts the driver thread.
    pub fn open(cfg: DeviceConfig) -> Result<Device> {
        if cfg.bind.ip().is_unspecified() {
            return Err(Error::Config("bind to a specific address: it is the device's GID".into()));
        }
        if cfg.dscp > 63 {
            return Err(Error::Config(format!("DSCP {} is not a 6-bit value", cfg.dscp)));
        }
        let mut io = UdpIo::bind(cfg.bind)?;
        if !cfg.gso {
            io.disable_gso();
        }
        let local = io.local_addr();
        let mut ecfg = EngineConfig::new(vec![local.ip()]);
        ecfg.fixed_src_port = Some(local.port());
        ecfg.ecn = cfg.ecn;
        ecfg.mr_addressing = cfg.mr_addressing;
        ecfg.cc = cfg.cc.clone();
        ecfg.line_rate_bps = cfg.line_rate_bps;
        // The driver thread wakes at a deadline through a timerfd, but a
        // busy machine schedules it a little late.
        ecfg.pacing_slack = roce_proto::Duration::from_micros(200);
        ecfg.cnp = cfg.cnp;
        ecfg.pin_peer_port = cfg.pin_peer_port;
        let engine = match cfg.seed {
            Some(s) => Engine::new(ecfg, s),
            None => Engine::with_key_seed(ecfg, os_seed()?),
        };
        let mut core = Core::new(engine, io);
        if let Some(path) = &cfg.pcap {
            let capture = Capture::create(path, local)
                .map_err(|e| Error::Config(format!("pcap {}: {e}", path.display())))?;
            core.capture = Some(capture);
        }
        let poll = mio::Poll::new()?;
        let fd = core.fd();
        if !cfg.busy_poll {
            poll.registry().register(
                &mut mio::unix::SourceFd(&fd),
                driver::SOCKET,
                mio::Interest::READABLE,
            )?;
        }
        let waker = mio::Waker::new(poll.registry(), driver::WAKER)?;
        core.socket_watched = !cfg.busy_poll;
        let registry = poll.registry().try_clone()?;
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            cq_cond: Condvar::new(),
            waker,
            stop: AtomicBool::new(false),
            driver_deadline: AtomicU64::new(u64::MAX),
            tx_failed: AtomicBool::new(false),
            origin: std::time::Instant::now(),
            busy_poll: cfg.busy_poll,
            local,
            driving_until: AtomicU64::new(0),
            registry,
        });
        let s2 = shared.clone();
        let thread =
            std::thread::Builder::new().name("roce-driver".into()).spawn(move || driver::run(s2, poll))?;
        Ok(Device {
            inner: Arc::new(DeviceInner { shared, thread: Mutex::new(Some(thread)), dscp: cfg.dscp }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The bound address (the IP is the GID).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared().local
    }

    pub fn gid(&self) -> IpAddr {
        self.shared().local.ip()
    }

    /// Whether UDP GSO and GRO are in use.
    pub fn offloads(&self) -> (bool, bool) {
        let s = self.driver_stats();
        (s.gso, s.gro)
    }

    /// How this device checks the ICRC of what it receives.
    pub fn rx_icrc_check(&self) -> RxIcrcCheck {
        if self.gid().is_ipv4() {
            RxIcrcCheck::Ipv4IdInferred
        } else {
            RxIcrcCheck::Full
        }
    }

    /// Receives what is waiting, runs due timers and sends: what a
    /// busy-polling application calls in its loop (the driver thread does it
    /// otherwise). Returns true if anything arrived or a timer ran.
    pub fn progress(&self) -> Result<bool> {
        let sh = self.shared();
        let mut core = sh.lock();
        let now = sh.now();
        let a = if sh.busy_poll { core.progress_deferred(now)? } else { core.progress(now)? };
        if a {
            let wake = core.completion_waiters();
            drop(core);
            wake.fire(&sh.cq_cond);
        }
        Ok(a)
    }

    /// A snapshot of the engine's counters.
    pub fn counters(&self) -> Counters {
        self.shared().lock().engine.counters().clone()
    }

    /// The congestion-control state of a QP (its paced rate, DCQCN's
    /// target and alpha, its rate cuts), once it has sent under `cc`.
    pub fn qp_rate(&self, qpn: u32) -> Option<QpRateState> {
        self.shared().lock().engine.qp_rate(qpn)
    }

    /// What the driver counted of its socket: datagrams dropped or
    /// refused, offloads in use.
    pub fn driver_stats(&self) -> DriverStats {
        self.shared().lock().stats()
    }

    /// The first datagram the kernel refused to send, if any (say, "Message
    /// too long" for a path MTU the route does not carry, or "Network is
    /// unreachable"). Cheap to call in a polling loop while none failed.
    /// The transport retries such datagrams until its retry count runs out,
    /// so this is usually the real reason behind a later `RetryExcErr`.
    pub fn send_error(&self) -> Option<SendError> {
        if !self.shared().tx_failed.load(Ordering::Acquire) {
            return None;
        }
        self.driver_stats().first_tx_error
    }

    /// The next asynchronous event, if any.
    pub fn poll_event(&self) -> Option<AsyncEvent> {
        self.shared().lock().engine.poll_event()
    }

    /// Wakes `waker` once an asynchronous event waits for `poll_event`:
    /// returns true (and keeps nothing) if one waits already, otherwise
    /// keeps the waker, which the driver wakes after the progress that
    /// raises one. Checked and kept under the device lock, so no event
    /// slips in between. A C library's event file descriptor rests on it.
    pub fn arm_event_waker(&self, waker: &std::task::Waker) -> bool {
        let mut core = self.shared().lock();
        if core.engine.has_event() {
            return true;
        }
        if !core.event_wakers.iter().any(|w| w.will_wake(waker)) {
            core.event_wakers.push(waker.clone());
        }
        false
    }

    /// A random initial PSN from the engine's CSPRNG.
    pub fn random_psn(&self) -> Psn {
        self.shared().lock().engine.random_psn()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Engine) -> std::result::Result<T, VerbsError>) -> Result<T> {
        let sh = self.shared();
        let mut core = sh.lock();
        let r = f(&mut core.engine);
        // A verb can complete work at once (modify to ERR flushes the queues).
        let wake = core.completion_waiters();
        drop(core);
        wake.fire(&sh.cq_cond);
        Ok(r?)
    }

    pub fn alloc_pd(&self) -> Result<Pd> {
        let id = self.with(|e| Ok(e.alloc_pd()))?;
        Ok(Pd { inner: Arc::new(PdInner { dev: self.clone(), id }) })
    }

    pub fn create_cq(&self, depth: usize) -> Result<Cq> {
        let id = self.with(|e| e.create_cq(depth))?;
        Ok(Cq { inner: Arc::new(CqInner { dev: self.clone(), id }) })
    }
}

struct PdInner {
    dev: Device,
    id: PdId,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let _ = self.dev.with(|e| e.dealloc_pd(self.id));
    }
}

/// A protection domain.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

/// A registered memory region. The memory stays alive as long as the region
/// (and as long as the application keeps its own `Arc<MemBuf>`).
///
/// [`Mr::read`], [`Mr::write`] and [`Mr::fill`] reach the memory safely at
/// any time. The verbs contract still says when its bytes mean something:
/// memory that an outstanding work request is sending may change under it
/// only after the completion, and memory a peer may be writing holds the
/// message only once the completion (or the peer's own signal) says so.
pub struct Mr {
    pd: Pd,
    keys: MrKeys,
    buf: Arc<MemBuf>,
}

impl Pd {
    fn dev(&self) -> &Device {
        &self.inner.dev
    }

    /// Registers all of `buf` with the given access rights (`ibv_reg_mr`);
    /// the I/O virtual address is the buffer's address.
    pub fn reg_mr(&self, buf: Arc<MemBuf>, access: Access) -> Result<Mr> {
        let len = buf.len();
        self.reg_mr_range(buf, 0, len, None, access)
    }

    /// Registers `[offset, offset+length)` of `buf`, optionally at a chosen
    /// I/O virtual address.
    pub fn reg_mr_range(
        &self,
        buf: Arc<MemBuf>,
        offset: usize,
        length: usize,
        iova: Option<u64>,
        access: Access,
    ) -> Result<Mr> {
        let spec = MrSpec { buf: buf.clone(), offset, length, iova, access };
        let keys = self.dev().with(|e| e.reg_mr(self.inner.id, spec))?;
        Ok(Mr { pd: self.clone(), keys, buf })
    }

    /// Creates a QP (`ibv_create_qp`). It draws its first send PSN now
    /// (`Qp::endpoint` tells it to the peer, `Qp::connect` uses it).
    pub fn create_qp(&self, b: QpBuilder<'_>) -> Result<Qp> {
        let init = QpInitAttr {
            qp_type: b.qp_type,
            pd: self.inner.id,
            send_cq: b.send_cq.inner.id,
            recv_cq: b.recv_cq.inner.id,
            srq: b.srq.map(|s| s.inner.id),
            cap: b.cap,
            sq_sig_all: b.sq_sig_all,
        };
        let (qpn, psn) = self.dev().with(|e| Ok((e.create_qp(init)?, e.random_psn())))?;
        Ok(Qp {
            pd: self.clone(),
            send_cq: b.send_cq.clone(),
            recv_cq: b.recv_cq.clone(),
            srq: b.srq.cloned(),
            qpn,
            qp_type: b.qp_type,
            psn,
        })
    }

    /// Creates a shared receive queue (`ibv_create_srq`): `max_wr` receive
    /// WRs of up to `max_sge` SGEs, for any number of QPs of this PD.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let id = self.dev().with(|e| e.create_srq(self.inner.id, max_wr, max_sge))?;
        Ok(Srq { inner: Arc::new(SrqInner { pd: self.clone(), id }) })
    }

    /// An address handle for UD sends (`ibv_create_ah`): checked against
    /// the device's GID table now (the source GID exists and is of the
    /// destination's IP family), so a send through it cannot be refused
    /// for its address.
    pub fn create_ah(&self, av: AddressVector) -> Result<Ah> {
        self.dev().with(|e| e.check_av(&av))?;
        Ok(Ah { _pd: self.clone(), av })
    }
}

struct SrqInner {
    pd: Pd,
    id: SrqId,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let _ = self.pd.dev().with(|e| e.destroy_srq(self.id));
    }
}

/// A shared receive queue. QPs created with it (`QpBuilder::srq`) keep it
/// alive.
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl Srq {
    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.inner.pd.dev().with(|e| e.post_srq_recv(self.inner.id, wr))
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`):
    /// `AsyncEvent::SrqLimitReached` once fewer than `limit` WRs are left.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.inner.pd.dev().with(|e| e.arm_srq_limit(self.inner.id, limit))
    }

    /// The engine's identifier (what `AsyncEvent::SrqLimitReached` names).
    pub fn id(&self) -> SrqId {
        self.inner.id
    }
}

/// An address handle: where UD sends go (`struct ibv_ah`), checked when
/// made.
#[derive(Clone)]
pub struct Ah {
    _pd: Pd,
    av: AddressVector,
}

impl Ah {
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// The destination of a UD send (`wr.ud` of `ibv_send_wr`): this
    /// address, the remote QP and its Q_Key.
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest { av: self.av, remote_qpn, remote_qkey }
    }
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        self.keys.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.keys.rkey
    }
    pub fn addr(&self) -> u64 {
        self.keys.addr
    }
    pub fn len(&self) -> usize {
        self.keys.length as usize
    }
    pub fn is_empty(&self) -> bool {
        self.keys.length == 0
    }
    /// The registered buffer. Holding it is harmless; touching its bytes
    /// directly takes `unsafe` and the verbs contract (see [`MemBuf`]):
    /// [`Mr::read`] and [`Mr::write`] are the safe way.
    pub fn buf(&self) -> &Arc<MemBuf> {
        &self.buf
    }

    /// Copies bytes `[offset, offset + dst.len())` of the region (offsets
    /// into the region) into `dst`.
    ///
    /// Sound whatever the NIC is doing: it takes the device's lock, and the
    /// NIC touches registered memory only under that lock. The engine, which
    /// does every copy and atomic of the NIC (receives, incoming WRITEs and
    /// atomics, READ responses, gathering what it sends), lives in the
    /// driver's `Core` inside the device's mutex; the driver thread and the
    /// application's threads (posting, polling, busy-poll progress) reach
    /// it only through that mutex, and the socket moves datagrams through
    /// the driver's own buffers, never registered memory. The buffer cannot
    /// be registered with another device meanwhile (see
    /// [`VerbsError::BufferOnOtherDevice`]).
    ///
    /// What it reads may be part of a message still arriving; the
    /// completion says when a message is all there.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let mut core = self.pd.dev().shared().lock();
        Ok(core.engine.mr_read(self.keys.lkey, offset, dst)?)
    }

    /// Waits until byte `offset` of the region equals `want` (perftest's
    /// latency loops watch the last byte of an incoming RDMA WRITE this
    /// way): true once it does, false if `timeout` passes first.
    ///
    /// Without busy-poll it sleeps between looks and is woken by the
    /// driver thread after each receive, so it never holds the device's
    /// lock while the driver needs it. A loop of [`Mr::read`] would take
    /// the lock back-to-back and, with fewer cores than busy threads, can
    /// keep the driver thread from the packet it is waiting for for tens of
    /// milliseconds. With busy-poll it drives the network itself.
    pub fn wait_byte(&self, offset: usize, want: u8, timeout: StdDuration) -> Result<bool> {
        let mut b = [0u8];
        let seen = wait_for(self.pd.dev().shared(), Until::Progress, timeout, |core| {
            core.engine.mr_read(self.keys.lkey, offset, &mut b)?;
            Ok((b[0] == want).then_some(()))
        })?;
        Ok(seen.is_some())
    }

    /// Copies `src` into the region at `offset`; sound for the reasons
    /// given at [`Mr::read`]. Bytes that an outstanding work request sends
    /// may go out before or after the change.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        let mut core = self.pd.dev().shared().lock();
        Ok(core.engine.mr_write(self.keys.lkey, offset, src)?)
    }

    /// Sets bytes `[offset, offset + n)` of the region to `byte`; see
    /// [`Mr::write`].
    pub fn fill(&self, offset: usize, n: usize, byte: u8) -> Result<()> {
        let mut core = self.pd.dev().shared().lock();
        Ok(core.engine.mr_fill(self.keys.lkey, offset, n, byte)?)
    }
    /// A scatter/gather element for `[offset, offset+len)` of the region.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge { addr: self.keys.addr + offset, length: len, lkey: self.keys.lkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let _ = self.pd.dev().with(|e| e.dereg_mr(self.keys.lkey));
    }
}

struct CqInner {
    dev: Device,
    id: CqId,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let _ = self.dev.with(|e| e.destroy_cq(self.id));
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

/// An empty completion, for sizing `poll` buffers (`Wc::EMPTY`).
pub const WC_ZERO: Wc = Wc::EMPTY;

impl Cq {
    /// The engine's identifier (what `AsyncEvent::CqErr` names).
    pub fn id(&self) -> CqId {
        self.inner.id
    }

    /// The device the CQ belongs to.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Takes the completions that are ready (`ibv_poll_cq`). In busy-poll
    /// mode this also drives the network.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let sh = &self.inner.dev.inner.shared;
        let mut core = sh.lock();
        if sh.busy_poll {
            let now = sh.now();
            core.progress_deferred(now)?;
        }
        Ok(core.engine.poll_cq(self.inner.id, out)?)
    }

    /// Waits until at least one completion is ready or `timeout` passes.
    pub fn wait(&self, out: &mut [Wc], timeout: StdDuration) -> Result<usize> {
        let got = wait_for(&self.inner.dev.inner.shared, Until::Completion, timeout, |core| {
            let n = core.engine.poll_cq(self.inner.id, out)?;
            Ok((n > 0).then_some(n))
        })?;
        got.ok_or(Error::Timeout("no completion"))
    }
}

impl Cq {
    /// Takes the completions that are ready; if there are none, makes
    /// progress from this thread and takes what that produced.
    ///
    /// For C programs that spin on an empty CQ. While the QPs `senders`
    /// have at least `busy` send WRs outstanding between them (a pipeline:
    /// a bandwidth test), this thread drives the network for a short lease
    /// and the driver thread stands off the socket (see `Shared::drive`):
    /// the spinning thread does the receiving and sending the driver thread
    /// would do, so on a small machine the two neither take turns on one
    /// core nor wake each other for each batch of ACKs. With fewer
    /// outstanding (a latency test, which may next spin on memory rather
    /// than on the CQ) the lease ends and this thread only receives once.
    /// Threads waiting on the device (`Cq::wait`, `Mr::wait_byte`) are
    /// woken for what the progress produced, as the driver thread would.
    pub fn poll_or_drive(&self, out: &mut [Wc], senders: &[u32], busy: usize) -> Result<usize> {
        let sh = &self.inner.dev.inner.shared;
        let mut core = sh.lock();
        let n = core.engine.poll_cq(self.inner.id, out)?;
        if n > 0 {
            return Ok(n);
        }
        let pipeline = senders.iter().map(|&q| core.engine.sq_outstanding(q)).sum::<usize>() >= busy.max(1);
        let activity = if pipeline {
            sh.drive(&mut core)?
        } else {
            sh.stop_driving(&mut core)?;
            let now = sh.now();
            if sh.busy_poll {
                core.progress_deferred(now)?
            } else {
                core.progress(now)?
            }
        };
        sh.note_tx_failure(&core);
        if !activity {
            return Ok(0);
        }
        let n = core.engine.poll_cq(self.inner.id, out)?;
        let wake = core.completion_waiters();
        drop(core);
        wake.fire(&sh.cq_cond);
        Ok(n)
    }

    /// Wakes `waker` once the CQ holds a completion, consuming none:
    /// returns true (and keeps nothing) if it holds one already, otherwise
    /// keeps the waker, which is woken after the next progress that may
    /// have produced completions (the woken party checks again: the wake
    /// is for the device, not this CQ). Checked and kept under the device
    /// lock, so no completion slips in between: what a completion channel
    /// (`ibv_req_notify_cq`) rests on.
    pub fn arm_waker(&self, waker: &std::task::Waker) -> bool {
        let sh = &self.inner.dev.inner.shared;
        let mut core = sh.lock();
        if core.engine.cq_len(self.inner.id) > 0 {
            return true;
        }
        if !core.cq_wakers.iter().any(|w| w.will_wake(waker)) {
            core.cq_wakers.push(waker.clone());
        }
        false
    }

    /// Waits, without blocking a thread, until at least one completion is
    /// ready, and takes up to `out.len()` of them: the `async` flavour of
    /// `wait` (an `ibv_get_cq_event` on a completion channel, then
    /// `ibv_poll_cq`). The future works on any executor (tokio, smol,
    /// ...): the driver thread wakes it after progress that may have
    /// produced completions, as do verbs that complete work at once (a
    /// modify to ERR flushes). In busy-poll mode it drives the network
    /// itself each time it is polled and asks to be polled again, so the
    /// task spins through its executor. Bound it with the runtime's timeout
    /// if the peer may go quiet; dropping it cancels nothing.
    pub fn wait_async<'a>(&'a self, out: &'a mut [Wc]) -> WaitCompletions<'a> {
        WaitCompletions { cq: self, out }
    }
}

/// The future of `Cq::wait_async`.
#[must_use = "futures do nothing unless awaited"]
pub struct WaitCompletions<'a> {
    cq: &'a Cq,
    out: &'a mut [Wc],
}

impl std::future::Future for WaitCompletions<'_> {
    type Output = Result<usize>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<usize>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.out.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let sh = &this.cq.inner.dev.inner.shared;
        let mut core = sh.lock();
        if sh.busy_poll {
            let now = sh.now();
            if let Err(e) = core.progress_deferred(now) {
                return Poll::Ready(Err(e.into()));
            }
        }
        match core.engine.poll_cq(this.cq.inner.id, this.out) {
            Err(e) => Poll::Ready(Err(e.into())),
            Ok(n) if n > 0 => Poll::Ready(Ok(n)),
            Ok(_) => {
                if sh.busy_poll {
                    cx.waker().wake_by_ref();
                } else if !core.cq_wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    // Registered under the lock that completions are made
                    // under, so none can slip in between the poll and this.
                    core.cq_wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// QP creation parameters.
pub struct QpBuilder<'a> {
    qp_type: QpType,
    send_cq: &'a Cq,
    recv_cq: &'a Cq,
    srq: Option<&'a Srq>,
    cap: QpCap,
    sq_sig_all: bool,
}

impl<'a> QpBuilder<'a> {
    pub fn new(qp_type: QpType, send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpBuilder { qp_type, send_cq, recv_cq, srq: None, cap: QpCap::default(), sq_sig_all: false }
    }
    /// Receives come from this shared receive queue (the QP's own receive
    /// queue is not used).
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }
    pub fn rc(cq: &'a Cq) -> Self {
        Self::new(QpType::Rc, cq, cq)
    }
    pub fn ud(cq: &'a Cq) -> Self {
        Self::new(QpType::Ud, cq, cq)
    }
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.cap.max_send_wr = n;
        self
    }
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.cap.max_recv_wr = n;
        self
    }
    pub fn max_sge(mut self, send: u32, recv: u32) -> Self {
        self.cap.max_send_sge = send;
        self.cap.max_recv_sge = recv;
        self
    }
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.cap.max_inline_data = n;
        self
    }
    pub fn sq_sig_all(mut self, on: bool) -> Self {
        self.sq_sig_all = on;
        self
    }
}

/// What a peer needs to know to connect to a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub gid: IpAddr,
    /// UDP port of the peer device (4791 unless it bound another).
    pub port: u16,
    pub qpn: u32,
    pub psn: Psn,
}

/// Transport parameters for `Qp::connect` (RC: INIT -> RTR -> RTS).
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    pub mtu: PathMtu,
    pub access: Access,
    /// Local ACK timeout code (4.096 us x 2^timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    /// DSCP of this QP's packets; `None` uses the device's.
    pub dscp: Option<u8>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: PathMtu::Mtu4096,
            access: Access::ALL,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            dscp: None,
        }
    }
}

/// A queue pair.
pub struct Qp {
    pd: Pd,
    send_cq: Cq,
    recv_cq: Cq,
    srq: Option<Srq>,
    qpn: u32,
    qp_type: QpType,
    /// The first send PSN, drawn at creation.
    psn: Psn,
}

impl Qp {
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The transport service (`qp->qp_type`).
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    pub fn send_cq(&self) -> &Cq {
        &self.send_cq
    }
    pub fn recv_cq(&self) -> &Cq {
        &self.recv_cq
    }

    fn dev(&self) -> &Device {
        self.pd.dev()
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        self.dev().with(|e| e.modify_qp(self.qpn, attr, mask))
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        self.dev().with(|e| e.query_qp(self.qpn))
    }

    pub fn state(&self) -> Result<QpState> {
        Ok(self.query()?.qp_state)
    }

    /// The shared receive queue the QP takes its receives from, if any.
    pub fn srq(&self) -> Option<&Srq> {
        self.srq.as_ref()
    }

    /// What the peer needs to connect to this QP: GID, UDP port, QPN and
    /// the first PSN this QP sends (drawn once, at creation, from the
    /// engine's CSPRNG).
    pub fn endpoint(&self) -> Endpoint {
        Endpoint { gid: self.dev().gid(), port: self.dev().local_addr().port(), qpn: self.qpn, psn: self.psn }
    }

    /// Protects the QP's packets with these keys (AES-128-GCM, see
    /// `roce::crypto` for agreeing on them). Call before `connect`; the
    /// peer's QP must be given the mirrored keys.
    pub fn protect(&self, keys: &QpKeys) -> Result<()> {
        self.dev().with(|e| e.set_qp_keys(self.qpn, keys))
    }

    /// RC/UC: moves the QP RESET -> INIT -> RTR -> RTS towards `remote`
    /// (the peer's `endpoint()`), sending from this QP's own first PSN (the
    /// one `endpoint()` told the peer). UD QPs are not connected: see
    /// `ready_ud`.
    pub fn connect(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        let local_psn = self.psn;
        let dscp = opts.dscp.unwrap_or(self.dev().inner.dscp);
        let av = AddressVector {
            dgid: remote.gid,
            sgid_index: 0,
            traffic_class: dscp << 2,
            hop_limit: 64,
            flow_label: 0,
            udp_port: Some(remote.port),
        };
        let c = ConnectAttr {
            access: opts.access,
            mtu: opts.mtu,
            max_dest_rd_atomic: opts.max_dest_rd_atomic,
            min_rnr_timer: opts.min_rnr_timer,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            max_rd_atomic: opts.max_rd_atomic,
            ..ConnectAttr::new(av, remote.qpn, remote.psn, local_psn)
        };
        self.dev().with(|e| e.connect_qp(self.qpn, &c))
    }

    /// UD: RESET -> INIT -> RTR -> RTS with the given Q_Key, sending from
    /// this QP's first PSN.
    pub fn ready_ud(&self, qkey: u32) -> Result<()> {
        let psn = self.psn;
        self.dev().with(|e| e.ready_ud(self.qpn, qkey, psn))
    }

    /// `ibv_post_send`; the packets leave from the calling thread.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        let sh = &self.dev().inner.shared;
        let mut core = sh.lock();
        core.engine.post_send(self.qpn, wr)?;
        sh.kick(core);
        Ok(())
    }

    /// Posts an inline send with its bytes (`Engine::post_send_inline`):
    /// for a C library, whose program's inline SGEs may name memory no
    /// region covers.
    pub fn post_send_inline(&self, wr: SendWr, data: &[u8]) -> Result<()> {
        let sh = &self.dev().inner.shared;
        let mut core = sh.lock();
        core.engine.post_send_inline(self.qpn, wr, data)?;
        sh.kick(core);
        Ok(())
    }

    /// Posts several send WRs under one lock and one flush.
    pub fn post_send_batch(&self, wrs: impl IntoIterator<Item = SendWr>) -> Result<()> {
        let sh = &self.dev().inner.shared;
        let mut core = sh.lock();
        let mut r = Ok(());
        for wr in wrs {
            if let Err(e) = core.engine.post_send(self.qpn, wr) {
                r = Err(e.into());
                break;
            }
        }
        sh.kick(core);
        r
    }

    /// Posts send WRs in order under one lock and one flush, stopping at
    /// the first the engine refuses: `Err((i, e))` says the `i`-th (from 0)
    /// was refused and those before it were posted (`ibv_post_send`'s
    /// `bad_wr`).
    /// A WR may come with its inline bytes (`Engine::post_send_inline`).
    pub fn post_send_each(
        &self,
        wrs: impl IntoIterator<Item = (SendWr, Option<Vec<u8>>)>,
    ) -> std::result::Result<(), (usize, Error)> {
        let sh = &self.dev().inner.shared;
        let mut core = sh.lock();
        let mut r = Ok(());
        for (i, (wr, data)) in wrs.into_iter().enumerate() {
            let posted = match data {
                Some(d) => core.engine.post_send_inline(self.qpn, wr, &d),
                None => core.engine.post_send(self.qpn, wr),
            };
            if let Err(e) = posted {
                r = Err((i, e.into()));
                break;
            }
        }
        sh.kick(core);
        r
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.dev().with(|e| e.post_recv(self.qpn, wr))
    }

    /// Send WRs posted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.dev().shared().lock().engine.sq_outstanding(self.qpn)
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let _ = self.dev().with(|e| e.destroy_qp(self.qpn));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_randomness_from_the_os_is_an_error_not_a_weak_seed() {
        let e = seed_from(|_| Err("getrandom: ENOSYS".into())).unwrap_err();
        assert!(matches!(&e, Error::Randomness(m) if m.contains("ENOSYS")), "{e}");
        let a = os_seed().unwrap();
        let b = os_seed().unwrap();
        assert_ne!(a, b, "two draws from the OS gave the same 256 bits");
        assert_ne!(a, [0; 32]);
    }
}
