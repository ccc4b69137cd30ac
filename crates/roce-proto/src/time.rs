//! Time as the engine sees it: nanoseconds from an origin the driver picks.
//! The engine never reads a clock; every call that needs time takes `now`.

use core::ops::{Add, Sub};

/// A point in time, in nanoseconds since the driver's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

/// A span of time in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub u64);

impl Duration {
    pub const ZERO: Duration = Duration(0);
    pub const fn from_nanos(n: u64) -> Duration {
        Duration(n)
    }
    pub const fn from_micros(n: u64) -> Duration {
        Duration(n * 1_000)
    }
    pub const fn from_millis(n: u64) -> Duration {
        Duration(n * 1_000_000)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
}

impl Instant {
    pub const ZERO: Instant = Instant(0);
    pub const fn from_nanos(n: u64) -> Instant {
        Instant(n)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, o: Instant) -> Duration {
        Duration(self.0.saturating_sub(o.0))
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, o: Duration) -> Duration {
        Duration(self.0.saturating_add(o.0))
    }
}

/// Local ACK timeout for the QP attribute `timeout` (IBTA vol. 1 §11.2.4.2:
/// 4.096 us x 2^timeout; 0 means infinite).
pub fn ack_timeout(code: u8) -> Option<Duration> {
    (code != 0).then(|| Duration(4096u64 << code.min(31)))
}

/// Minimum RNR NAK timer for a 5-bit code (IBTA vol. 1 Table 45), in microseconds.
const RNR_TIMER_US: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120,
    7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680,
    491_520,
];

/// The RNR NAK timer value for `code` (IBTA vol. 1 Table 45).
pub fn rnr_timer(code: u8) -> Duration {
    Duration::from_micros(RNR_TIMER_US[usize::from(code & 31)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_tables() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration(8192)));
        assert_eq!(ack_timeout(14), Some(Duration(4096 << 14))); // ~67 ms
        assert_eq!(rnr_timer(0), Duration::from_millis(655) + Duration::from_micros(360));
        assert_eq!(rnr_timer(12), Duration::from_micros(640));
        assert_eq!(rnr_timer(31), Duration::from_micros(491_520));
    }
}
