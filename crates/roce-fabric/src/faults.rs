//! The faults a link deals each datagram, shared by the fabric's links and
//! the fault-injection harness (`roce-harness`, a full mesh of one-way links).
//!
//! A one-way simulated link and the fate it deals each datagram: optional
//! serialisation at a line rate, propagation delay plus jitter (FIFO: jitter
//! never reorders), and independent faults per copy: loss, reordering (an
//! extra random delay that lets the copy overtake or be overtaken),
//! duplication (a second copy with its own fate) and corruption (one random
//! bit flipped in the datagram, never in BTH byte 4: FECN, BECN and resv6
//! are the one part of the datagram the ICRC leaves uncovered, IBTA Annex
//! A17.3.3, because switches may change them; every flip made here is one
//! the receiver's ICRC check must catch).

use roce_proto::{Duration, Instant};

use crate::rng::SimRng;
use crate::scenario::Time;

/// Bytes a frame occupies on the wire beyond the UDP payload: preamble and
/// inter-frame gap (20), Ethernet header and FCS (18), UDP (8); the IP header
/// is added per family.
const WIRE_OVERHEAD: u64 = 20 + 18 + 8;

/// The BTH byte the ICRC does not cover (FECN, BECN, resv6).
const VARIANT_BYTE: usize = 4;

/// Parameters of a one-way link. Probabilities are per copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkParams {
    /// Propagation delay (at least 1 ns is used).
    pub delay: Duration,
    /// Extra delay uniform in `[0, jitter]`, FIFO preserved.
    pub jitter: Duration,
    pub loss: f64,
    /// Fraction of copies that get an extra delay in `[0, reorder_delay]`
    /// and leave the FIFO order.
    pub reorder: f64,
    pub reorder_delay: Duration,
    pub duplicate: f64,
    pub corrupt: f64,
    /// Line rate in bits per second (`None`: infinitely fast).
    pub rate_bps: Option<u64>,
}

impl LinkParams {
    /// A perfect link with the given delay.
    pub fn ideal(delay: Duration) -> LinkParams {
        LinkParams {
            delay,
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            duplicate: 0.0,
            corrupt: 0.0,
            rate_bps: None,
        }
    }

    /// The longest one-way time a copy can take, serialisation aside.
    pub fn max_one_way(&self) -> Duration {
        self.delay.max(Duration(1)) + self.jitter + self.reorder_delay
    }
}

/// What happens to one copy of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFate {
    /// Arrival time, or `None` if lost.
    pub arrive: Option<Instant>,
    /// Bit (counted from the first byte's MSB) flipped on the way; never
    /// one of bits 32..40 (BTH byte 4).
    pub flip_bit: Option<u32>,
}

/// A one-way link's state.
#[derive(Debug, Clone)]
pub struct Link {
    pub params: LinkParams,
    busy_until: Instant,
    last_fifo_arrival: Instant,
}

impl Link {
    pub fn new(params: LinkParams) -> Link {
        Link { params, busy_until: Instant::ZERO, last_fifo_arrival: Instant::ZERO }
    }

    /// Sends a datagram of `len` bytes (`ip_header` bytes of IP header) at
    /// `now`; returns the fate of each copy (one, or two if duplicated).
    /// Draws from `rng` in a fixed order.
    pub fn send(&mut self, rng: &mut SimRng, now: Instant, len: usize, ip_header: usize) -> Vec<CopyFate> {
        let p = self.params;
        let depart = match p.rate_bps {
            Some(bps) if bps > 0 => {
                let bits = (len as u64 + ip_header as u64 + WIRE_OVERHEAD) * 8;
                let start = now.max(self.busy_until);
                self.busy_until = start + Duration(bits.saturating_mul(1_000_000_000).div_ceil(bps));
                self.busy_until
            }
            _ => now,
        };
        let faults = Faults {
            jitter: p.jitter.0,
            loss: p.loss,
            reorder: p.reorder,
            reorder_delay: p.reorder_delay.0,
            duplicate: p.duplicate,
            corrupt: p.corrupt,
        };
        let mut fifo = self.last_fifo_arrival.0;
        let copies = faults.deal(rng, depart.0 + p.delay.max(Duration(1)).0, len, &mut fifo);
        self.last_fifo_arrival = Instant(fifo);
        copies
            .into_iter()
            .flatten()
            .map(|c| CopyFate { arrive: c.arrive.map(Instant), flip_bit: c.flip_bit })
            .collect()
    }
}

/// The random faults of a link, in a time unit of the caller's (the
/// harness's nanoseconds, the fabric's picoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Faults {
    /// Extra delay uniform in `[0, jitter]`, FIFO order kept.
    #[serde(default)]
    pub jitter: Time,
    #[serde(default)]
    pub loss: f64,
    /// Fraction of copies delayed by a further `[0, reorder_delay]` out of
    /// the FIFO order (they may overtake or be overtaken).
    #[serde(default)]
    pub reorder: f64,
    #[serde(default)]
    pub reorder_delay: Time,
    /// Fraction of datagrams that arrive twice (each copy its own fate).
    #[serde(default)]
    pub duplicate: f64,
    /// Fraction of copies with one bit flipped (never in BTH byte 4).
    #[serde(default)]
    pub corrupt: f64,
}

/// What happens to one copy, in the caller's time unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy {
    pub arrive: Option<Time>,
    pub flip_bit: Option<u32>,
}

impl Faults {
    /// Whether any fault can happen.
    pub fn any(&self) -> bool {
        self.jitter > 0 || self.loss > 0.0 || self.reorder > 0.0 || self.duplicate > 0.0 || self.corrupt > 0.0
    }

    /// The fates of a datagram of `len` bytes that would arrive at
    /// `arrive` on a perfect link: one copy, or two if duplicated.
    /// `last_fifo` is the latest in-order arrival so far on this link
    /// (jitter never reorders). Draws from `rng` in a fixed order:
    /// duplication, then per copy loss, jitter, reordering, corruption.
    pub fn deal(
        &self,
        rng: &mut SimRng,
        arrive: Time,
        len: usize,
        last_fifo: &mut Time,
    ) -> [Option<Copy>; 2] {
        let copies = if rng.chance(self.duplicate) { 2 } else { 1 };
        let mut out = [None; 2];
        for slot in out.iter_mut().take(copies) {
            if rng.chance(self.loss) {
                *slot = Some(Copy { arrive: None, flip_bit: None });
                continue;
            }
            let jitter = if self.jitter > 0 { rng.range(0, self.jitter) } else { 0 };
            let base = arrive + jitter;
            let at = if rng.chance(self.reorder) {
                base + rng.range(0, self.reorder_delay)
            } else {
                let t = base.max(*last_fifo);
                *last_fifo = t;
                t
            };
            let flip_bit = (rng.chance(self.corrupt) && len > VARIANT_BYTE).then(|| {
                let b = rng.below((len as u64 - 1) * 8) as u32;
                if b >= VARIANT_BYTE as u32 * 8 {
                    b + 8
                } else {
                    b
                }
            });
            *slot = Some(Copy { arrive: Some(at), flip_bit });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ideal_link_is_fifo_with_fixed_delay() {
        let mut rng = SimRng::new(1);
        let mut l = Link::new(LinkParams::ideal(Duration(100)));
        for t in [0, 5, 5, 7] {
            let f = l.send(&mut rng, Instant(t), 64, 20);
            assert_eq!(f, vec![CopyFate { arrive: Some(Instant(t + 100)), flip_bit: None }]);
        }
    }

    #[test]
    fn rate_serialises_and_faults_happen() {
        let mut rng = SimRng::new(2);
        let mut p = LinkParams::ideal(Duration(10));
        p.rate_bps = Some(8_000_000_000); // 1 byte per ns
        let mut l = Link::new(p);
        let a = l.send(&mut rng, Instant(0), 954, 0)[0].arrive.unwrap();
        let b = l.send(&mut rng, Instant(0), 954, 0)[0].arrive.unwrap();
        assert_eq!((a.0, b.0), (1010, 2010));

        p.loss = 0.3;
        p.duplicate = 0.3;
        p.corrupt = 0.3;
        p.reorder = 0.5;
        p.reorder_delay = Duration(1000);
        let mut l = Link::new(p);
        let fates: Vec<_> = (0..2000).flat_map(|i| l.send(&mut rng, Instant(i), 100, 20)).collect();
        let lost = fates.iter().filter(|f| f.arrive.is_none()).count();
        let flipped = fates.iter().filter(|f| f.flip_bit.is_some()).count();
        assert!(fates.len() > 2400 && fates.len() < 2800, "{}", fates.len());
        assert!(lost > 600 && lost < 900, "{lost}");
        assert!(flipped > 350 && flipped < 650, "{flipped}");
        assert!(fates.iter().all(|f| f.flip_bit.is_none_or(|b| b < 800 && !(32..40).contains(&b))));
        assert!(fates.iter().any(|f| f.flip_bit.is_some_and(|b| b >= 792)));
    }
}
