//! The driver thread: one turn of progress under the lock whenever the
//! socket is readable or a timer falls due, and the catching of an engine
//! panic that kills the device rather than the thread alone.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::time::Duration as StdDuration;

use crate::driver::{panic_message, Core, Shared, Wake, BUSY_POLL_TICK, DRIVE_LEASE, TIMER};
use crate::timer::WakeTimer;

/// The driver thread: progress when the socket is readable or a timer is
/// due, sleeping in between. In busy-poll mode the application's threads
/// receive (they spin in `Cq::poll`/`Device::progress`), so this thread only
/// keeps the timers.
///
/// A panic in the engine (or in this loop) does not end the thread
/// silently: it is caught while the lock is held, the device is marked
/// dead with the panic's message ([`Shared::die`]), every waiter is woken
/// to fail, and the thread ends. It also ends when the device is found
/// dead (a verb's panic) or torn down.
pub(crate) fn run(shared: std::sync::Arc<Shared>, mut poll: mio::Poll) {
    let mut events = mio::Events::with_capacity(8);
    // Without it, timers run at epoll's millisecond resolution.
    let mut timer = match WakeTimer::new(poll.registry(), TIMER) {
        Ok(t) => Some(t),
        Err(e) => {
            shared.lock_any().record_timer_failure("creating the timerfd", &e);
            None
        }
    };
    while !shared.stop.load(Ordering::Acquire) {
        let Ok(mut core) = shared.lock_for_turn() else { break };
        let turn = std::panic::catch_unwind(AssertUnwindSafe(|| turn(&shared, &mut core, &mut timer)));
        let (timeout, wake) = match turn {
            Ok(t) => t,
            Err(payload) => {
                let why = format!("the driver thread panicked: {}", panic_message(payload.as_ref()));
                shared.die(core, why);
                break;
            }
        };
        drop(core);
        wake.fire(&shared.cq_cond);
        let _ = poll.poll(&mut events, timeout);
        if let Some(t) = &mut timer {
            if events.iter().any(|e| e.token() == TIMER) {
                t.clear();
            }
        }
    }
}

/// One turn of the driver thread under the lock: receive (unless busy-poll
/// or a drive lease has the socket), run due timers, send, arm the timer.
/// Returns how long to sleep and whom to wake once the lock is let go.
fn turn(shared: &Shared, core: &mut Core, timer: &mut Option<WakeTimer>) -> (Option<StdDuration>, Wake) {
    if let Some(m) = core.inject_panic.take() {
        panic!("{m}");
    }
    let mut wake = Wake::default();
    let now = shared.now();
    let lease = shared.driving_until.load(Ordering::Acquire);
    let driven = now.as_nanos() < lease;
    if !driven {
        // Should the kernel refuse (never seen), the socket stays
        // unwatched and the timeout below has this thread receive
        // every lease instead.
        let _ = shared.watch_socket(core);
    }
    let activity = if shared.busy_poll || driven {
        let due = core.engine.poll_timeout().is_some_and(|t| t <= now);
        if due {
            core.engine.handle_timeout(now);
        }
        core.flush(now);
        due
    } else {
        // A failed receive is counted (`DriverStats::rx_errors`); the
        // thread goes on, as the next readiness may succeed.
        core.progress(now).unwrap_or(false)
    };
    shared.note_tx_failure(core);
    if activity {
        wake = core.completion_waiters();
    }
    let next = core.engine.poll_timeout();
    shared.driver_deadline.store(next.map_or(u64::MAX, |t| t.as_nanos()), Ordering::Release);
    let wait = next.map(|t| StdDuration::from_nanos(t.as_nanos().saturating_sub(now.as_nanos())));
    if let Some(t) = timer {
        if let Err(e) = t.arm(next, now) {
            core.record_timer_failure("arming the timerfd", &e);
            *timer = None;
        }
    }
    let timeout = if shared.busy_poll {
        Some(wait.map_or(BUSY_POLL_TICK, |w| w.min(BUSY_POLL_TICK)))
    } else if driven || !core.socket_watched {
        // Look in at the lease's end (a renewed lease: again then).
        let left = if driven {
            StdDuration::from_nanos(lease - now.as_nanos()).max(DRIVE_LEASE / 4)
        } else {
            DRIVE_LEASE
        };
        Some(wait.map_or(left, |w| w.min(left)))
    } else {
        wait
    };
    (timeout, wake)
}
