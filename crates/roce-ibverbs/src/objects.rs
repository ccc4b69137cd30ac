//! What stands behind each C object: a `#[repr(C)]` wrapper holding the
//! structure the program sees (a [`CPart`], which the program may write),
//! the `roce` handle and the library's bookkeeping. Wrappers refer to one
//! another by typed [`Handle`]s. Safe code only: the conversions from the
//! program's pointers are in `handle`, their uses in `ffi`.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Wake, Waker};

use crate::abi::*;
use crate::config::DeviceEntry;
use crate::handle::{c_object, CPart, Handle};

/// Locks, ignoring poisoning: a panic caught at the boundary must not make
/// every later call fail.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A configured device; lives for the whole process (never written once
/// made, so the program may read its `ibv_device` at any time).
#[repr(C)]
pub struct DeviceObj {
    pub ibv: ibv_device,
    pub entry: DeviceEntry,
    pub index: usize,
}

/// A queue with an eventfd that polls readable exactly while the queue
/// holds something, as the kernel's event files do: the counter is 1 while
/// the queue is non-empty and 0 otherwise, changed only under the queue's
/// lock (programs poll the fd, never read it; only `take` waits on it).
pub struct EventQueue<T> {
    pub fd: OwnedFd,
    queue: Mutex<VecDeque<T>>,
}

impl<T> EventQueue<T> {
    pub fn new() -> std::io::Result<EventQueue<T>> {
        let fd = crate::sys::eventfd()?;
        Ok(EventQueue { fd, queue: Mutex::new(VecDeque::new()) })
    }

    pub fn push(&self, item: T) {
        let mut q = lock(&self.queue);
        if q.is_empty() {
            // Fails only if the counter would overflow; it is 0 here.
            let _ = crate::sys::write(self.fd.as_raw_fd(), &1u64.to_ne_bytes());
        }
        q.push_back(item);
    }

    /// The first item, if any.
    pub fn pop(&self) -> Option<T> {
        let mut q = lock(&self.queue);
        let item = q.pop_front()?;
        if q.is_empty() {
            self.clear();
        }
        Some(item)
    }

    /// Keeps only the items `keep` accepts.
    pub fn retain(&self, keep: impl FnMut(&T) -> bool) {
        let mut q = lock(&self.queue);
        let had = !q.is_empty();
        q.retain(keep);
        if had && q.is_empty() {
            self.clear();
        }
    }

    /// The queue has just become empty (its lock held): the counter, 1,
    /// goes to 0; the read cannot block.
    fn clear(&self) {
        let _ = crate::sys::read_event(self.fd.as_raw_fd());
    }

    /// The first item, waiting for one unless the program made the fd
    /// non-blocking (then `EAGAIN`, as a read of an empty event file).
    pub fn take(&self) -> std::io::Result<T> {
        loop {
            if let Some(item) = self.pop() {
                return Ok(item);
            }
            let fd = self.fd.as_raw_fd();
            if crate::sys::is_nonblocking(fd)? {
                return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
            }
            crate::sys::wait_readable(fd)?;
        }
    }
}

/// The async events of one context, and the objects made in it (by the
/// engine's numbers), so that each event goes to the context whose object
/// it names and is resolved to that object when taken.
pub struct AsyncEvents {
    pub queue: EventQueue<roce::AsyncEvent>,
    pub qps: Mutex<HashMap<u32, Handle<QpObj>>>,
    pub cqs: Mutex<HashMap<u32, Handle<CqObj>>>,
    pub srqs: Mutex<HashMap<u32, Handle<SrqObj>>>,
}

impl AsyncEvents {
    pub fn new() -> std::io::Result<AsyncEvents> {
        Ok(AsyncEvents {
            queue: EventQueue::new()?,
            qps: Mutex::default(),
            cqs: Mutex::default(),
            srqs: Mutex::default(),
        })
    }

    /// Whether the object `e` names was made in this context (and is not
    /// destroyed).
    pub fn owns(&self, e: &roce::AsyncEvent) -> bool {
        use roce::AsyncEvent as E;
        match *e {
            E::CqErr(id) => lock(&self.cqs).contains_key(&id.0),
            E::QpFatal(n) | E::QpReqErr(n) | E::QpAccessErr(n) | E::SqDrained(n) => {
                lock(&self.qps).contains_key(&n)
            }
            E::SrqLimitReached(id) => lock(&self.srqs).contains_key(&id.0),
            _ => false,
        }
    }
}

/// The async events of one open device: its contexts share its engine,
/// so whichever drains it takes every context's events; each goes to the
/// context that owns the object it names (an event of a destroyed object
/// is dropped, as the kernel drops a destroyed object's events).
pub struct DeviceEvents {
    /// `None` once the device's last context closes: the driver keeps
    /// this (as a waker) inside the device, so holding the device here
    /// would keep it open for ever.
    dev: Mutex<Option<roce::Device>>,
    contexts: Mutex<Vec<Arc<AsyncEvents>>>,
}

impl DeviceEvents {
    pub fn new(dev: roce::Device) -> Arc<DeviceEvents> {
        Arc::new(DeviceEvents { dev: Mutex::new(Some(dev)), contexts: Mutex::default() })
    }

    pub fn attach(&self, ctx: Arc<AsyncEvents>) {
        lock(&self.contexts).push(ctx);
    }

    pub fn detach(&self, ctx: &Arc<AsyncEvents>) {
        lock(&self.contexts).retain(|c| !Arc::ptr_eq(c, ctx));
    }

    /// The device's last context is closing: let the device go.
    pub fn close(&self) {
        lock(&self.dev).take();
    }

    /// Routes the engine's events to their contexts, then asks the driver
    /// to wake this again at the next one.
    pub fn drain(self: &Arc<Self>) {
        let Some(dev) = lock(&self.dev).clone() else { return };
        let waker = Waker::from(self.clone());
        loop {
            while let Some(e) = dev.poll_event() {
                self.route(e);
            }
            if !dev.arm_event_waker(&waker) {
                break;
            }
        }
    }

    fn route(&self, e: roce::AsyncEvent) {
        let contexts = lock(&self.contexts);
        if let Some(c) = contexts.iter().find(|c| c.owns(&e)) {
            c.queue.push(e);
        }
    }
}

impl Wake for DeviceEvents {
    fn wake(self: Arc<Self>) {
        self.drain();
    }
}

#[repr(C)]
pub struct ContextObj {
    /// Must be first: programs find the `verbs_context` right before the
    /// `ibv_context` they hold (`verbs_get_ctx`).
    pub vctx: CPart<verbs_context>,
    pub dev: roce::Device,
    pub device: &'static DeviceObj,
    pub events: Arc<AsyncEvents>,
    pub device_events: Arc<DeviceEvents>,
}
c_object!(ContextObj, vctx: verbs_context, ibv_context, std::mem::offset_of!(verbs_context, context));

#[repr(C)]
pub struct PdObj {
    pub ibv: CPart<ibv_pd>,
    pub pd: roce::Pd,
    /// MRs, QPs, SRQs and AHs made in it (`ibv_dealloc_pd` fails with
    /// EBUSY while there are any).
    pub users: AtomicUsize,
}
c_object!(PdObj, ibv: ibv_pd);

#[repr(C)]
pub struct MrObj {
    pub ibv: CPart<ibv_mr>,
    pub mr: roce::Mr,
    pub pd: Handle<PdObj>,
    pub region: crate::regions::Registration,
}
c_object!(MrObj, ibv: ibv_mr);

/// A completion channel: the events of its CQs, each the CQ's
/// notification state (never the CQ itself, which may be destroyed while
/// its event waits).
pub struct Channel {
    pub events: EventQueue<Arc<CqNotify>>,
}

#[repr(C)]
pub struct ChannelObj {
    pub ibv: CPart<ibv_comp_channel>,
    pub ch: Arc<Channel>,
    pub users: AtomicUsize,
}
c_object!(ChannelObj, ibv: ibv_comp_channel);

/// Arming and event state of a CQ.
#[derive(Default)]
pub struct Arm {
    pub armed: bool,
    /// Destroyed: never queue an event for it again, never hand one out.
    pub dead: bool,
    /// Events handed out by `ibv_get_cq_event`, and those acknowledged.
    pub delivered: u64,
    pub acked: u64,
}

/// What a CQ's notification needs, shared with the waker the driver holds
/// and with the channel's queued events.
pub struct CqNotify {
    /// The CQ, for arming; `None` once destroyed (the driver may keep the
    /// waker, and with it this, until its next progress).
    pub armed_cq: Mutex<Option<roce::Cq>>,
    pub channel: Option<Arc<Channel>>,
    /// The CQ's wrapper, set once it is made; not to be dereferenced once
    /// `arm.dead` is set.
    pub cq: OnceLock<Handle<CqObj>>,
    pub arm: Mutex<Arm>,
    pub acked_cond: Condvar,
}

impl CqNotify {
    pub fn new(cq: Option<roce::Cq>, channel: Option<Arc<Channel>>) -> Arc<CqNotify> {
        Arc::new(CqNotify {
            armed_cq: Mutex::new(cq),
            channel,
            cq: OnceLock::new(),
            arm: Mutex::default(),
            acked_cond: Condvar::new(),
        })
    }

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
            self.queue_event(&arm);
        }
    }

    /// Queues an event on the channel (the caller holds `arm`, which is
    /// not dead).
    fn queue_event(self: &Arc<Self>, arm: &Arm) {
        debug_assert!(!arm.dead);
        if let Some(ch) = &self.channel {
            ch.events.push(self.clone());
        }
    }

    /// `ibv_get_cq_event`'s step once the channel gave this: the CQ it
    /// stands for, counted as delivered, or `None` if the CQ was
    /// destroyed meanwhile (its event went with it). While an event is
    /// delivered and not acknowledged the CQ's destruction waits, so the
    /// handle returned stays valid until the program acknowledges it.
    pub fn deliver(&self) -> Option<Handle<CqObj>> {
        let mut arm = lock(&self.arm);
        if arm.dead {
            return None;
        }
        arm.delivered += 1;
        Some(*self.cq.get().expect("set when the CQ was made"))
    }

    /// `ibv_ack_cq_events`.
    pub fn ack(&self, n: u32) {
        let mut arm = lock(&self.arm);
        arm.acked += u64::from(n);
        self.acked_cond.notify_all();
    }

    /// The CQ is being destroyed: no event is queued or handed out from
    /// now on, its undelivered events leave the channel (as the kernel
    /// drops them, `ib_uverbs_release_ucq`), and this returns once every
    /// event handed out is acknowledged (as rdma-core's
    /// `ibv_cmd_destroy_cq` waits for `comp_events_completed`).
    pub fn retire(self: &Arc<Self>) {
        let mut arm = lock(&self.arm);
        arm.dead = true;
        if let Some(ch) = &self.channel {
            ch.events.retain(|n| !Arc::ptr_eq(n, self));
        }
        while arm.acked < arm.delivered {
            arm = self.acked_cond.wait(arm).unwrap_or_else(|p| p.into_inner());
        }
        drop(arm);
        lock(&self.armed_cq).take();
    }
}

impl Wake for CqNotify {
    fn wake(self: Arc<Self>) {
        self.poke();
    }
}

#[repr(C)]
pub struct CqObj {
    pub ibv: CPart<ibv_cq>,
    pub cq: roce::Cq,
    pub notify: Arc<CqNotify>,
    pub channel: Option<Handle<ChannelObj>>,
    /// QPs using it.
    pub users: AtomicUsize,
    /// The QPNs whose send queue completes here.
    pub senders: Mutex<Vec<u32>>,
}
c_object!(CqObj, ibv: ibv_cq);

#[repr(C)]
pub struct SrqObj {
    pub ibv: CPart<ibv_srq>,
    pub srq: roce::Srq,
    pub pd: Handle<PdObj>,
    pub max_wr: u32,
    pub max_sge: u32,
    pub limit: Mutex<u32>,
    pub users: AtomicUsize,
}
c_object!(SrqObj, ibv: ibv_srq);

#[repr(C)]
pub struct QpObj {
    pub ibv: CPart<ibv_qp>,
    pub qp: roce::Qp,
    pub cap: ibv_qp_cap,
    pub sq_sig_all: bool,
    pub pd: Handle<PdObj>,
    pub send_cq: Handle<CqObj>,
    pub recv_cq: Handle<CqObj>,
    pub srq: Option<Handle<SrqObj>>,
}
c_object!(QpObj, ibv: ibv_qp);

#[repr(C)]
pub struct AhObj {
    pub ibv: CPart<ibv_ah>,
    pub ah: roce::Ah,
    pub pd: Handle<PdObj>,
}
c_object!(AhObj, ibv: ibv_ah);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A CQ's notification state on `ch`, with no engine behind it: the
    /// channel logic alone (it runs under Miri). The CQ's handle is only
    /// compared, never dereferenced.
    fn notify(ch: &Arc<Channel>) -> Arc<CqNotify> {
        let n = CqNotify::new(None, Some(ch.clone()));
        n.cq.set(Handle::dangling()).unwrap();
        n
    }

    fn channel() -> Arc<Channel> {
        Arc::new(Channel { events: EventQueue::new().unwrap() })
    }

    #[test]
    fn a_destroyed_cqs_queued_events_leave_the_channel() {
        let ch = channel();
        let (gone, kept) = (notify(&ch), notify(&ch));
        gone.queue_event(&lock(&gone.arm));
        kept.queue_event(&lock(&kept.arm));
        gone.queue_event(&lock(&gone.arm));
        gone.retire();
        let next = ch.events.pop().expect("the other CQ's event stays");
        assert!(Arc::ptr_eq(&next, &kept));
        assert!(ch.events.pop().is_none(), "no event of the destroyed CQ is left");
        assert!(next.deliver().is_some());
        assert!(gone.deliver().is_none(), "a destroyed CQ is never handed out");
    }

    #[test]
    fn destruction_waits_for_delivered_events_to_be_acknowledged() {
        let ch = channel();
        let n = notify(&ch);
        n.queue_event(&lock(&n.arm));
        let got = ch.events.pop().unwrap().deliver();
        assert!(got.is_some());
        let acked = Arc::new(AtomicBool::new(false));
        let t = {
            let (n, acked) = (n.clone(), acked.clone());
            std::thread::spawn(move || {
                n.retire();
                acked.load(Ordering::Acquire)
            })
        };
        acked.store(true, Ordering::Release);
        n.ack(1);
        assert!(t.join().unwrap(), "retire returned before the event was acknowledged");
        assert!(n.deliver().is_none());
    }

    /// Two contexts of one device: each event reaches the context whose
    /// object it names, whichever context's turn it is; an event of no
    /// context's object is dropped.
    #[test]
    fn async_events_go_to_the_owning_context() {
        let events = DeviceEvents { dev: Mutex::new(None), contexts: Mutex::default() };
        let (a, b) = (Arc::new(AsyncEvents::new().unwrap()), Arc::new(AsyncEvents::new().unwrap()));
        events.attach(a.clone());
        events.attach(b.clone());
        lock(&b.qps).insert(5, Handle::dangling());
        lock(&a.qps).insert(6, Handle::dangling());
        events.route(roce::AsyncEvent::QpAccessErr(5));
        events.route(roce::AsyncEvent::QpFatal(6));
        events.route(roce::AsyncEvent::QpFatal(7));
        assert!(matches!(b.queue.pop(), Some(roce::AsyncEvent::QpAccessErr(5))));
        assert!(matches!(a.queue.pop(), Some(roce::AsyncEvent::QpFatal(6))));
        assert!(a.queue.pop().is_none() && b.queue.pop().is_none());
        events.detach(&b);
        events.route(roce::AsyncEvent::QpAccessErr(5));
        assert!(b.queue.pop().is_none(), "a closed context gets nothing");
    }
}
