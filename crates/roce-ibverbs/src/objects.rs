//! What stands behind each C object: a `#[repr(C)]` wrapper whose first
//! field is the structure the program sees, so the program's pointer is
//! the wrapper's; the `roce` handle and the library's bookkeeping follow.
//! Safe code only: the conversions from the program's pointers are in
//! `ffi`.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Wake, Waker};

use crate::abi::*;
use crate::config::DeviceEntry;

/// Locks, ignoring poisoning: a panic caught at the boundary must not make
/// every later call fail.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[repr(C)]
pub struct DeviceObj {
    pub ibv: ibv_device,
    pub entry: DeviceEntry,
    pub index: usize,
}

/// An eventfd in semaphore mode with a queue beside it: each `push` adds
/// one to the counter, each successful read of the fd takes one, so the fd
/// polls readable exactly while the queue holds something.
pub struct EventQueue<T> {
    pub fd: OwnedFd,
    queue: Mutex<VecDeque<T>>,
}

impl<T> EventQueue<T> {
    pub fn new() -> std::io::Result<EventQueue<T>> {
        let fd = crate::sys::eventfd_semaphore()?;
        Ok(EventQueue { fd, queue: Mutex::new(VecDeque::new()) })
    }

    pub fn push(&self, item: T) {
        lock(&self.queue).push_back(item);
        let one = 1u64.to_ne_bytes();
        // An eventfd write of 1 fails only if the counter would overflow.
        let _ = crate::sys::write(self.fd.as_raw_fd(), &one);
    }

    /// After a read of the fd succeeded: the item it stood for.
    pub fn pop(&self) -> Option<T> {
        lock(&self.queue).pop_front()
    }
}

/// The async events of a context: the engine's, read by the driver's
/// event waker and queued with the library's objects' addresses resolved
/// when taken.
pub struct AsyncEvents {
    /// `None` once the context is closed: the driver keeps this (as a
    /// waker) inside the device, so holding the device here would keep it
    /// open for ever.
    pub dev: Mutex<Option<roce::Device>>,
    pub queue: EventQueue<roce::AsyncEvent>,
    /// QPN -> `ibv_qp` address, for events naming a QP.
    pub qps: Mutex<HashMap<u32, usize>>,
    /// CQ id -> `ibv_cq` address.
    pub cqs: Mutex<HashMap<u32, usize>>,
    /// SRQ id -> `ibv_srq` address.
    pub srqs: Mutex<HashMap<u32, usize>>,
}

impl AsyncEvents {
    /// Moves the engine's events into the queue, then asks the driver to
    /// wake this again at the next one.
    pub fn drain(self: &Arc<Self>) {
        let Some(dev) = lock(&self.dev).clone() else { return };
        let waker = Waker::from(self.clone());
        loop {
            while let Some(e) = dev.poll_event() {
                self.queue.push(e);
            }
            if !dev.arm_event_waker(&waker) {
                break;
            }
        }
    }
}

impl Wake for AsyncEvents {
    fn wake(self: Arc<Self>) {
        self.drain();
    }
}

#[repr(C)]
pub struct ContextObj {
    /// Must be first: programs find the `verbs_context` right before the
    /// `ibv_context` they hold (`verbs_get_ctx`).
    pub vctx: verbs_context,
    pub dev: roce::Device,
    pub device: *const DeviceObj,
    pub events: Arc<AsyncEvents>,
}

#[repr(C)]
pub struct PdObj {
    pub ibv: ibv_pd,
    pub pd: roce::Pd,
    /// MRs, QPs, SRQs and AHs made in it (`ibv_dealloc_pd` fails with
    /// EBUSY while there are any).
    pub users: AtomicUsize,
}

#[repr(C)]
pub struct MrObj {
    pub ibv: ibv_mr,
    pub mr: roce::Mr,
    pub pd: *const PdObj,
    pub region: crate::regions::Registration,
}

/// A completion channel.
pub struct Channel {
    pub events: EventQueue<usize>,
}

#[repr(C)]
pub struct ChannelObj {
    pub ibv: ibv_comp_channel,
    pub ch: Arc<Channel>,
    pub users: AtomicUsize,
}

/// Arming state of a CQ.
#[derive(Default)]
pub struct Arm {
    pub armed: bool,
    /// Destroyed: never queue an event for it again.
    pub dead: bool,
    /// Events handed out by `ibv_get_cq_event` and acknowledged.
    pub delivered: u64,
    pub acked: u64,
}

/// What a CQ's notification needs, shared with the waker the driver holds.
pub struct CqNotify {
    /// The CQ, for arming; `None` once destroyed (the driver may keep the
    /// waker, and with it this, until its next progress).
    pub armed_cq: Mutex<Option<roce::Cq>>,
    pub channel: Option<Arc<Channel>>,
    /// The `ibv_cq`'s address, the event's payload.
    pub ibv: AtomicUsize,
    pub arm: Mutex<Arm>,
    pub acked_cond: Condvar,
}

impl CqNotify {
    /// Armed and a completion waiting: queue the event and disarm;
    /// armed and none: have the driver call again after progress.
    pub fn poke(self: &Arc<Self>) {
        let mut arm = lock(&self.arm);
        if !arm.armed || arm.dead {
            return;
        }
        let Some(cq) = lock(&self.armed_cq).clone() else { return };
        let waker = Waker::from(self.clone());
        if cq.arm_waker(&waker) {
            arm.armed = false;
            if let Some(ch) = &self.channel {
                ch.events.push(self.ibv.load(Ordering::Acquire));
            }
        }
    }
}

impl Wake for CqNotify {
    fn wake(self: Arc<Self>) {
        self.poke();
    }
}

#[repr(C)]
pub struct CqObj {
    pub ibv: ibv_cq,
    pub cq: roce::Cq,
    pub notify: Arc<CqNotify>,
    pub channel: *const ChannelObj,
    /// QPs using it.
    pub users: AtomicUsize,
    /// The QPNs whose send queue completes here.
    pub senders: Mutex<Vec<u32>>,
}

#[repr(C)]
pub struct SrqObj {
    pub ibv: ibv_srq,
    pub srq: roce::Srq,
    pub pd: *const PdObj,
    pub max_wr: u32,
    pub max_sge: u32,
    pub limit: Mutex<u32>,
    pub users: AtomicUsize,
}

#[repr(C)]
pub struct QpObj {
    pub ibv: ibv_qp,
    pub qp: roce::Qp,
    pub cap: ibv_qp_cap,
    pub sq_sig_all: bool,
    pub pd: *const PdObj,
    pub send_cq: *const CqObj,
    pub recv_cq: *const CqObj,
    pub srq: *const SrqObj,
}

#[repr(C)]
pub struct AhObj {
    pub ibv: ibv_ah,
    pub ah: roce::Ah,
    pub pd: *const PdObj,
}
