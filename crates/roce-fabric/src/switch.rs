//! A switch's memory management unit: one shared buffer, accounted per
//! ingress (port, priority), as the HPCC artifact's MMU and Broadcom-style
//! switches do (MODEL-NOTES §5).
//!
//! * Each ingress (port, priority) first fills its `reserve`; beyond it,
//!   bytes come from the shared pool while the queue's shared use stays
//!   under the PFC threshold, and from the port's headroom after that.
//! * Dynamic threshold (Choudhury-Hahne): `(B - total headroom - total
//!   reserve - shared used) >> shift`, i.e. alpha x free shared buffer,
//!   alpha = 2^-shift per port (one step larger per doubling of rate).
//! * XOFF when a lossless queue has spilled into headroom or its shared
//!   use reached the threshold; XON when its headroom is empty and its
//!   shared use is `resume_offset` under the threshold (or zero); with a
//!   static threshold, at `xoff` and `xon` bytes.
//! * A frame is dropped only where a lossless queue's headroom is full
//!   too, or where a lossy queue's shared use would pass the threshold.
//! * Headroom per port: `headroom_rtts x rate x one-way delay` (HPCC: 3)
//!   plus the rule of `headroom_extra` for its rate (the IEEE terms
//!   beyond the cable a PFC plan adds), at least one largest frame.

use crate::scenario::{dynamic_shift, PfcThreshold, SwitchConfig, Time, PRIORITIES};

pub struct Mmu {
    nports: usize,
    buffer: u64,
    reserve: u64,
    headroom: Vec<u64>,
    shift: Vec<u32>,
    total_hdrm: u64,
    total_rsrv: u64,
    ingress: Vec<[u64; PRIORITIES]>,
    hdrm: Vec<[u64; PRIORITIES]>,
    shared_used: u64,
    paused: Vec<u8>,
    /// Per port: the most headroom bytes one priority held, and the frames
    /// refused for want of buffer (for the report).
    hdrm_peak: Vec<u64>,
    refused: Vec<u64>,
    pfc: PfcThreshold,
    /// Per egress port: (Kmin, Kmax, Pmax) of the ECN rule for its rate.
    pub ecn: Vec<(u64, u64, f64)>,
}

impl Mmu {
    /// `ports`: (rate, one-way delay) of each port; `max_frame`: the
    /// largest frame's wire bytes.
    pub fn new(cfg: &SwitchConfig, ports: &[(u64, Time)], max_frame: u64) -> Mmu {
        let n = ports.len();
        let headroom: Vec<u64> =
            ports.iter().map(|&(rate, delay)| cfg.headroom_bytes(rate, delay, max_frame)).collect();
        let shift = ports
            .iter()
            .map(|&(rate, _)| match cfg.pfc {
                PfcThreshold::Dynamic { base_shift, base_rate_bps, .. } => {
                    dynamic_shift(base_shift, base_rate_bps, rate)
                }
                PfcThreshold::Static { .. } => 0,
            })
            .collect();
        let ecn = ports
            .iter()
            .map(|&(rate, _)| {
                let rule = cfg
                    .ecn
                    .iter()
                    .filter(|r| r.rate_bps >= rate)
                    .min_by_key(|r| r.rate_bps)
                    .or(cfg.ecn.last());
                match rule {
                    Some(r) => (r.kmin, r.kmax.max(r.kmin + 1), r.pmax),
                    None => (u64::MAX - 1, u64::MAX, 0.0),
                }
            })
            .collect();
        Mmu {
            nports: n,
            buffer: cfg.buffer_bytes,
            reserve: cfg.reserve_bytes,
            total_hdrm: headroom.iter().sum(),
            total_rsrv: cfg.reserve_bytes * n as u64,
            headroom,
            shift,
            ingress: vec![[0; PRIORITIES]; n],
            hdrm: vec![[0; PRIORITIES]; n],
            shared_used: 0,
            paused: vec![0; n],
            hdrm_peak: vec![0; n],
            refused: vec![0; n],
            pfc: cfg.pfc,
            ecn,
        }
    }

    /// The XOFF threshold of ingress port `p`'s queues (shared bytes).
    pub fn threshold(&self, p: usize) -> u64 {
        match self.pfc {
            PfcThreshold::Dynamic { .. } => {
                let free = self.buffer.saturating_sub(self.total_hdrm + self.total_rsrv + self.shared_used);
                free >> self.shift[p]
            }
            PfcThreshold::Static { xoff, .. } => xoff,
        }
    }

    fn shared(&self, p: usize, q: usize) -> u64 {
        self.ingress[p][q].saturating_sub(self.reserve)
    }

    /// Whether a frame of `size` bytes from ingress (p, q) may enter.
    pub fn admit(&self, p: usize, q: u8, size: u64, lossless: bool) -> bool {
        let q = q as usize;
        let over_threshold =
            size + self.shared(p, q) > self.threshold(p) && self.ingress[p][q] + size > self.reserve;
        if lossless {
            !(over_threshold && size + self.hdrm[p][q] > self.headroom[p])
        } else {
            !over_threshold
        }
    }

    /// Accounts an admitted frame from ingress `p`. (Which egress queue
    /// holds it, the deadlock detector asks the queues: a per-(ingress,
    /// egress) count here cost a cache miss at every hop.)
    pub fn charge(&mut self, p: usize, q: u8, size: u64) {
        let qi = q as usize;
        let new = self.ingress[p][qi] + size;
        if new <= self.reserve {
            self.ingress[p][qi] = new;
        } else if new - self.reserve > self.threshold(p) {
            self.hdrm[p][qi] += size;
            self.hdrm_peak[p] = self.hdrm_peak[p].max(self.hdrm[p][qi]);
        } else {
            self.ingress[p][qi] = new;
            self.shared_used += size.min(new - self.reserve);
        }
    }

    /// Releases a frame charged by [`Mmu::charge`].
    pub fn discharge(&mut self, p: usize, q: u8, size: u64) {
        let qi = q as usize;
        let from_hdrm = self.hdrm[p][qi].min(size);
        let rest = size - from_hdrm;
        let from_shared = rest.min(self.shared(p, qi));
        self.hdrm[p][qi] -= from_hdrm;
        self.ingress[p][qi] -= rest;
        self.shared_used -= from_shared;
    }

    pub fn is_paused(&self, p: usize, q: u8) -> bool {
        self.paused[p] & (1 << q) != 0
    }

    pub fn set_paused(&mut self, p: usize, q: u8, on: bool) {
        if on {
            self.paused[p] |= 1 << q;
        } else {
            self.paused[p] &= !(1 << q);
        }
    }

    /// Whether ingress (p, q) must pause its peer now.
    pub fn should_pause(&self, p: usize, q: u8) -> bool {
        let qi = q as usize;
        !self.is_paused(p, q) && (self.hdrm[p][qi] > 0 || self.shared(p, qi) >= self.threshold(p))
    }

    /// Whether a paused ingress (p, q) may let its peer resume.
    pub fn should_resume(&self, p: usize, q: u8) -> bool {
        let qi = q as usize;
        if !self.is_paused(p, q) || self.hdrm[p][qi] > 0 {
            return false;
        }
        let shared = self.shared(p, qi);
        match self.pfc {
            PfcThreshold::Dynamic { resume_offset, .. } => {
                shared == 0 || shared + resume_offset <= self.threshold(p)
            }
            PfcThreshold::Static { xon, .. } => shared <= xon,
        }
    }

    pub fn nports(&self) -> usize {
        self.nports
    }

    /// Counts a frame from ingress `p` that [`Mmu::admit`] refused.
    pub fn refuse(&mut self, p: usize) {
        self.refused[p] += 1;
    }

    /// Per port: (headroom, the most of it one priority held, frames
    /// refused).
    pub fn headroom_use(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        (0..self.nports).map(|p| (self.headroom[p], self.hdrm_peak[p], self.refused[p]))
    }

    /// Bytes of the shared pool in use.
    #[cfg(test)]
    pub fn shared_used(&self) -> u64 {
        self.shared_used
    }

    /// Headroom bytes of port `p`.
    #[cfg(test)]
    pub fn headroom(&self, p: usize) -> u64 {
        self.headroom[p]
    }

    /// Bytes held for ingress (p, q): (reserve + shared, headroom).
    #[cfg(test)]
    pub fn ingress_bytes(&self, p: usize, q: usize) -> (u64, u64) {
        (self.ingress[p][q], self.hdrm[p][q])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::PS_PER_US;

    /// N equal queues filling under a dynamic threshold each pause at
    /// alpha B' / (1 + N alpha), B' the buffer less headroom and reserve
    /// (Choudhury-Hahne; MODEL-NOTES theory table).
    #[test]
    fn dynamic_threshold_steady_state() {
        let cfg = SwitchConfig::hpcc();
        for n in [1usize, 2, 8, 32] {
            let ports = vec![(100_000_000_000u64, PS_PER_US); n + 1];
            let mut mmu = Mmu::new(&cfg, &ports, 1100);
            let frame = 1000u64;
            let mut paused = 0;
            while paused < n {
                for p in 0..n {
                    if mmu.is_paused(p, 3) {
                        continue;
                    }
                    assert!(mmu.admit(p, 3, frame, true));
                    mmu.charge(p, 3, frame);
                    if mmu.should_pause(p, 3) {
                        mmu.set_paused(p, 3, true);
                        paused += 1;
                    }
                }
            }
            let b = cfg.buffer_bytes as f64 - (mmu.total_hdrm + mmu.total_rsrv) as f64;
            let alpha = 1.0 / 8.0;
            let theory = alpha * b / (1.0 + n as f64 * alpha);
            for p in 0..n {
                let shared = mmu.shared(p, 3) as f64;
                assert!(
                    (shared - theory).abs() <= 2.0 * frame as f64,
                    "N={n} port {p}: {shared} vs {theory}"
                );
            }
            // The threshold the last of them saw is the same fixed point.
            assert!((mmu.threshold(0) as f64 - theory).abs() <= 2.0 * frame as f64);
        }
    }

    /// A port's headroom is the cable's share plus its rate's rule; ports
    /// of a rate without a rule of their own take the nearest above.
    #[test]
    fn headroom_adds_the_rule_of_the_ports_rate() {
        use crate::scenario::HeadroomRule;
        let mut cfg = SwitchConfig::hpcc();
        cfg.headroom_rtts = 2.0;
        cfg.headroom_extra = vec![
            HeadroomRule { rate_bps: 100_000_000_000, extra_bytes: 10_000 },
            HeadroomRule { rate_bps: 400_000_000_000, extra_bytes: 20_000 },
        ];
        let ports = [
            (100_000_000_000u64, PS_PER_US),
            (400_000_000_000, PS_PER_US),
            (25_000_000_000, PS_PER_US),
            (800_000_000_000, 0),
        ];
        let mmu = Mmu::new(&cfg, &ports, 1100);
        assert_eq!(mmu.headroom(0), 25_000 + 10_000);
        assert_eq!(mmu.headroom(1), 100_000 + 20_000);
        assert_eq!(mmu.headroom(2), 6_250 + 10_000);
        assert_eq!(mmu.headroom(3), 20_000, "the last rule above every rate");
        cfg.headroom_extra.clear();
        assert_eq!(Mmu::new(&cfg, &ports, 1100).headroom(3), 1100, "at least one frame");
    }

    /// Frames past the threshold go to headroom; past the headroom they
    /// are refused; releasing everything returns the buffer to empty.
    #[test]
    fn headroom_then_drop_then_release() {
        let mut cfg = SwitchConfig::hpcc();
        cfg.pfc = PfcThreshold::Static { xoff: 10_000, xon: 5_000 };
        let ports = vec![(100_000_000_000u64, PS_PER_US); 2];
        let mut mmu = Mmu::new(&cfg, &ports, 1100);
        let headroom = mmu.headroom(0);
        assert_eq!(headroom, 37_500, "3 x 100G x 1 us");
        let mut charged = 0;
        while mmu.admit(0, 3, 1000, true) {
            mmu.charge(0, 3, 1000);
            charged += 1000;
        }
        let (ingress, hdrm) = mmu.ingress_bytes(0, 3);
        assert!(hdrm > headroom - 1000 && hdrm <= headroom);
        assert_eq!(charged, ingress + hdrm);
        // Shared use stops at the XOFF threshold (the frame that would
        // pass it goes to headroom).
        assert!(ingress - cfg.reserve_bytes > 9_000 && ingress - cfg.reserve_bytes <= 10_000);
        assert!(mmu.should_pause(0, 3));
        mmu.set_paused(0, 3, true);
        for _ in 0..charged / 1000 {
            mmu.discharge(0, 3, 1000);
        }
        assert_eq!(mmu.ingress_bytes(0, 3), (0, 0));
        assert_eq!(mmu.shared_used(), 0);
        assert!(mmu.should_resume(0, 3));
    }
}
