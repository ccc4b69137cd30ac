//! A nanosecond wake-up for the driver thread: a timerfd in its epoll set.
//!
//! `epoll_wait` takes its timeout in whole milliseconds (mio rounds up), so
//! a driver thread that slept on it alone would run a timer due in 30 us a
//! millisecond late, and a QP paced at a few hundred Mb/s would leave in
//! millisecond bursts. A timerfd (`CLOCK_MONOTONIC`, the clock of
//! `std::time::Instant` and so of the engine's time) armed for the engine's
//! next deadline wakes the thread at that instant with hrtimer precision.
//! The epoll timeout stays as a backstop: if the timer cannot be made, the
//! driver keeps working at millisecond resolution.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration as StdDuration;

use roce_proto::Instant;
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec,
};

/// The driver thread's timerfd, registered for readability under one token.
pub(crate) struct WakeTimer {
    fd: OwnedFd,
    /// The deadline last armed (`None`: disarmed), so an unchanged
    /// deadline costs no system call.
    armed: Option<Instant>,
}

impl WakeTimer {
    pub(crate) fn new(registry: &mio::Registry, token: mio::Token) -> io::Result<WakeTimer> {
        let fd = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC)?;
        registry.register(&mut mio::unix::SourceFd(&fd.as_raw_fd()), token, mio::Interest::READABLE)?;
        Ok(WakeTimer { fd, armed: None })
    }

    /// Fires once at engine time `at`, `now` being the engine's time now
    /// (`None` disarms). A deadline already due fires in a nanosecond: a
    /// zero `it_value` would disarm the timer instead.
    pub(crate) fn arm(&mut self, at: Option<Instant>, now: Instant) -> io::Result<()> {
        if at == self.armed {
            return Ok(());
        }
        let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
        let value = match at {
            Some(t) => {
                let d = StdDuration::from_nanos(t.as_nanos().saturating_sub(now.as_nanos()).max(1));
                Timespec {
                    tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: i64::from(d.subsec_nanos()),
                }
            }
            None => zero,
        };
        timerfd_settime(
            &self.fd,
            TimerfdTimerFlags::empty(),
            &Itimerspec { it_interval: zero, it_value: value },
        )?;
        self.armed = at;
        Ok(())
    }

    /// After a wake-up: takes the expiry count (so the next expiry is a new
    /// readiness edge) and forgets the armed wait (it has passed, or is
    /// re-armed by the next [`WakeTimer::arm`]).
    pub(crate) fn clear(&mut self) {
        let mut ticks = [0u8; 8];
        // EAGAIN: it had not fired (another event woke the thread).
        let _ = rustix::io::read(&self.fd, &mut ticks);
        self.armed = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait well under epoll's millisecond wakes the poll on time.
    #[test]
    fn wakes_a_poll_before_its_millisecond_timeout() {
        let mut poll = mio::Poll::new().unwrap();
        let mut events = mio::Events::with_capacity(4);
        let token = mio::Token(7);
        let mut t = WakeTimer::new(poll.registry(), token).unwrap();
        for k in 0..3u64 {
            let now = Instant::from_nanos(k * 1_000_000);
            t.arm(Some(Instant::from_nanos(now.as_nanos() + 50_000)), now).unwrap();
            // A ten-second backstop: only the timer ends this poll early.
            poll.poll(&mut events, Some(StdDuration::from_secs(10))).unwrap();
            assert!(events.iter().any(|e| e.token() == token && e.is_readable()));
            t.clear();
        }
        // Disarmed: the poll times out with no event.
        t.arm(Some(Instant::from_nanos(10_000_000_000)), Instant::ZERO).unwrap();
        t.arm(None, Instant::ZERO).unwrap();
        poll.poll(&mut events, Some(StdDuration::from_millis(20))).unwrap();
        assert!(events.is_empty());
    }
}
