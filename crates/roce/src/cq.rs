//! Completion queues: polling, waiting (blocking or `async`), and the
//! driving poll of programs that spin on an empty CQ.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use roce_proto::*;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::wait::{wait_for, Until};

pub(crate) struct CqInner {
    pub(crate) dev: Device,
    pub(crate) id: CqId,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let _ = self.dev.with(|e| e.destroy_cq(self.id));
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

/// An empty completion, for sizing `poll` buffers (`Wc::EMPTY`).
pub const WC_ZERO: Wc = Wc::EMPTY;

/// Creation lives with the CQ it makes.
impl Device {
    pub fn create_cq(&self, depth: usize) -> Result<Cq> {
        let id = self.with(|e| e.create_cq(depth))?;
        Ok(Cq { inner: Arc::new(CqInner { dev: self.clone(), id }) })
    }
}

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
        let mut core = sh.lock()?;
        if sh.busy_poll {
            let now = sh.now();
            core.progress_deferred(now)?;
        }
        Ok(core.engine.poll_cq(self.inner.id, out)?)
    }

    /// Waits until at least one completion is ready or `timeout` passes.
    pub fn wait(&self, out: &mut [Wc], timeout: StdDuration) -> Result<usize> {
        let got =
            wait_for(&self.inner.dev.inner.shared, Until::Completion(self.inner.id), timeout, |core| {
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
        let mut core = sh.lock()?;
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
    ///
    /// On a dead device it returns true: the caller's next poll fails
    /// with [`Error::DeviceDead`], and no completion will come to wake it.
    pub fn arm_waker(&self, waker: &std::task::Waker) -> bool {
        let sh = &self.inner.dev.inner.shared;
        let Ok(mut core) = sh.lock() else { return true };
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
        let mut core = match sh.lock() {
            Ok(core) => core,
            Err(e) => return Poll::Ready(Err(e)),
        };
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
