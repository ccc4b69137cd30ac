//! The simulation's only source of randomness: ChaCha8 streams derived from
//! one seed. Each consumer (workload plan, network faults, every engine) gets
//! its own stream by [`SimRng::fork`], so changing how much one of them draws
//! never shifts what another sees.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// A seeded random stream with the few distributions the simulator needs.
#[derive(Debug, Clone)]
pub struct SimRng(ChaCha8Rng);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// An independent stream for the consumer named `label`.
    pub fn fork(&self, label: &str) -> SimRng {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in label.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let mut r = self.0.clone();
        r.set_stream(h);
        SimRng(r)
    }

    pub fn u32(&mut self) -> u32 {
        self.0.next_u32()
    }

    pub fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (`n > 0`), by 128-bit multiply (bias below 2^-64·n).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        if hi - lo == u64::MAX {
            return self.u64();
        }
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `lo..=hi` for sizes and indices.
    pub fn usize(&mut self, lo: usize, hi: usize) -> usize {
        self.range(lo as u64, hi as u64) as usize
    }

    /// Uniform in `[0, 1)` with 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (never for `p <= 0`, always for `p >= 1`).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in `[0, max)` as a float.
    pub fn upto(&mut self, max: f64) -> f64 {
        self.unit() * max
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        self.0.fill_bytes(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_are_independent_and_reproducible() {
        let root = SimRng::new(7);
        let (mut a, mut b) = (root.fork("plan"), root.fork("net"));
        let (x, y) = (a.u64(), b.u64());
        assert_ne!(x, y);
        assert_eq!(root.fork("plan").u64(), x);
        assert_ne!(SimRng::new(8).fork("plan").u64(), x);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = SimRng::new(1);
        for _ in 0..1000 {
            let v = r.range(3, 5);
            assert!((3..=5).contains(&v));
            assert!(r.unit() < 1.0);
        }
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
    }
}
