//! Sleeping until the device's progress makes something ready.

use std::sync::{Arc, Condvar};
use std::time::Duration as StdDuration;

use roce_proto::CqId;

use crate::driver::{Core, Shared};
use crate::error::Result;

/// What a sleeping thread waits for, so progress wakes it only when it
/// may be ready.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// A completion on this CQ.
    Completion(CqId),
    /// Anything received (memory an incoming WRITE changes).
    Progress,
}

/// Waits until `ready`, looked at under the device lock, gives a value
/// (`Some`), or `timeout` passes (`None`). In busy-poll mode each look
/// first drives the network and the lock is let go between looks;
/// otherwise the thread sleeps on the signal progress gives (after each
/// receive for [`Until::Progress`]; for [`Until::Completion`], on a
/// condition variable of its own, after progress that left a completion
/// on its CQ; at most 50 ms at a time), never holding the
/// lock meanwhile. A device that dies wakes it, and it fails with
/// [`Error::DeviceDead`](crate::Error::DeviceDead).
pub(crate) fn wait_for<T>(
    sh: &Shared,
    until: Until,
    timeout: StdDuration,
    mut ready: impl FnMut(&mut Core) -> Result<Option<T>>,
) -> Result<Option<T>> {
    let deadline = std::time::Instant::now() + timeout;
    // The condition variable this thread sleeps on for a completion.
    let mut own: Option<Arc<Condvar>> = None;
    let mut core = sh.lock()?;
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
            core = sh.lock()?;
        } else {
            let nap = left.min(StdDuration::from_millis(50));
            let woken = match until {
                Until::Progress => {
                    core.progress_waiters += 1;
                    sh.cq_cond.wait_timeout(core, nap).map(|(mut c, _)| {
                        c.progress_waiters -= 1;
                        c
                    })
                }
                Until::Completion(cq) => {
                    let cv = own.get_or_insert_with(|| Arc::new(Condvar::new())).clone();
                    core.cq_sleepers.push((cq, cv.clone()));
                    cv.wait_timeout(core, nap).map(|(mut c, _)| {
                        c.cq_sleepers.retain(|(_, s)| !Arc::ptr_eq(s, &cv));
                        c
                    })
                }
            };
            core = match woken {
                Ok(core) => core,
                Err(poisoned) => {
                    let mut c = poisoned.into_inner().0;
                    if let Until::Completion(_) = until {
                        let cv = own.as_ref().expect("made before sleeping");
                        c.cq_sleepers.retain(|(_, s)| !Arc::ptr_eq(s, cv));
                    }
                    sh.die(c, "the engine panicked on an application thread".into());
                    return Err(sh.dead_error());
                }
            };
            // A device that died meanwhile woke this thread to fail.
            if sh.dead.get().is_some() {
                return Err(sh.dead_error());
            }
        }
    }
}
