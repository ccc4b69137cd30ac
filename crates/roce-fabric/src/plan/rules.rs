//! The published rules a plan applies, each scaled to the link speed, and
//! the check that ECN marks before PFC pauses.
//!
//! - ECN (switch egress, RED on the queue's bytes, DCQCN's congestion
//!   point): Kmin = 100 KB x rate / 25 Gb/s, Kmax = 400 KB x rate / 25
//!   Gb/s, Pmax = 0.2 — the HPCC artifact's `run.py` for DCQCN (400 KB /
//!   1,600 KB at 100 Gb/s, 1.6 MB / 6.4 MB at 400 Gb/s), which scales the
//!   DCQCN paper's shape (a ramp from Kmin to Kmax, SIGCOMM'15 §3) with
//!   the link's bandwidth-delay product. MODEL-NOTES §4.
//! - DCQCN at the NIC: by default the HPCC artifact's set (`hpcc`: its
//!   model of the NVIDIA firmware's DCQCN with `run.py`'s values — g =
//!   1/256, alpha updated every 1 us, at most one cut per 4 us,
//!   rate-increase timer 300 us, F = 1, minimum rate 1 Gb/s), the set our
//!   fat-tree runs match the artifact's slowdowns with; or the NVIDIA
//!   ConnectX firmware defaults (`nvidia`: g = 5/1024, a CNP per 4 us per
//!   QP, a 32,767-byte counter, minimum rate 1 Mb/s) or the paper's. In
//!   each, the additive and hyper-additive steps are the firmware's R_AI =
//!   5 Mb/s and R_HAI = 50 Mb/s scaled by rate / 25 Gb/s, as `run.py`
//!   scales them (20 / 200 Mb/s at 100 Gb/s). MODEL-NOTES §2, §3.
//! - Shared buffer: a dynamic (Choudhury-Hahne) threshold, alpha = 1/8
//!   (shift 3) at the NIC rate and doubled per doubling of a port's rate
//!   (1/2 at 400 Gb/s over 100 Gb/s NICs) — the HPCC artifact's MMU
//!   (`switch-mmu.cc`), MODEL-NOTES §5. XON 3 largest frames below the
//!   threshold: HPCC resumes 3 KB below it with 1 KB packets; we keep
//!   the three frames at other MTUs.
//! - ECN before PFC (the DCQCN paper's buffer guidance, SIGCOMM'15 §5):
//!   the egress queue must reach Kmax before any ingress queue feeding it
//!   pauses. With k ingress ports of one rate just enough to overload an
//!   egress (k = floor(egress rate / ingress rate) + 1), each holds Kmax
//!   / k when the egress holds Kmax, and pauses at its dynamic threshold
//!   alpha B' / (1 + k alpha) (B' the shared pool): so Kmax / k must stay
//!   below it, or the plan lowers Kmax (to 90 % of the bound, Kmin to a
//!   quarter of that, the rule's ratio) and says so.

use crate::scenario::{dynamic_shift, EcnRule};

const RATE_25G: u64 = 25_000_000_000;
/// HPCC `run.py`'s ECN at 25 Gb/s.
pub const KMIN_AT_25G: u64 = 100_000;
pub const KMAX_AT_25G: u64 = 400_000;
pub const PMAX: f64 = 0.2;
/// NVIDIA firmware's `RPG_AI_RATE` / `RPG_HAI_RATE` (b/s), scaled from 25G.
pub const AI_AT_25G: u64 = 5_000_000;
pub const HAI_AT_25G: u64 = 50_000_000;
/// The DCQCN parameter set a plan starts from by default.
pub const DCQCN_SET: &str = "hpcc";
/// Dynamic threshold: shift at the NIC rate (alpha 1/8).
pub const BASE_SHIFT: u32 = 3;
/// XON this many largest frames below the XOFF threshold.
pub const XON_FRAMES: u64 = 3;
/// A lowered Kmax keeps this share of its bound.
pub const KMAX_MARGIN: f64 = 0.9;

/// The ECN rule for ports of `rate_bps`.
pub fn ecn_rule(rate_bps: u64) -> EcnRule {
    let scale = |at_25g: u64| (u128::from(at_25g) * u128::from(rate_bps) / u128::from(RATE_25G)) as u64;
    EcnRule { rate_bps, kmin: scale(KMIN_AT_25G), kmax: scale(KMAX_AT_25G), pmax: PMAX }
}

/// DCQCN overrides of [`DCQCN_SET`] for NICs of `nic_rate_bps`.
pub fn dcqcn_params(nic_rate_bps: u64) -> Vec<String> {
    let scale = |at_25g: u64| (u128::from(at_25g) * u128::from(nic_rate_bps) / u128::from(RATE_25G)) as u64;
    vec![format!("ai_rate_bps={}", scale(AI_AT_25G)), format!("hai_rate_bps={}", scale(HAI_AT_25G))]
}

/// Alpha of a port of `rate_bps` with NICs of `nic_rate_bps`.
pub fn alpha(nic_rate_bps: u64, rate_bps: u64) -> f64 {
    1.0 / f64::from(1u32 << dynamic_shift(BASE_SHIFT, nic_rate_bps, rate_bps))
}

/// The dynamic XOFF threshold of each of `k` equally filled ingress
/// queues of alpha `a` over a shared pool of `pool` bytes: `a B' / (1 +
/// k a)` (Choudhury-Hahne's fixed point).
pub fn xoff_at(a: f64, k: u64, pool: u64) -> u64 {
    (a * pool as f64 / (1.0 + k as f64 * a)) as u64
}

/// ECN before PFC for an egress of `egress_bps` fed by ingress ports of
/// `ingress_bps` with alpha `a`, `available` of them: the largest Kmax
/// allowed, or `None` when that ingress class cannot overload the egress
/// alone (fewer ports than it takes).
pub fn kmax_bound(
    egress_bps: u64,
    ingress_bps: u64,
    a: f64,
    available: u64,
    pool: u64,
) -> Option<(u64, u64)> {
    let k = egress_bps / ingress_bps.max(1) + 1;
    (k <= available).then(|| (k * xoff_at(a, k, pool), k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_at_100g_and_400g_are_the_artifacts() {
        let r = ecn_rule(100_000_000_000);
        assert_eq!((r.kmin, r.kmax, r.pmax), (400_000, 1_600_000, 0.2));
        let r = ecn_rule(400_000_000_000);
        assert_eq!((r.kmin, r.kmax), (1_600_000, 6_400_000));
        assert_eq!(dcqcn_params(100_000_000_000), vec!["ai_rate_bps=20000000", "hai_rate_bps=200000000"]);
        assert_eq!(alpha(100_000_000_000, 100_000_000_000), 0.125);
        assert_eq!(alpha(100_000_000_000, 400_000_000_000), 0.5);
    }

    /// Choudhury-Hahne: alpha 1/8, 32 MB, one queue: 32/9 MB.
    #[test]
    fn the_threshold_fixed_point() {
        assert_eq!(xoff_at(0.125, 1, 32_000_000), 3_555_555);
        assert_eq!(xoff_at(0.125, 8, 32_000_000), 2_000_000);
        // A 100G egress, 100G ingress: 2 ports overload it, each may
        // hold up to 32/10 MB, so Kmax up to 6.4 MB.
        assert_eq!(kmax_bound(100_000_000_000, 100_000_000_000, 0.125, 15, 32_000_000), Some((6_400_000, 2)));
        assert_eq!(kmax_bound(400_000_000_000, 100_000_000_000, 0.125, 4, 32_000_000), None);
    }
}
