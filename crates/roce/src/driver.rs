//! The driver: runs one engine on one UDP socket.
//!
//! Whoever holds the core lock can make progress: receive what is waiting,
//! run due timers, send what the engine has. The application's threads do so
//! right after posting work (so a send leaves without a thread hand-off); a
//! driver thread does so when packets arrive or timers fall due, sleeping in
//! `epoll` (through mio) otherwise, or spinning in busy-poll mode.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration as StdDuration;

use roce_proto::{CqId, DatagramMeta, Engine, Hole, Instant};
use roce_wire::icrc::{Ipv4IdCache, ICRC_LEN};

use crate::capture::{Capture, IpFields};
use crate::error::Error;
pub use crate::stats::{DriverStats, SendError};
use crate::udp::{RxMeta, TxMsg, TxPiece, UdpIo, BATCH, RX_BUF};

mod transmit;
use transmit::Slot;

/// Bytes reserved per transmit slot: one GSO batch of equal-size packets.
const SLOT: usize = 65536;
/// Segments per GSO send (the kernel's UDP_MAX_SEGMENTS is 64 or 128).
const MAX_SEGS: usize = 64;
/// `sendmmsg` calls that find the socket buffer full before the batch's
/// remaining datagrams are given up (the transport retransmits them).
const FULL_SPINS: u32 = 10_000;

/// Everything behind the lock.
pub(crate) struct Core {
    pub engine: Engine,
    io: UdpIo,
    rx_bufs: Vec<Vec<u8>>,
    rx_meta: Vec<RxMeta>,
    tx: Vec<u8>,
    pub capture: Option<Capture>,
    stats: DriverStats,
    /// How ICRCs move with the IPv4 ID, by datagram length (GSO segments).
    ipv4_ids: Ipv4IdCache,
    /// Threads sleeping in `Cq::wait`, each on a condition variable of
    /// its own, with the CQ it waits for. Notifying costs a futex syscall
    /// and a woken thread a context switch, so progress notifies only the
    /// sleepers whose CQ now holds a completion: a stream of ACKs for
    /// unsignaled WRITEs wakes nobody, and a completion on one QP's CQ
    /// does not wake the threads of every other (a target's connection
    /// threads, a collective's ranks).
    pub cq_sleepers: Vec<(CqId, Arc<Condvar>)>,
    /// Threads sleeping on `Shared::cq_cond` for any progress (a byte
    /// that an incoming WRITE may change: `Mr::wait_byte`).
    pub progress_waiters: usize,
    /// `engine.completions_made()` when waiters were last looked at.
    completions_seen: u64,
    /// Tasks waiting in `Cq::wait_async`, woken after the next progress
    /// that may have produced completions.
    pub cq_wakers: Vec<std::task::Waker>,
    /// Wakers waiting for an asynchronous event (`Device::arm_event_waker`),
    /// woken after progress that left one in the engine.
    pub event_wakers: Vec<std::task::Waker>,
    /// Whether the last receive call found anything (busy-poll sizing).
    rx_hot: bool,
    /// The transmit slots of a flush, kept between flushes.
    slots: Vec<Slot>,
    /// The payload the slots of a flush leave in registered memory (`at`
    /// counted from the start of `tx`), sent from there; emptied once
    /// sent.
    holes: Vec<Hole>,
    /// Whether the driver thread's poll watches the socket (not in
    /// busy-poll mode, nor while an application thread drives).
    pub socket_watched: bool,
    /// Tests only (`Device::inject_driver_panic`): the driver thread panics
    /// with this message at its next turn, as an engine bug would.
    pub inject_panic: Option<String>,
    /// Bytes each connected QP's peer can have in flight towards us (its
    /// send window), by QPN.
    qp_in_flight: std::collections::HashMap<u32, u64>,
    /// The sum of `qp_in_flight`, kept with it: each QP's connect asks
    /// it, and a sum over every QP made connecting N QPs O(N^2).
    qp_in_flight_total: u64,
    /// The longest RDMA READ posted so far, bytes.
    largest_read: u64,
    /// Which event channel each CM identifier reports to.
    pub cm_router: crate::cm_events::Router,
}

pub(crate) struct Shared {
    pub core: Mutex<Core>,
    /// Signalled after progress that may have produced completions.
    pub cq_cond: Condvar,
    pub waker: mio::Waker,
    pub stop: AtomicBool,
    /// The engine time the driver thread sleeps until (u64::MAX: none).
    pub driver_deadline: AtomicU64,
    /// Set when the kernel refuses a datagram: lets waiting applications
    /// notice without taking the lock.
    pub tx_failed: AtomicBool,
    pub origin: std::time::Instant,
    pub busy_poll: bool,
    pub local: SocketAddr,
    /// Engine time (ns) until which an application thread drives the
    /// network itself ([`Shared::drive`]); 0 or past: the driver thread does.
    pub driving_until: AtomicU64,
    /// The driver's registry, through which a driving application thread
    /// takes the socket from the driver thread's watch and gives it back.
    pub registry: mio::Registry,
    /// Why the device is dead, once it is: the engine panicked (on the
    /// driver thread or under a verb), so its state can no longer be
    /// trusted. Set once; from then on every verb fails with
    /// [`Error::DeviceDead`] and every waiter is woken to fail.
    pub dead: OnceLock<String>,
    /// Application threads waiting for the lock in [`Shared::lock`]: the
    /// driver thread lets them in before its next turn
    /// ([`Shared::lock_for_turn`]).
    pub verbs_waiting: AtomicU32,
}

/// How long an application thread's [`Shared::drive`] keeps the driver
/// thread off the socket: the longest a datagram can wait unreceived
/// once that thread stops calling, and how often the driver thread looks
/// in while it calls.
pub(crate) const DRIVE_LEASE: StdDuration = StdDuration::from_micros(200);

/// The longest the driver thread yields to application threads waiting
/// for the lock before its next turn.
pub(crate) const HANDOFF_WAIT: StdDuration = StdDuration::from_micros(200);

pub(crate) const WAKER: mio::Token = mio::Token(1);
/// In busy-poll mode the driver thread runs due timers at least this often.
pub(crate) const BUSY_POLL_TICK: StdDuration = StdDuration::from_millis(1);
pub(crate) const SOCKET: mio::Token = mio::Token(0);
pub(crate) const TIMER: mio::Token = mio::Token(2);

impl Shared {
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }

    /// The core, for a verb: [`Error::DeviceDead`] once the engine has
    /// panicked. A lock poisoned by a panic under it (on an application
    /// thread, in a verb that does not catch it) kills the device too.
    pub fn lock(&self) -> Result<MutexGuard<'_, Core>, Error> {
        self.verbs_waiting.fetch_add(1, Ordering::AcqRel);
        let core = self.core.lock();
        self.verbs_waiting.fetch_sub(1, Ordering::AcqRel);
        self.checked(core)
    }

    /// The core for the driver thread's next turn. Under load its socket
    /// is always readable, so it would take the lock again the moment it
    /// let it go, before a thread woken to post or poll could run: on a
    /// device with thousands of QPs a pass of posts then waited seconds.
    /// So it first lets the waiting application threads take the lock
    /// (yielding its core for at most [`HANDOFF_WAIT`]).
    pub fn lock_for_turn(&self) -> Result<MutexGuard<'_, Core>, Error> {
        let since = std::time::Instant::now();
        while self.verbs_waiting.load(Ordering::Acquire) > 0 && since.elapsed() < HANDOFF_WAIT {
            std::thread::yield_now();
        }
        self.checked(self.core.lock())
    }

    fn checked<'a>(
        &'a self,
        core: std::sync::LockResult<MutexGuard<'a, Core>>,
    ) -> Result<MutexGuard<'a, Core>, Error> {
        match core {
            Ok(core) if self.dead.get().is_none() => Ok(core),
            Ok(_) => Err(self.dead_error()),
            Err(poisoned) => {
                let why = "the engine panicked on an application thread (that thread's panic says where)";
                self.die(poisoned.into_inner(), why.into());
                Err(self.dead_error())
            }
        }
    }

    /// The core whatever became of the device: for what reads what is
    /// there (counters, statistics) and for teardown.
    pub fn lock_any(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error every verb of a dead device returns.
    pub fn dead_error(&self) -> Error {
        Error::DeviceDead(self.dead.get().cloned().unwrap_or_else(|| "the engine panicked".into()))
    }

    /// Kills the device (the first reason given stays): marks it dead under
    /// the lock, so no verb that takes the lock after this succeeds, then
    /// wakes everyone who waits on it (threads in `Cq::wait` and
    /// `Mr::wait_byte`, `async` tasks, the driver thread) so that they fail
    /// at once rather than sleep until their timeout.
    pub fn die(&self, mut core: MutexGuard<'_, Core>, why: String) {
        let _ = self.dead.set(why);
        let mut wakers = std::mem::take(&mut core.cq_wakers);
        wakers.append(&mut core.event_wakers);
        let sleepers = core.cq_sleepers.iter().map(|(_, cv)| cv.clone()).collect();
        drop(core);
        let _ = self.waker.wake();
        Wake { notify: true, wakers, sleepers }.fire(&self.cq_cond);
    }

    /// Runs `f` on the core and catches an engine panic in it: the device
    /// dies with the panic's message and the caller gets
    /// [`Error::DeviceDead`] instead of the panic.
    pub fn guarded<'a, T>(
        &'a self,
        mut core: MutexGuard<'a, Core>,
        f: impl FnOnce(&mut Core) -> T,
    ) -> Result<(T, MutexGuard<'a, Core>), Error> {
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(&mut core))) {
            Ok(v) => Ok((v, core)),
            Err(payload) => {
                let why = format!("the engine panicked in a verb: {}", panic_message(payload.as_ref()));
                self.die(core, why);
                Err(self.dead_error())
            }
        }
    }

    /// After work was posted under the lock: send it, wake the driver
    /// thread if the engine now wants a timer earlier than it sleeps until,
    /// release the lock, and wake completion waiters (a post can complete
    /// at once: a QP in ERR flushes it).
    pub fn kick(&self, mut core: MutexGuard<'_, Core>) {
        let now = self.now();
        core.flush(now);
        self.note_tx_failure(&core);
        // In busy-poll mode the application's own progress calls run the
        // timers, and the driver thread looks in at least every millisecond;
        // waking it on every post would cost a syscall and a context switch
        // on the latency path.
        if !self.busy_poll
            && core
                .engine
                .poll_timeout()
                .is_some_and(|t| t.as_nanos() < self.driver_deadline.load(Ordering::Acquire))
        {
            let _ = self.waker.wake();
        }
        let wake = core.completion_waiters();
        drop(core);
        wake.fire(&self.cq_cond);
    }

    /// Progress from an application thread that waits on a pipeline of
    /// its own work (spinning on a CQ while sends are outstanding): it
    /// receives, runs due timers and sends under the lock it holds, and
    /// for [`DRIVE_LEASE`] after each call the driver thread stops
    /// watching the socket. A thread that would otherwise sleep until the
    /// driver thread brought its completion does that work itself, without
    /// the driver's wake-up per datagram batch, its context switch and the
    /// two threads' contention for the lock; once the calls stop, the
    /// driver thread takes the socket back within the lease.
    pub fn drive(&self, core: &mut Core) -> io::Result<bool> {
        let now = self.now();
        if self.busy_poll {
            return core.progress_deferred(now);
        }
        let until = now.as_nanos().saturating_add(DRIVE_LEASE.as_nanos() as u64);
        self.driving_until.store(until, Ordering::Release);
        if core.socket_watched {
            self.registry.deregister(&mut mio::unix::SourceFd(&core.fd()))?;
            core.socket_watched = false;
            core.stats.drive_takeovers += 1;
            // It may sleep with no deadline: it must look in at the
            // lease's end to take the socket back.
            let _ = self.waker.wake();
        }
        core.progress(now)
    }

    /// Ends an application thread's [`Shared::drive`] lease at once: the
    /// driver thread watches the socket again (a datagram already waiting
    /// wakes it).
    pub fn stop_driving(&self, core: &mut Core) -> io::Result<()> {
        self.driving_until.store(0, Ordering::Release);
        self.watch_socket(core)
    }

    /// Puts the socket back under the driver thread's watch if a drive
    /// lease took it.
    pub(crate) fn watch_socket(&self, core: &mut Core) -> io::Result<()> {
        if !core.socket_watched && !self.busy_poll {
            self.registry.register(&mut mio::unix::SourceFd(&core.fd()), SOCKET, mio::Interest::READABLE)?;
            core.socket_watched = true;
        }
        Ok(())
    }

    /// Publishes a send failure to `tx_failed`.
    pub fn note_tx_failure(&self, core: &Core) {
        if core.stats.tx_errors > 0 {
            self.tx_failed.store(true, Ordering::Release);
        }
    }
}

/// The message a panic carried (`panic!` with a literal or a format).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// The waiters a change under the device lock concerns, to be woken after
/// the lock is released. Sound for the condition variable: a waiter checks
/// its condition under the lock before it sleeps, so it either saw the
/// change or is asleep when the notification comes.
#[must_use]
#[derive(Default)]
pub(crate) struct Wake {
    /// Threads waiting for any progress (`Shared::cq_cond`).
    notify: bool,
    wakers: Vec<std::task::Waker>,
    /// The `Cq::wait` sleepers whose CQ holds a completion.
    sleepers: Vec<Arc<Condvar>>,
}

impl Wake {
    pub fn fire(self, cond: &Condvar) {
        if self.notify {
            cond.notify_all();
        }
        for s in &self.sleepers {
            s.notify_all();
        }
        self.wakers.into_iter().for_each(std::task::Waker::wake);
    }
}

impl Core {
    pub fn new(engine: Engine, io: UdpIo) -> Core {
        let stats = DriverStats {
            gso: io.gso(),
            gro: io.gro(),
            socket_buffers: io.buffers(),
            ..DriverStats::default()
        };
        Core {
            engine,
            io,
            rx_bufs: vec![vec![0u8; RX_BUF]; BATCH],
            rx_meta: vec![RxMeta::default(); BATCH],
            tx: vec![0u8; SLOT * BATCH],
            capture: None,
            stats,
            ipv4_ids: Ipv4IdCache::default(),
            cq_sleepers: Vec::new(),
            progress_waiters: 0,
            completions_seen: 0,
            cq_wakers: Vec::new(),
            event_wakers: Vec::new(),
            rx_hot: false,
            slots: Vec::with_capacity(BATCH),
            holes: Vec::new(),
            socket_watched: false,
            inject_panic: None,
            qp_in_flight: std::collections::HashMap::new(),
            qp_in_flight_total: 0,
            largest_read: 0,
            cm_router: Default::default(),
        }
    }

    /// Notes what QP `qpn` can have in flight towards this socket once
    /// connected: a peer's send window, `window` packets (its
    /// `max_unacked_psns`, taken to be this engine's) of up to `mtu` bytes
    /// of payload plus headers. `None` forgets the QP (destroyed, or not
    /// connected). Then looks at the receive buffer again.
    pub fn note_qp(&mut self, qpn: u32, mtu_window: Option<(usize, u32)>) {
        match mtu_window {
            Some((mtu, window)) => {
                // BTH + RETH + ICRC, the most a request packet adds to its payload.
                let per_packet = (mtu + 12 + 16 + 4) as u64;
                let bytes = per_packet * u64::from(window);
                let old = self.qp_in_flight.insert(qpn, bytes).unwrap_or(0);
                self.qp_in_flight_total = self.qp_in_flight_total - old + bytes;
            }
            None => {
                self.qp_in_flight_total -= self.qp_in_flight.remove(&qpn).unwrap_or(0);
            }
        }
        self.check_socket_buffer();
    }

    /// Notes an RDMA READ of `len` bytes posted: its responses arrive in
    /// one unpaced burst.
    pub fn note_read(&mut self, len: u64) {
        if len > self.largest_read {
            self.largest_read = len;
            self.check_socket_buffer();
        }
    }

    /// Warns, once per device, when what its QPs can have in flight
    /// towards it outgrows the room in its socket's receive buffer (see
    /// [`SocketBuffers::recv_room`]): the kernel drops the rest of such a
    /// burst, silently, and the transport recovers it only by
    /// retransmission (a tail loss only at the ACK timeout). The warning
    /// is kept in `DriverStats::socket_buffer_warning` and printed to
    /// stderr, as the library's other warnings are.
    fn check_socket_buffer(&mut self) {
        let need = self.qp_in_flight_total + self.largest_read;
        self.stats.rx_in_flight_max = need;
        let b = self.stats.socket_buffers;
        if self.stats.socket_buffer_warning.is_some() || need <= b.recv_room() as u64 {
            return;
        }
        let capped = !b.recv_forced && b.recv_granted < 2 * b.recv_requested;
        let (why, advice) = if capped {
            (
                "net.core.rmem_max caps it, and SO_RCVBUFFORCE needs CAP_NET_ADMIN",
                "raise net.core.rmem_max or run with CAP_NET_ADMIN",
            )
        } else if b.recv_forced {
            ("forced with SO_RCVBUFFORCE", "ask for a larger DeviceConfig::recv_buffer")
        } else {
            ("not capped", "ask for a larger DeviceConfig::recv_buffer")
        };
        let w = format!(
            "device {}: its socket's receive buffer has room for {} bytes (the kernel granted {} bytes, its \
             bookkeeping included, for {} asked: {why}), but its QPs can have {need} bytes in flight towards it ({} \
             connected QP(s), largest RDMA READ {} bytes): the kernel drops the rest of such a burst \
             (counted in rx_dropped_socket_full) and the transport recovers it only by retransmission: \
             {advice}",
            self.io.local_addr(),
            b.recv_room(),
            b.recv_granted,
            b.recv_requested,
            self.qp_in_flight.len(),
            self.largest_read,
        );
        eprintln!("roce: warning: {w}");
        self.stats.socket_buffer_warning = Some(w);
    }

    /// After work that may have produced completions: who to wake, the
    /// threads sleeping in `Cq::wait` (and the like) and the wakers of
    /// `Cq::wait_async` futures, for the caller to wake once it has
    /// released the lock ([`Wake::fire`]). A thread woken while the lock is
    /// still held would only block on it again.
    pub fn completion_waiters(&mut self) -> Wake {
        // CM events go to their channels here: every path that makes
        // progress passes by.
        while let Some(ev) = self.engine.poll_cm_event() {
            self.cm_router.deliver(ev);
        }
        let made = self.engine.completions_made();
        let fresh = made != self.completions_seen;
        self.completions_seen = made;
        let mut wakers = if fresh { std::mem::take(&mut self.cq_wakers) } else { Vec::new() };
        if !self.event_wakers.is_empty() && self.engine.has_event() {
            wakers.append(&mut self.event_wakers);
        }
        let sleepers = if fresh {
            self.cq_sleepers
                .iter()
                .filter(|(cq, _)| self.engine.cq_len(*cq) > 0)
                .map(|(_, cv)| cv.clone())
                .collect()
        } else {
            Vec::new()
        };
        Wake { notify: self.progress_waiters > 0, wakers, sleepers }
    }

    pub fn fd(&self) -> RawFd {
        self.io.raw_fd()
    }

    pub fn stats(&mut self) -> DriverStats {
        DriverStats { gso: self.io.gso(), rx_dropped: self.io.drops_now(), ..self.stats.clone() }
    }

    /// Receives all waiting datagrams, runs due timers, sends. Returns true
    /// if anything arrived or a timer ran.
    pub fn progress(&mut self, now: Instant) -> io::Result<bool> {
        let activity = self.receive(now, false)?;
        self.flush(now);
        Ok(activity)
    }

    /// Busy-poll progress from an application thread: first send what
    /// earlier calls left (their ACKs and responses), then receive and run
    /// timers, and leave what that produced for the next call or post. The
    /// application sees incoming data one `sendmmsg` earlier, and a reply it
    /// posts leaves in the same batch as the ACK.
    pub fn progress_deferred(&mut self, now: Instant) -> io::Result<bool> {
        self.flush(now);
        self.receive(now, true)
    }

    /// Receives and handles waiting datagrams, then runs due timers.
    ///
    /// `busy`: called from a busy-poll loop. There an idle socket is polled
    /// for one datagram (a cheaper `recvmmsg`), and the datagram that ends
    /// the idle spell goes to the engine and back to the application at
    /// once, without a second call to find the socket empty; once traffic
    /// flows, full batches are taken. Otherwise (the driver thread, woken
    /// by readiness) full batches are taken until the socket is drained.
    fn receive(&mut self, now: Instant, busy: bool) -> io::Result<bool> {
        let mut activity = false;
        let local = self.io.local_addr();
        let want = if busy && !self.rx_hot { 1 } else { BATCH };
        loop {
            let n = match self.io.recv(&mut self.rx_bufs[..want], &mut self.rx_meta[..want]) {
                Ok(n) => n,
                Err(e) => {
                    self.record_rx_error(&e);
                    return Err(e);
                }
            };
            for i in 0..n {
                let m = self.rx_meta[i];
                // A UDP socket does not show the IPv4 Identification: the
                // engine infers it from the ICRC.
                let meta = DatagramMeta {
                    src: m.src.ip(),
                    dst: m.dst_ip.unwrap_or(local.ip()),
                    src_port: m.src.port(),
                    dst_port: local.port(),
                    ecn: m.tos & 3,
                    ipv4_id: None,
                };
                let stride = m.stride.max(1);
                for chunk in self.rx_bufs[i][..m.len].chunks(stride) {
                    let check = self.engine.handle_datagram(now, &meta, chunk);
                    if let Some(c) = &mut self.capture {
                        let ip = IpFields { tos: m.tos, ttl: m.ttl, flow_label: m.flow_label };
                        c.received(now, &meta, ip, check, chunk);
                    }
                }
            }
            activity |= n > 0;
            self.rx_hot = n > 0;
            if n < want || busy && want < BATCH {
                break;
            }
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
            activity = true;
        }
        Ok(activity)
    }

    /// Counts a failed receive call and keeps the first such error.
    fn record_rx_error(&mut self, e: &io::Error) {
        self.stats.rx_errors += 1;
        if self.stats.first_rx_error.is_none() {
            self.stats.first_rx_error = Some(e.to_string());
        }
    }

    /// Counts a timerfd failure (the driver thread then falls back to
    /// `epoll`'s millisecond timeouts) and keeps the first reason.
    pub fn record_timer_failure(&mut self, what: &str, e: &io::Error) {
        self.stats.timerfd_failures += 1;
        if self.stats.timer_fallback.is_none() {
            self.stats.timer_fallback = Some(format!("{what}: {e}"));
        }
    }

    fn record_error(&mut self, e: &io::Error, dst: SocketAddr, len: usize, datagrams: usize) {
        self.stats.tx_errors += datagrams as u64;
        if self.stats.first_tx_error.is_none() {
            self.stats.first_tx_error = Some(SendError {
                dst,
                len,
                kind: e.kind(),
                os_error: e.raw_os_error(),
                message: e.to_string(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use roce_proto::*;
    use roce_wire::Psn;

    use super::*;

    /// A device-less driver core on loopback with one RC QP connected to
    /// `peer` (a plain socket that collects what is sent), and an MR.
    fn core_towards(peer: SocketAddr) -> (Core, u32, MrKeys) {
        let io = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut cfg = EngineConfig::new(vec![io.local_addr().ip()]);
        cfg.fixed_src_port = Some(io.local_addr().port());
        let mut e = Engine::new(cfg, 7);
        let pd = e.alloc_pd();
        let cq = e.create_cq(16).unwrap();
        let cap =
            QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
        };
        let qpn = e.create_qp(init).unwrap();
        let av = AddressVector { udp_port: Some(peer.port()), ..AddressVector::new(peer.ip()) };
        e.connect_qp(qpn, &ConnectAttr::new(av, 0x42, Psn::new(1), Psn::new(100))).unwrap();
        let spec =
            MrSpec { buf: MemBuf::new(1 << 16), offset: 0, length: 1 << 16, iova: None, access: Access::ALL };
        let keys = e.reg_mr(pd, spec).unwrap();
        (Core::new(e, io), qpn, keys)
    }

    /// A collecting socket and a core with a QP towards it, where the
    /// kernel has UDP GSO (`None`, with a notice, where it has not).
    fn gso_pair() -> Option<(UdpIo, Core, u32, MrKeys)> {
        let sink = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let (core, qpn, keys) = core_towards(sink.local_addr());
        if !core.io.gso() {
            eprintln!("no UDP GSO on this kernel: nothing to test");
            return None;
        }
        Some((sink, core, qpn, keys))
    }

    /// Everything `sink` receives, split into datagrams, within a second.
    fn drain(sink: &mut UdpIo, want: usize) -> Vec<Vec<u8>> {
        let mut bufs = vec![vec![0u8; RX_BUF]; 4];
        let mut metas = [RxMeta::default(); 4];
        let mut out = Vec::new();
        let t = std::time::Instant::now();
        while out.len() < want && t.elapsed() < StdDuration::from_secs(1) {
            let n = sink.recv(&mut bufs, &mut metas).unwrap();
            for i in 0..n {
                out.extend(bufs[i][..metas[i].len].chunks(metas[i].stride.max(1)).map(<[u8]>::to_vec));
            }
            std::thread::yield_now();
        }
        out
    }

    /// The IPv4 ID for which `dgram`'s ICRC is right, sent from `core`.
    fn icrc_id(core: &Core, sink: &UdpIo, dgram: &[u8]) -> Option<u16> {
        let meta = |id| DatagramMeta {
            src: core.io.local_addr().ip(),
            dst: sink.local_addr().ip(),
            src_port: core.io.local_addr().port(),
            dst_port: sink.local_addr().port(),
            ecn: 0,
            ipv4_id: Some(id),
        };
        let (body, crc) = dgram.split_at(dgram.len() - ICRC_LEN);
        let crc = u32::from_le_bytes(crc.try_into().unwrap());
        (0..64).find(|&id| roce_proto::engine::datagram_icrc(&meta(id), body) == Some(crc))
    }

    /// The bytes `write_8k` sends.
    fn pattern_8k() -> Vec<u8> {
        (0..8192u32).map(|i| (i * 13 + i / 256) as u8).collect()
    }

    fn write_8k(core: &mut Core, qpn: u32, keys: MrKeys) {
        core.engine.mr_write(keys.lkey, 0, &pattern_8k()).unwrap();
        let sge = Sge { addr: keys.addr, length: 8192, lkey: keys.lkey };
        let wr = SendWr::new(1, SendOp::Write { remote_addr: 0x1000, rkey: 9 }, vec![sge]);
        core.engine.post_send(qpn, wr).unwrap();
        core.flush(Instant::from_nanos(1));
    }

    /// Eight 1 KiB packets leave in GSO sends where the kernel has GSO (the
    /// first, longer by its RETH, and the second form one; the other six
    /// another); segment k of a send carries IPv4 ID k, and its ICRC is the
    /// one for ID k.
    #[test]
    fn gso_segments_carry_the_icrc_of_their_id() {
        let Some((mut sink, mut core, qpn, keys)) = gso_pair() else { return };
        write_8k(&mut core, qpn, keys);
        let got = drain(&mut sink, 8);
        let ids: Vec<_> = got.iter().map(|d| icrc_id(&core, &sink, d)).collect();
        assert_eq!(ids, [0, 1, 0, 1, 2, 3, 4, 5].map(Some));
        // the payload, sent from the region (iovecs), is the region's
        let payload: Vec<u8> = got
            .iter()
            .enumerate()
            .flat_map(|(i, d)| d[if i == 0 { 28 } else { 12 }..d.len() - 4].to_vec())
            .collect();
        assert_eq!(payload, pattern_8k());
        assert_eq!(core.stats().tx_errors, 0);
    }

    /// A kernel that refuses GSO (EIO: the route's device cannot checksum)
    /// gets the datagrams one by one, each with the ICRC for ID 0, and the
    /// driver says so; nothing is lost or counted as an error.
    #[test]
    fn a_refused_gso_send_goes_out_datagram_by_datagram() {
        let Some((mut sink, mut core, qpn, keys)) = gso_pair() else { return };
        core.io.fail_gso = Some(libc::EIO);
        write_8k(&mut core, qpn, keys);
        let got = drain(&mut sink, 8);
        assert_eq!(got.len(), 8);
        assert!(got.iter().all(|d| icrc_id(&core, &sink, d) == Some(0)));
        assert_eq!(got[1][12..got[1].len() - 4], pattern_8k()[1024..2048]);
        let s = core.stats();
        assert!(!s.gso && s.gso_refused.as_deref().is_some_and(|w| w.contains("os error 5")), "{s:?}");
        assert_eq!((s.tx_errors, s.tx_dropped), (0, 0));
    }

    /// Any other refusal is counted and kept, with where the datagram went
    /// (here a GSO run refused with EMSGSIZE: a path MTU the route does not
    /// carry); it is not retried one by one.
    #[test]
    fn other_send_errors_are_kept() {
        let Some((mut sink, mut core, qpn, keys)) = gso_pair() else { return };
        core.io.fail_gso = Some(libc::EMSGSIZE);
        write_8k(&mut core, qpn, keys);
        assert!(drain(&mut sink, 1).is_empty());
        let s = core.stats();
        assert_eq!(s.tx_errors, 8, "{s:?}");
        let e = s.first_tx_error.clone().expect("kept");
        assert_eq!((e.dst, e.os_error), (sink.local_addr(), Some(libc::EMSGSIZE)));
        assert!(e.to_string().contains("Message too long"), "{e}");
        assert!(s.gso && s.gso_refused.is_none(), "{s:?}");
    }

    /// A receive call the kernel fails is counted and its error kept, as
    /// send errors are; the next call receives again.
    #[test]
    fn receive_errors_are_counted() {
        let (mut core, _, _) = core_towards("127.0.0.1:9".parse().unwrap());
        core.io.fail_recv = Some(libc::ENOMEM);
        assert!(core.progress(Instant::from_nanos(1)).is_err());
        assert!(!core.progress(Instant::from_nanos(2)).unwrap());
        let s = core.stats();
        assert_eq!(s.rx_errors, 1, "{s:?}");
        assert!(s.first_rx_error.as_deref().is_some_and(|e| e.contains("os error 12")), "{s:?}");
        assert_eq!(s.tx_errors, 0);
    }

    /// A timerfd that cannot be made or armed is counted, with the first
    /// reason kept, for `--counters` to show the millisecond fallback.
    #[test]
    fn timerfd_failures_are_counted() {
        let (mut core, _, _) = core_towards("127.0.0.1:9".parse().unwrap());
        assert_eq!((core.stats().timerfd_failures, core.stats().timer_fallback), (0, None));
        core.record_timer_failure("arming the timerfd", &io::Error::from_raw_os_error(libc::EINVAL));
        core.record_timer_failure("arming the timerfd", &io::Error::from_raw_os_error(libc::EBADF));
        let s = core.stats();
        assert_eq!(s.timerfd_failures, 2);
        let why = s.timer_fallback.expect("kept");
        assert!(why.starts_with("arming the timerfd: ") && why.contains("os error 22"), "{why}");
    }

    /// What the QPs can have in flight towards the device follows each
    /// QP's connect, change and end (kept as a running sum), and the
    /// largest READ adds to it.
    #[test]
    fn the_bytes_in_flight_follow_each_qp() {
        let (mut core, _, _) = core_towards("127.0.0.1:9".parse().unwrap());
        let in_flight = |c: &mut Core| c.stats().rx_in_flight_max;
        let window = |mtu: u64, w: u64| (mtu + 32) * w;
        core.note_qp(1, Some((4096, 16)));
        core.note_qp(2, Some((1024, 8)));
        assert_eq!(in_flight(&mut core), window(4096, 16) + window(1024, 8));
        core.note_qp(1, Some((1024, 4)));
        assert_eq!(in_flight(&mut core), window(1024, 4) + window(1024, 8));
        core.note_qp(2, None);
        core.note_qp(2, None);
        core.note_qp(3, None);
        assert_eq!(in_flight(&mut core), window(1024, 4));
        core.note_read(1 << 20);
        assert_eq!(in_flight(&mut core), window(1024, 4) + (1 << 20));
        core.note_qp(1, None);
        assert_eq!(in_flight(&mut core), 1 << 20);
    }
}
