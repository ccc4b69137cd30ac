//! Rate to departure times, one packet at a time.

use crate::time::{Duration, Instant};

/// Spaces packets so that each one occupies `wire bytes x 8 / rate` after
/// it leaves: the next may leave at `max(now, next_send) + that`, rounded
/// up to a nanosecond per packet (so the long-run rate is at most the
/// target, below it by under 1 ns per packet). An idle pacer earns no
/// credit: after a pause the next packet leaves at once, then spacing
/// resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacer {
    next: Instant,
    /// The last packet's (wire bytes, rate) and its transmit time: a
    /// stream of equal packets at one rate divides once.
    last: (u64, u64, Duration),
}

impl Default for Pacer {
    fn default() -> Pacer {
        Pacer::new()
    }
}

impl Pacer {
    pub const fn new() -> Pacer {
        Pacer { next: Instant::ZERO, last: (0, 0, Duration(u64::MAX)) }
    }

    /// The earliest instant the next packet may leave.
    pub fn next_send(&self) -> Instant {
        self.next
    }

    /// Whether a packet may leave at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Records a packet of `wire_bytes` leaving at `now` (or at
    /// [`Pacer::next_send`] if that is later: a packet cannot leave before
    /// its turn) at `rate_bps`, and returns when the next one may leave.
    pub fn on_send(&mut self, now: Instant, wire_bytes: u64, rate_bps: u64) -> Instant {
        let start = now.max(self.next);
        if (self.last.0, self.last.1) != (wire_bytes, rate_bps) {
            self.last = (wire_bytes, rate_bps, Pacer::transmit_time(wire_bytes, rate_bps));
        }
        self.next = start + self.last.2;
        self.next
    }

    /// `ceil(wire_bytes x 8 x 10^9 / rate_bps)` nanoseconds; a rate of 0
    /// never sends (the longest duration).
    pub fn transmit_time(wire_bytes: u64, rate_bps: u64) -> Duration {
        if rate_bps == 0 {
            return Duration(u64::MAX);
        }
        let ns = (u128::from(wire_bytes) * 8 * 1_000_000_000).div_ceil(u128::from(rate_bps));
        Duration(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmit_time_rounds_up_to_a_nanosecond() {
        // 1048 B at 100 Gb/s: 1048 x 8 / 100 = 83.84 ns -> 84.
        assert_eq!(Pacer::transmit_time(1048, 100_000_000_000), Duration(84));
        // 60 B at 100 Gb/s: 4.8 ns -> 5.
        assert_eq!(Pacer::transmit_time(60, 100_000_000_000), Duration(5));
        // 1000 B at 40 Gb/s: 8000 / 40 = 200 ns exactly.
        assert_eq!(Pacer::transmit_time(1000, 40_000_000_000), Duration(200));
        // 1 B at 3 bit/s: 8/3 s = 2.666666666.. s -> 2666666667 ns.
        assert_eq!(Pacer::transmit_time(1, 3), Duration(2_666_666_667));
        // 4096 B at the 1 Mb/s firmware floor: 32768 us.
        assert_eq!(Pacer::transmit_time(4096, 1_000_000), Duration(32_768_000));
        assert_eq!(Pacer::transmit_time(0, 1), Duration(0));
        assert_eq!(Pacer::transmit_time(1, 0), Duration(u64::MAX));
        // u64::MAX bytes at 1 bit/s does not fit: saturates.
        assert_eq!(Pacer::transmit_time(u64::MAX, 1), Duration(u64::MAX));
    }

    #[test]
    fn packets_are_spaced_from_the_later_of_now_and_the_last_turn() {
        let rate = 50_000_000_000; // 50 Gb/s: 1048 B take 167.68 ns -> 168
        let mut p = Pacer::new();
        assert!(p.ready(Instant(0)));
        assert_eq!(p.on_send(Instant(1_000), 1048, rate), Instant(1_168));
        assert!(!p.ready(Instant(1_167)));
        assert!(p.ready(Instant(1_168)));
        // Sent on time: 1168 + 168.
        assert_eq!(p.on_send(Instant(1_168), 1048, rate), Instant(1_336));
        // Sent early (the caller ignored the pacer): still counted from 1336.
        assert_eq!(p.on_send(Instant(1_200), 1048, rate), Instant(1_504));
        // Idle until 10 us: no credit, the next turn is 10000 + 168.
        assert_eq!(p.on_send(Instant(10_000), 1048, rate), Instant(10_168));
        // The rate changes between packets: 60 B at 1 Gb/s = 480 ns.
        assert_eq!(p.on_send(Instant(10_168), 60, 1_000_000_000), Instant(10_648));
        assert_eq!(p.next_send(), Instant(10_648));
    }
}
