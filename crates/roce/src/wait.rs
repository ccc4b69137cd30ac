//! Sleeping until the device's progress makes something ready.

use std::time::Duration as StdDuration;

use crate::driver::{Core, Shared};
use crate::error::Result;

/// What a sleeping thread waits for, so progress wakes it only when it
/// may be ready.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
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
/// lock meanwhile. A device that dies wakes it, and it fails with
/// [`Error::DeviceDead`](crate::Error::DeviceDead).
pub(crate) fn wait_for<T>(
    sh: &Shared,
    until: Until,
    timeout: StdDuration,
    mut ready: impl FnMut(&mut Core) -> Result<Option<T>>,
) -> Result<Option<T>> {
    let deadline = std::time::Instant::now() + timeout;
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
            fn count(c: &mut Core, until: Until) -> &mut usize {
                match until {
                    Until::Completion => &mut c.cq_waiters,
                    Until::Progress => &mut c.progress_waiters,
                }
            }
            *count(&mut core, until) += 1;
            let woken = sh.cq_cond.wait_timeout(core, left.min(StdDuration::from_millis(50)));
            core = match woken {
                Ok((core, _)) => core,
                Err(poisoned) => {
                    sh.die(poisoned.into_inner().0, "the engine panicked on an application thread".into());
                    return Err(sh.dead_error());
                }
            };
            *count(&mut core, until) -= 1;
            // A device that died meanwhile woke this thread to fail.
            if sh.dead.get().is_some() {
                return Err(sh.dead_error());
            }
        }
    }
}
