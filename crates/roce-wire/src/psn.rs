//! Packet sequence numbers: 24-bit values compared modulo 2^24 (IBTA vol. 1
//! §9.7.1 and §9.7.5.1.1: a PSN is "ahead" of another when it lies in the half
//! of the sequence space that follows it).

use core::fmt;

/// The PSN space is 24 bits wide.
pub const PSN_BITS: u32 = 24;
/// Number of distinct PSNs.
pub const PSN_MODULUS: u32 = 1 << PSN_BITS;
const MASK: u32 = PSN_MODULUS - 1;

/// A 24-bit packet sequence number with wrap-around arithmetic.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    pub const ZERO: Psn = Psn(0);
    pub const MAX: Psn = Psn(MASK);

    /// The low 24 bits of `v`.
    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK)
    }

    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK)
    }

    /// `self - n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK)
    }

    /// The successor PSN.
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance from `other` to `self` in (-2^23, 2^23]: positive when
    /// `self` is ahead of `other`.
    pub const fn distance(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & MASK;
        // sign-extend the 24-bit difference
        ((d << 8) as i32) >> 8
    }

    /// True when `self` comes strictly before `other` in sequence order.
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }

    /// True when `self` comes strictly after `other` in sequence order.
    pub const fn is_after(self, other: Psn) -> bool {
        self.distance(other) > 0
    }

    /// True when `self` lies in `[start, start + len)` modulo 2^24.
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        (self.0.wrapping_sub(start.0) & MASK) < len
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_2_pow_24() {
        assert_eq!(Psn::MAX.next(), Psn::ZERO);
        assert_eq!(Psn::ZERO.sub(1), Psn::MAX);
        assert_eq!(Psn::new(0x0100_0005).value(), 5);
        assert!(Psn::MAX.is_before(Psn::ZERO));
        assert!(Psn::ZERO.is_after(Psn::MAX));
        assert_eq!(Psn::new(2).distance(Psn::MAX), 3);
        assert!(Psn::new(1).in_window(Psn::MAX, 3));
        assert!(!Psn::new(2).in_window(Psn::MAX, 3));
    }

    proptest! {
        #[test]
        fn add_then_sub_is_identity(a in 0u32..PSN_MODULUS, n in 0u32..PSN_MODULUS) {
            let p = Psn::new(a);
            prop_assert_eq!(p.add(n).sub(n), p);
            prop_assert_eq!(p.add(n).value(), (a + n) % PSN_MODULUS);
        }

        #[test]
        fn distance_matches_offset(a in 0u32..PSN_MODULUS, n in 1u32..(1 << 23)) {
            let p = Psn::new(a);
            let q = p.add(n);
            prop_assert_eq!(q.distance(p), n as i32);
            prop_assert_eq!(p.distance(q), -(n as i32));
            prop_assert!(q.is_after(p));
            prop_assert!(p.is_before(q));
            prop_assert!(q.in_window(p, n + 1));
            prop_assert!(!q.in_window(p, n));
        }

        #[test]
        fn distance_is_antisymmetric_and_bounded(a in 0u32..PSN_MODULUS, b in 0u32..PSN_MODULUS) {
            let (p, q) = (Psn::new(a), Psn::new(b));
            let d = p.distance(q);
            prop_assert!(d > -(1 << 23) && d <= (1 << 23));
            prop_assert_eq!(q.add(d as u32), p);
        }
    }
}
