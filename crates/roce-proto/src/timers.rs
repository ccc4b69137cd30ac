//! A QP's timers: one deadline per kind, owned by the role that arms it.
//! The engine keeps every QP's earliest deadline in one ordered set and,
//! when it falls due, hands each expired kind to its owner.
//!
//! Kinds: the local ACK timeout and the RNR back-off (IBTA vol. 1
//! §9.7.6.1.3, §9.7.5.2.8) and the READ tail wait, the completer's; rate pacing and the
//! congestion controller's timers (`crate::cc`), the engine's.

use crate::time::Instant;

/// What a timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TimerKind {
    /// Local ACK timeout: something was sent and no response came.
    Ack,
    /// RNR back-off: the requester waits before it sends again.
    Rnr,
    /// A READ's responses stopped before its end: ask for the tail again
    /// (the completer's, see `completer`).
    ReadTail,
    /// Pacing: the requester may send its next packet (congestion control).
    Pace,
    /// The congestion controller's own timers (DCQCN's alpha and rate
    /// increase timers).
    Cc,
}

impl TimerKind {
    const ALL: [TimerKind; 5] =
        [TimerKind::Rnr, TimerKind::Ack, TimerKind::ReadTail, TimerKind::Pace, TimerKind::Cc];
}

/// One optional deadline per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Timers {
    at: [Option<Instant>; TimerKind::ALL.len()],
}

impl Timers {
    pub fn set(&mut self, k: TimerKind, at: Option<Instant>) {
        self.at[k as usize] = at;
    }

    pub fn is_set(&self, k: TimerKind) -> bool {
        self.at[k as usize].is_some()
    }

    pub fn clear_all(&mut self) {
        self.at = Default::default();
    }

    /// The earliest deadline of any kind.
    pub fn earliest(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// Takes the earliest timer due at `now` (its deadline cleared); ties
    /// go in the order of `TimerKind`. One at a time, because handling one
    /// may re-arm or clear another (the end of an RNR wait restarts the ACK
    /// timer).
    pub fn take_next_due(&mut self, now: Instant) -> Option<TimerKind> {
        let k = TimerKind::ALL
            .into_iter()
            .filter(|&k| self.at[k as usize].is_some_and(|t| t <= now))
            .min_by_key(|&k| self.at[k as usize])?;
        self.at[k as usize] = None;
        Some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_and_due() {
        let mut t = Timers::default();
        assert_eq!(t.earliest(), None);
        t.set(TimerKind::Ack, Some(Instant(50)));
        t.set(TimerKind::Rnr, Some(Instant(20)));
        assert_eq!(t.earliest(), Some(Instant(20)));
        assert_eq!(t.take_next_due(Instant(30)), Some(TimerKind::Rnr));
        assert_eq!(t.take_next_due(Instant(30)), None);
        assert!(!t.is_set(TimerKind::Rnr) && t.is_set(TimerKind::Ack));
        t.set(TimerKind::Rnr, Some(Instant(50)));
        assert_eq!(t.take_next_due(Instant(60)), Some(TimerKind::Rnr), "ties: RNR first");
        assert_eq!(t.take_next_due(Instant(60)), Some(TimerKind::Ack));
        assert_eq!(t.earliest(), None);
    }
}
