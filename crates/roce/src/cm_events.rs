//! Event channels: where a CM identifier's events wait for its user, with
//! a file descriptor that polls readable while any wait (an `eventfd` in
//! semaphore mode: one count per event), as `rdma_event_channel.fd` must.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use roce_proto::cm::{CmEvent, CmId};
use rustix::event::{eventfd, EventfdFlags};

use crate::error::Result;

pub(crate) struct ChannelInner {
    queue: Mutex<VecDeque<CmEvent>>,
    cond: Condvar,
    fd: OwnedFd,
}

impl ChannelInner {
    fn push(&self, ev: CmEvent) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(ev);
        // One count per event; a full counter (2^64 - 2 events) cannot happen.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        self.cond.notify_all();
    }
}

/// A queue of CM events with a pollable file descriptor (librdmacm's
/// `rdma_event_channel`). Every CM identifier reports to one channel;
/// connections a listener accepts report to the listener's channel until
/// moved ([`crate::Device::cm_migrate`]). Clones share the queue.
#[derive(Clone)]
pub struct EventChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl EventChannel {
    /// A new, empty channel.
    pub fn new() -> Result<EventChannel> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK | EventfdFlags::SEMAPHORE)
            .map_err(std::io::Error::from)?;
        Ok(EventChannel {
            inner: Arc::new(ChannelInner { queue: Mutex::new(VecDeque::new()), cond: Condvar::new(), fd }),
        })
    }

    /// Readable (POLLIN) while an event waits; `try_next` takes one. The
    /// descriptor belongs to the channel: do not read or close it.
    pub fn fd(&self) -> RawFd {
        self.inner.fd.as_fd().as_raw_fd()
    }

    /// The next event, if one waits.
    pub fn try_next(&self) -> Option<CmEvent> {
        let mut q = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        let ev = q.pop_front()?;
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.inner.fd, &mut b);
        Some(ev)
    }

    /// The next event, waiting up to `timeout` (`None`: for ever).
    pub fn next(&self, timeout: Option<Duration>) -> Option<CmEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(ev) = q.pop_front() {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&self.inner.fd, &mut b);
                return Some(ev);
            }
            q = match deadline {
                None => self.inner.cond.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let left = d.checked_duration_since(Instant::now())?;
                    self.inner.cond.wait_timeout(q, left).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
    }

    /// Number of events waiting.
    pub fn len(&self) -> usize {
        self.inner.queue.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which channel each CM identifier of a device reports to (kept in the
/// driver's core, under the device lock).
#[derive(Default)]
pub(crate) struct Router {
    routes: HashMap<CmId, Weak<ChannelInner>>,
}

impl Router {
    pub fn set(&mut self, id: CmId, ch: &EventChannel) {
        self.routes.insert(id, Arc::downgrade(&ch.inner));
    }

    pub fn remove(&mut self, id: CmId) {
        self.routes.remove(&id);
    }

    /// Hands `ev` to its identifier's channel. A connection request's new
    /// identifier joins its listener's channel. Events of identifiers with
    /// no live channel are dropped.
    pub fn deliver(&mut self, ev: CmEvent) {
        let target = match &ev {
            CmEvent::ConnectRequest { listener, id, .. } | CmEvent::SidrRequest { listener, id, .. } => {
                let ch = self.routes.get(listener).cloned();
                if let Some(ch) = &ch {
                    self.routes.insert(*id, ch.clone());
                }
                ch
            }
            ev => self.routes.get(&ev.id()).cloned(),
        };
        if let Some(ch) = target.and_then(|w| w.upgrade()) {
            ch.push(ev);
        }
    }
}
