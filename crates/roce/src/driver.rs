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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration as StdDuration;

use roce_proto::{DatagramMeta, Engine, Instant};
use roce_wire::pcap::PcapWriter;

use crate::udp::{RxMeta, TxMsg, UdpIo, BATCH, RX_BUF};

/// Bytes reserved per transmit slot: one GSO batch of equal-size packets.
const SLOT: usize = 65536;
/// Largest RoCE datagram the engine produces (4096 payload + headers).
const MAX_PKT: usize = 4096 + 128;
/// Segments per GSO send (the kernel's UDP_MAX_SEGMENTS is 64 or 128).
const MAX_SEGS: usize = 64;

/// Everything behind the lock.
pub(crate) struct Core {
    pub engine: Engine,
    io: UdpIo,
    rx_bufs: Vec<Vec<u8>>,
    rx_meta: Vec<RxMeta>,
    tx: Vec<u8>,
    pub capture: Option<Capture>,
    /// Datagrams the kernel would not take after retrying (socket buffer full).
    pub tx_dropped: u64,
    /// Threads sleeping on `Shared::cq_cond`. Notifying costs a futex
    /// syscall even with nobody waiting, so progress notifies only when
    /// this is non-zero.
    pub cq_waiters: usize,
    /// Tasks waiting in `Cq::wait_async`, woken after the next progress
    /// that may have produced completions.
    pub cq_wakers: Vec<std::task::Waker>,
    /// Whether the last receive call found anything (busy-poll sizing).
    rx_hot: bool,
}

/// Frames written to a pcap file, as Ethernet/IP/UDP around each datagram.
pub(crate) struct Capture {
    pub writer: PcapWriter<std::io::BufWriter<std::fs::File>>,
    pub origin_wall: std::time::SystemTime,
}

pub(crate) struct Shared {
    pub core: Mutex<Core>,
    /// Signalled after progress that may have produced completions.
    pub cq_cond: Condvar,
    pub waker: mio::Waker,
    pub stop: AtomicBool,
    /// The engine time the driver thread sleeps until (u64::MAX: none).
    pub driver_deadline: AtomicU64,
    pub origin: std::time::Instant,
    pub busy_poll: bool,
    pub local: SocketAddr,
}

pub(crate) const WAKER: mio::Token = mio::Token(1);
/// In busy-poll mode the driver thread runs due timers at least this often.
const BUSY_POLL_TICK: StdDuration = StdDuration::from_millis(1);
pub(crate) const SOCKET: mio::Token = mio::Token(0);

impl Shared {
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }

    pub fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After work was posted under the lock: send it, wake the driver
    /// thread if the engine now wants a timer earlier than it sleeps until,
    /// release the lock, and wake completion waiters (a post can complete
    /// at once: a QP in ERR flushes it).
    pub fn kick(&self, mut core: MutexGuard<'_, Core>) {
        let now = self.now();
        let _ = core.flush(now);
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
        let wakers = core.completion_waiters(&self.cq_cond);
        drop(core);
        wakers.into_iter().for_each(std::task::Waker::wake);
    }
}

impl Core {
    pub fn new(engine: Engine, io: UdpIo) -> Core {
        Core {
            engine,
            io,
            rx_bufs: vec![vec![0u8; RX_BUF]; BATCH],
            rx_meta: vec![
                RxMeta {
                    src: SocketAddr::from(([0, 0, 0, 0], 0)),
                    dst_ip: None,
                    tos: 0,
                    len: 0,
                    stride: 0
                };
                BATCH
            ],
            tx: vec![0u8; SLOT * BATCH],
            capture: None,
            tx_dropped: 0,
            cq_waiters: 0,
            cq_wakers: Vec::new(),
            rx_hot: false,
        }
    }

    /// After work that may have produced completions: wakes the threads
    /// sleeping in `Cq::wait`, and hands back the wakers of `Cq::wait_async`
    /// futures, for the caller to wake once it has released the lock.
    pub fn completion_waiters(&mut self, cond: &Condvar) -> Vec<std::task::Waker> {
        if self.cq_waiters > 0 {
            cond.notify_all();
        }
        std::mem::take(&mut self.cq_wakers)
    }

    pub fn fd(&self) -> RawFd {
        self.io.raw_fd()
    }

    /// Whether the kernel offers UDP GSO and GRO on this socket.
    pub fn offloads(&self) -> (bool, bool) {
        (self.io.gso(), self.io.gro())
    }

    /// Receives all waiting datagrams, runs due timers, sends. Returns true
    /// if anything arrived or a timer ran.
    pub fn progress(&mut self, now: Instant) -> io::Result<bool> {
        let activity = self.receive(now, false)?;
        self.flush(now)?;
        Ok(activity)
    }

    /// Busy-poll progress from an application thread: first send what
    /// earlier calls left (their ACKs and responses), then receive and run
    /// timers, and leave what that produced for the next call or post. The
    /// application sees incoming data one `sendmmsg` earlier, and a reply it
    /// posts leaves in the same batch as the ACK.
    pub fn progress_deferred(&mut self, now: Instant) -> io::Result<bool> {
        self.flush(now)?;
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
            let n = self.io.recv(&mut self.rx_bufs[..want], &mut self.rx_meta[..want])?;
            for i in 0..n {
                let m = self.rx_meta[i];
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
                    if let Some(c) = &mut self.capture {
                        c.write(&meta, m.tos, chunk, now);
                    }
                    self.engine.handle_datagram(now, &meta, chunk);
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

    /// Sends everything the engine has, in batches: consecutive packets of
    /// equal size to the same destination with the same TOS share one GSO
    /// send where the kernel supports it (a shorter packet may end a batch).
    pub fn flush(&mut self, now: Instant) -> io::Result<()> {
        #[derive(Clone, Copy)]
        struct Slot {
            dst: SocketAddr,
            tos: u8,
            seg: usize,
            used: usize,
            open: bool,
        }
        if !self.engine.has_transmit() {
            return Ok(());
        }
        let gso = self.io.gso();
        let empty = Slot { dst: self.io.local_addr(), tos: 0, seg: 0, used: 0, open: false };
        loop {
            let mut slots = [empty; BATCH];
            let mut n = 0;
            let mut any = false;
            loop {
                // Try to append to the last slot only while a fresh slot is
                // left to move the packet to if it does not match.
                let join = n > 0 && n < BATCH && gso && {
                    let l = slots[n - 1];
                    l.open && l.used + MAX_PKT <= SLOT && l.used / l.seg < MAX_SEGS
                };
                if !join && n == BATCH {
                    break;
                }
                let at = if join { (n - 1) * SLOT + slots[n - 1].used } else { n * SLOT };
                let Some(tx) = self.engine.poll_transmit(now, &mut self.tx[at..at + MAX_PKT]) else { break };
                any = true;
                let dst = SocketAddr::new(tx.meta.dst, tx.meta.dst_port);
                let tos = tx.traffic_class;
                if let Some(c) = &mut self.capture {
                    c.write(&tx.meta, tos, &self.tx[at..at + tx.len], now);
                }
                if join {
                    let l = &mut slots[n - 1];
                    if l.dst == dst && l.tos == tos && tx.len <= l.seg {
                        l.used += tx.len;
                        l.open = tx.len == l.seg;
                        continue;
                    }
                    self.tx.copy_within(at..at + tx.len, n * SLOT);
                }
                slots[n] = Slot { dst, tos, seg: tx.len, used: tx.len, open: true };
                n += 1;
            }
            if !any {
                return Ok(());
            }
            let mut msgs = [TxMsg { dst: empty.dst, tos: 0, data: &[], segment: None }; BATCH];
            for (i, s) in slots[..n].iter().enumerate() {
                let segment = (s.used > s.seg).then_some(s.seg as u16);
                msgs[i] =
                    TxMsg { dst: s.dst, tos: s.tos, data: &self.tx[i * SLOT..i * SLOT + s.used], segment };
            }
            let mut sent = 0;
            let mut spins = 0;
            while sent < n {
                match self.io.send(&msgs[sent..n]) {
                    Ok(0) => {
                        // Socket buffer full: give the kernel a moment.
                        spins += 1;
                        if spins > 10_000 {
                            break;
                        }
                        std::thread::yield_now();
                    }
                    Ok(k) => sent += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // e.g. ECONNREFUSED from an earlier ICMP: the transport retries.
                    Err(_) => {
                        sent += 1;
                        self.tx_dropped += 1;
                    }
                }
            }
            self.tx_dropped += (n - sent) as u64;
            if n < BATCH {
                return Ok(());
            }
        }
    }
}

impl Capture {
    fn write(&mut self, meta: &DatagramMeta, tos: u8, datagram: &[u8], now: Instant) {
        let ts = self.origin_wall.duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
            + StdDuration::from_nanos(now.as_nanos());
        if let Some(frame) = crate::capture::frame(meta, tos, datagram) {
            let _ = self.writer.write(ts, &frame);
        }
    }
}

/// The driver thread: progress when the socket is readable or a timer is
/// due, sleeping in between. In busy-poll mode the application's threads
/// receive (they spin in `Cq::poll`/`Device::progress`), so this thread only
/// keeps the timers.
pub(crate) fn run(shared: std::sync::Arc<Shared>, mut poll: mio::Poll) {
    let mut events = mio::Events::with_capacity(8);
    while !shared.stop.load(Ordering::Acquire) {
        let mut wakers = Vec::new();
        let timeout = {
            let mut core = shared.lock();
            let now = shared.now();
            let activity = if shared.busy_poll {
                let due = core.engine.poll_timeout().is_some_and(|t| t <= now);
                if due {
                    core.engine.handle_timeout(now);
                }
                let _ = core.flush(now);
                due
            } else {
                core.progress(now).unwrap_or(false)
            };
            if activity {
                wakers = core.completion_waiters(&shared.cq_cond);
            }
            let next = core.engine.poll_timeout();
            shared.driver_deadline.store(next.map_or(u64::MAX, |t| t.as_nanos()), Ordering::Release);
            let wait = next.map(|t| StdDuration::from_nanos(t.as_nanos().saturating_sub(now.as_nanos())));
            if shared.busy_poll {
                Some(wait.map_or(BUSY_POLL_TICK, |w| w.min(BUSY_POLL_TICK)))
            } else {
                wait
            }
        };
        wakers.into_iter().for_each(std::task::Waker::wake);
        let _ = poll.poll(&mut events, timeout);
    }
}
