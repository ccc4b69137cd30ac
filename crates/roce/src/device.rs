//! The verbs API: a device on a UDP socket and RAII handles for its objects
//! (the device here; its CQs, PDs, MRs and QPs in their own modules).
//!
//! Handles keep what they depend on alive (an MR its PD, a QP its PD and
//! CQs, all of them the device), so they can be dropped in any order and the
//! engine object is destroyed when the last handle goes.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use roce_proto::*;
use roce_wire::Psn;

use crate::capture::Capture;
use crate::config::{DeviceConfig, RxIcrcCheck};
use crate::driver::{self, Core, Shared};
use crate::driver::{DriverStats, SendError};
use crate::error::{Error, Result};
use crate::udp::{BufferRequest, UdpIo};

pub(crate) struct DeviceInner {
    pub(crate) shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pub(crate) dscp: u8,
}

impl Drop for DeviceInner {
    /// Stops the driver thread, sends what is left and finishes the pcap.
    ///
    /// The last handle may be dropped on the driver thread itself: a waker
    /// it fires (an `async` task's, a completion channel's) can own the
    /// last `Cq` or `Device`. A thread cannot join itself, so there the
    /// join is skipped: `stop` is set and the waker woken, so the thread
    /// leaves its loop as soon as this returns, and the teardown below
    /// runs on it, after the lock was let go (wakers are fired outside it).
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.waker.wake();
        let thread = self.thread.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        let mut core = self.shared.lock_any();
        // Send what busy-poll progress left for the next call (the ACK of
        // the last message received, typically), so the peer completes.
        // Not on a dead device: its engine panicked and is not to be run.
        if self.shared.dead.get().is_none() {
            let now = self.shared.now();
            core.flush(now);
        }
        if let Some(c) = core.capture.take() {
            let _ = c.finish();
        }
    }
}

/// An RDMA device: one engine on one UDP socket.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
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
            return Err(Error::Dscp(cfg.dscp));
        }
        let buffers =
            BufferRequest { recv: cfg.recv_buffer, send: cfg.send_buffer, force: cfg.force_buffers };
        let mut io = UdpIo::bind_with(cfg.bind, buffers)?;
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
        // READ responses solicited and not yet received stay within a
        // quarter of the receive buffer the kernel granted (it charges each
        // datagram up to twice its payload, and the socket also carries
        // requests and ACKs): a READ burst never overruns our own socket.
        ecfg.rx_budget_bytes = (io.buffers().recv_granted as u64 / 4).max(64 << 10);
        // SEND/WRITE bytes in flight unacknowledged, across all QPs, within
        // the same quarter: a burst from many QPs (an incast) into a peer
        // whose socket is as large as ours fits it, so no tail is lost to
        // wait for the ACK timeout. Our own buffer stands for the peer's:
        // a sender cannot see the peer's, and on one host they are alike.
        ecfg.tx_budget_bytes = Some(ecfg.rx_budget_bytes);
        // A READ's missing tail is asked for again after 20 ms at the least:
        // a busy host (or a peer in an emulated VM) stalls a response stream
        // for several milliseconds without losing it, and a re-request then
        // only costs the peer a duplicate; 20 ms is still a third of the
        // ACK timeout most programs set (14: 67 ms).
        ecfg.read_tail_floor = roce_proto::Duration::from_millis(20);
        // The RDMA CM's path MTU from the link the device's address is on,
        // as the kernel's: 1024 on a 1500-byte Ethernet (what rxe takes),
        // 4096 on the loopback or a jumbo-frame link.
        if let Some(mtu) = crate::netif::link_mtu(local.ip()).and_then(roce_proto::PathMtu::for_link_mtu) {
            ecfg.cm_path_mtu = mtu;
        }
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
            dead: OnceLock::new(),
            verbs_waiting: AtomicU32::new(0),
        });
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name("roce-driver".into())
            .spawn(move || crate::thread::run(s2, poll))?;
        Ok(Device {
            inner: Arc::new(DeviceInner { shared, thread: Mutex::new(Some(thread)), dscp: cfg.dscp }),
        })
    }

    /// Runs `f` on the driver's core under the lock (an engine panic kills
    /// the device), then sends what it queued and routes the CM events it
    /// raised: the body of every `cm_*` call.
    pub(crate) fn cm_call<T>(
        &self,
        f: impl FnOnce(&mut Core, Instant) -> std::result::Result<T, Error>,
    ) -> Result<T> {
        let sh = self.shared();
        let now = sh.now();
        let (r, core) = sh.guarded(sh.lock()?, |core| f(core, now))?;
        sh.kick(core);
        r
    }

    pub(crate) fn shared(&self) -> &Shared {
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
        let mut core = sh.lock()?;
        let now = sh.now();
        let a = if sh.busy_poll { core.progress_deferred(now)? } else { core.progress(now)? };
        if a {
            let wake = core.completion_waiters();
            drop(core);
            wake.fire(&sh.cq_cond);
        }
        Ok(a)
    }

    /// A snapshot of the engine's counters (a dead device's too: what it
    /// counted until it died).
    pub fn counters(&self) -> Counters {
        self.shared().lock_any().engine.counters().clone()
    }

    /// Why the device is dead, if it is: its engine panicked, and every
    /// verb now fails with [`Error::DeviceDead`].
    pub fn dead(&self) -> Option<String> {
        self.shared().dead.get().cloned()
    }

    /// Tests only: makes the driver thread panic at its next turn with
    /// `message`, as a bug in the engine would, to test what a dead device
    /// does. Nothing else calls it.
    #[doc(hidden)]
    pub fn inject_driver_panic(&self, message: &str) {
        self.shared().lock_any().inject_panic = Some(message.to_string());
        let _ = self.shared().waker.wake();
    }

    /// The congestion-control state of a QP (its paced rate, DCQCN's
    /// target and alpha, its rate cuts), once it has sent under `cc`.
    pub fn qp_rate(&self, qpn: u32) -> Option<QpRateState> {
        self.shared().lock_any().engine.qp_rate(qpn)
    }

    /// What the driver counted of its socket: datagrams dropped or
    /// refused, receive errors, the timer it sleeps on, offloads in use
    /// (a dead device's too).
    pub fn driver_stats(&self) -> DriverStats {
        self.shared().lock_any().stats()
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

    /// The next asynchronous event, if any (none on a dead device: see
    /// [`Device::dead`]).
    pub fn poll_event(&self) -> Option<AsyncEvent> {
        self.shared().lock().ok()?.engine.poll_event()
    }

    /// Wakes `waker` once an asynchronous event waits for `poll_event`:
    /// returns true (and keeps nothing) if one waits already, otherwise
    /// keeps the waker, which the driver wakes after the progress that
    /// raises one. Checked and kept under the device lock, so no event
    /// slips in between. A C library's event file descriptor rests on it.
    /// On a dead device it returns true: there is news (see
    /// [`Device::dead`]), and no event will ever come to wake a sleeper.
    pub fn arm_event_waker(&self, waker: &std::task::Waker) -> bool {
        let Ok(mut core) = self.shared().lock() else { return true };
        if core.engine.has_event() {
            return true;
        }
        if !core.event_wakers.iter().any(|w| w.will_wake(waker)) {
            core.event_wakers.push(waker.clone());
        }
        false
    }

    /// The port's active MTU: the RoCE MTU of the link the device's
    /// address is on (`PathMtu::for_link_mtu` of the interface's MTU, as
    /// rxe reports its netdev's; 1024 when the interface cannot be told).
    /// The RDMA CM proposes it, and `ibv_query_port` reports it.
    pub fn active_mtu(&self) -> PathMtu {
        self.shared().lock_any().engine.config().cm_path_mtu
    }

    /// A random initial PSN from the engine's CSPRNG.
    pub fn random_psn(&self) -> Psn {
        self.shared().lock_any().engine.random_psn()
    }

    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut Engine) -> std::result::Result<T, VerbsError>,
    ) -> Result<T> {
        let sh = self.shared();
        let (r, mut core) = sh.guarded(sh.lock()?, |core| f(&mut core.engine))?;
        // A verb can complete work at once (modify to ERR flushes the queues).
        let wake = core.completion_waiters();
        drop(core);
        wake.fire(&sh.cq_cond);
        Ok(r?)
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
