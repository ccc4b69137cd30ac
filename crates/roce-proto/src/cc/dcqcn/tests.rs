//! DCQCN's reaction point against the paper's rules, one rule a test.
//!
//! Expected values are worked out by hand from the rules in the docs
//! (alpha in units of 2^-32, so 1.0 = 4294967296; G = 10^9 bits/s):
//! decay `floor(a (1-g))`, congestion `decay + floor(g 2^32)`, cut
//! `floor(RC (2^33 - a) / 2^33)` (alpha/2), increase `RC + ceil((RT-RC)/2)`.

use super::*;

const G: u64 = 1_000_000_000;
const LINE: u64 = 100 * G;

fn us(n: u64) -> Instant {
    Instant(n * 1_000)
}

fn rp(p: DcqcnParams) -> Dcqcn {
    Dcqcn::new(p, LINE, Instant(0))
}

/// (RC, RT)
fn rates(d: &Dcqcn) -> (u64, u64) {
    (d.rate_bps(), d.target_rate_bps())
}

// ---- paper: immediate reaction, g = 1/256, K = T = 55 us, 50 us per cut,
// ---- B = 10 MB, F = 5, AI 40 Mb/s, HAI 200 Mb/s x i, clamp always.

#[test]
fn paper_one_cnp_halves_the_rate_at_once() {
    let mut d = rp(DcqcnParams::paper());
    assert_eq!((d.stage(), d.next_timer(), d.alpha_q32()), (None, None, 0));
    d.on_cnp(us(10));
    // First CNP: alpha = initial 1; RT = RC = 100G; RC = 100G (1 - 1/2).
    assert_eq!(rates(&d), (50 * G, 100 * G));
    assert_eq!(d.alpha_q32(), 1 << 32);
    assert_eq!(d.alpha(), 1.0);
    assert_eq!((d.rate_cuts(), d.cnps()), (1, 1));
    assert_eq!(d.stage(), Some(Stage::FastRecovery));
    assert!(d.is_limited());
    // The increase timer restarts at the cut: 10 + 55 us.
    assert_eq!(d.next_timer(), Some(us(65)));
}

#[test]
fn paper_cnps_inside_one_decrease_period_cut_once() {
    let mut d = rp(DcqcnParams::paper());
    for t in [Instant(0), us(10), us(20), Instant(49_999)] {
        d.on_cnp(t);
    }
    // Only the CNP at 0 cut; the others updated alpha: (1-g) 1 + g = 1
    // exactly (2^32 - 2^24 + 2^24), and did not restart the increase timer.
    assert_eq!((d.rate_cuts(), d.cnps()), (1, 4));
    assert_eq!(rates(&d), (50 * G, 100 * G));
    assert_eq!(d.alpha_q32(), 1 << 32);
    assert_eq!(d.next_timer(), Some(us(55)));
    // 50 us after the cut another one may come: RT = 50G, RC = 25G.
    d.on_cnp(us(50));
    assert_eq!(d.rate_cuts(), 2);
    assert_eq!(rates(&d), (25 * G, 50 * G));
    assert_eq!(d.next_timer(), Some(us(105)));
}

#[test]
fn paper_cnps_across_decrease_periods_cut_each_time() {
    let mut d = rp(DcqcnParams::paper());
    d.on_cnp(Instant(0));
    assert_eq!(rates(&d), (50 * G, 100 * G));
    // 55 us without CNP: alpha tick, 2^32 x 255/256 = 4278190080; and the
    // first fast-recovery event: 50G + 50G/2 = 75G.
    d.on_timer(us(55));
    assert_eq!(d.alpha_q32(), 4_278_190_080);
    assert_eq!(rates(&d), (75 * G, 100 * G));
    // CNP at 60 us: RT = 75G; RC = 75G x (1 - (255/256)/2) = 75G x 257/512
    // = 37646484375; alpha = 4278190080 x 255/256 + 2^24
    // = 4261478400 + 16777216 = 4278255616.
    d.on_cnp(us(60));
    assert_eq!(rates(&d), (37_646_484_375, 75 * G));
    assert_eq!(d.alpha_q32(), 4_278_255_616);
    // 115 us: alpha = 4278255616 / 256 x 255 = 4261543680; RC = 37646484375
    // + ceil(37353515625 / 2) = 56323242188.
    d.on_timer(us(115));
    assert_eq!(d.alpha_q32(), 4_261_543_680);
    assert_eq!(rates(&d), (56_323_242_188, 75 * G));
    // CNP at 120 us: RT = 56323242188; RC = floor(56323242188 x
    // (2^33 - 4261543680) / 2^33) = floor(56323242188 x 4328390912 /
    // 8589934592) = 28380776012; alpha = 4261543680 / 256 x 255 + 2^24
    // = 4244897025 + 16777216 = 4261674241.
    d.on_cnp(us(120));
    assert_eq!(rates(&d), (28_380_776_012, 56_323_242_188));
    assert_eq!(d.alpha_q32(), 4_261_674_241);
    assert_eq!(d.rate_cuts(), 3);
}

/// RC 25G, RT 50G, alpha 1: CNPs at 0 and 50 us.
fn paper_after_two_cuts() -> Dcqcn {
    let mut d = rp(DcqcnParams::paper());
    d.on_cnp(Instant(0));
    d.on_cnp(us(50));
    assert_eq!(rates(&d), (25 * G, 50 * G));
    d
}

#[test]
fn paper_recovery_goes_fast_then_additive_then_hyper() {
    let mut d = paper_after_two_cuts();
    // Every 55 us a timer event, then 10 MB sent (one byte-counter
    // event): T, B, T, B... Counts (TC, BC) before each event; F = 5.
    // Events 1-9 (max < 5): RC halves its distance to 50G: 25G gap ->
    //   37.5, 43.75, 46.875, 48.4375, 49.21875, 49.609375, 49.8046875,
    //   49.90234375, 49.951171875 G.
    // Event 10 (B, TC 5, BC 4): additive: RT = 50.04G, RC = 49951171875
    //   + ceil(88828125 / 2) = 49995585938.
    // Event 11 (T, 5, 5): hyper i = 1: RT = 50.24G, RC = 49995585938
    //   + ceil(244414062 / 2) = 50117792969.
    // Event 12 (B, 6, 5): i = 1: RT 50.44G, RC + ceil(322207031/2) = 50278896485.
    // Event 13 (T, 6, 6): i = 2: RT 50.84G, RC + ceil(561103515/2) = 50559448243.
    // Event 14 (B, 7, 6): i = 2: RT 51.24G, RC = 50899724122.
    // Event 15 (T, 7, 7): i = 3: RT 51.84G, RC = 51369862061.
    // Event 16 (B, 8, 7): i = 3: RT 52.44G, RC = 51904931031.
    use Stage::*;
    let expected: [(Stage, u64, u64); 16] = [
        (FastRecovery, 37_500_000_000, 50 * G),
        (FastRecovery, 43_750_000_000, 50 * G),
        (FastRecovery, 46_875_000_000, 50 * G),
        (FastRecovery, 48_437_500_000, 50 * G),
        (FastRecovery, 49_218_750_000, 50 * G),
        (FastRecovery, 49_609_375_000, 50 * G),
        (FastRecovery, 49_804_687_500, 50 * G),
        (FastRecovery, 49_902_343_750, 50 * G),
        (FastRecovery, 49_951_171_875, 50 * G),
        (AdditiveIncrease, 49_995_585_938, 50_040_000_000),
        (HyperIncrease, 50_117_792_969, 50_240_000_000),
        (HyperIncrease, 50_278_896_485, 50_440_000_000),
        (HyperIncrease, 50_559_448_243, 50_840_000_000),
        (HyperIncrease, 50_899_724_122, 51_240_000_000),
        (HyperIncrease, 51_369_862_061, 51_840_000_000),
        (HyperIncrease, 51_904_931_031, 52_440_000_000),
    ];
    let mut got = Vec::new();
    let mut t = us(50);
    for k in 0..8 {
        t = d.next_timer().unwrap();
        assert_eq!(t, us(50 + 55 * (k + 1)));
        let stage = d.stage().unwrap();
        d.on_timer(t);
        got.push((stage, d.rate_bps(), d.target_rate_bps()));
        let stage = d.stage().unwrap();
        d.on_bytes_sent(10_000_000, t);
        got.push((stage, d.rate_bps(), d.target_rate_bps()));
    }
    assert_eq!(got, expected);
    // Going on the same way, RT reaches 100G with the 21st pair and RC
    // after the timer event of the 37th pair, at 50 + 37 x 55 = 2085 us;
    // then nothing is left to do.
    while let Some(next) = d.next_timer() {
        t = next;
        d.on_timer(t);
        d.on_bytes_sent(10_000_000, t);
    }
    assert_eq!(t, us(2_085));
    assert_eq!(rates(&d), (LINE, LINE));
    assert!(!d.is_limited());
    assert_eq!(d.rate_cuts(), 2);
}

#[test]
fn paper_timer_alone_stays_additive() {
    let mut d = paper_after_two_cuts();
    // Five fast-recovery events (105 .. 325 us), then additive increase:
    // RT = 50.04G, RC = 49218750000 + ceil(821250000/2) = 49629375000;
    // RT = 50.08G, RC = 49629375000 + ceil(450625000/2) = 49854687500.
    let mut got = Vec::new();
    for k in 1..=7 {
        d.on_timer(us(50 + 55 * k));
        got.push(rates(&d));
    }
    assert_eq!(
        got,
        [
            (37_500_000_000, 50 * G),
            (43_750_000_000, 50 * G),
            (46_875_000_000, 50 * G),
            (48_437_500_000, 50 * G),
            (49_218_750_000, 50 * G),
            (49_629_375_000, 50_040_000_000),
            (49_854_687_500, 50_080_000_000),
        ]
    );
    // Without bytes BC stays 0 < F: never hyper, RT + 40 Mb/s per event.
    d.on_timer(us(50 + 55 * 100));
    assert_eq!(d.stage(), Some(Stage::AdditiveIncrease));
    assert_eq!(d.increase_events(), (100, 0));
    // 95 additive events: 50G + 95 x 40M.
    assert_eq!(d.target_rate_bps(), 53_800_000_000);
}

#[test]
fn paper_byte_counter_drives_the_same_steps_as_the_timer() {
    let mut d = paper_after_two_cuts();
    let mut got = Vec::new();
    // Bytes only, all before the first timer event at 105 us.
    for k in 1..=7 {
        d.on_bytes_sent(9_999_999, us(50 + k));
        assert_eq!(d.increase_events(), (0, k as u32 - 1));
        d.on_bytes_sent(1, us(50 + k));
        got.push(rates(&d));
    }
    // The same numbers as the timer-driven test: 5 x fast recovery, then
    // additive (the timer counter is 0 < F, so no hyper).
    assert_eq!(
        got,
        [
            (37_500_000_000, 50 * G),
            (43_750_000_000, 50 * G),
            (46_875_000_000, 50 * G),
            (48_437_500_000, 50 * G),
            (49_218_750_000, 50 * G),
            (49_629_375_000, 50_040_000_000),
            (49_854_687_500, 50_080_000_000),
        ]
    );
    assert_eq!(d.increase_events(), (0, 7));
    // 25 MB at once: two events (and 5 MB carried): additive both times,
    // RT 50.12G then 50.16G.
    d.on_bytes_sent(25_000_000, us(60));
    assert_eq!(d.increase_events(), (0, 9));
    assert_eq!(d.target_rate_bps(), 50_160_000_000);
    d.on_bytes_sent(5_000_000, us(61));
    assert_eq!(d.increase_events(), (0, 10));
    // A cut resets the counter and the carried bytes.
    d.on_cnp(us(101));
    d.on_bytes_sent(9_999_999, us(102));
    assert_eq!(d.increase_events(), (0, 0));
    // No byte counting before the first cut.
    let mut fresh = rp(DcqcnParams::paper());
    fresh.on_bytes_sent(100_000_000, us(1));
    fresh.on_cnp(us(2));
    fresh.on_bytes_sent(1, us(3));
    assert_eq!(fresh.increase_events(), (0, 0));
}

#[test]
fn paper_rate_floor_is_100_mbps() {
    let mut d = rp(DcqcnParams::paper());
    // A CNP every 50 us keeps alpha at 1 (its timer is 55 us), so each
    // cut halves: 100G / 2^9 = 195312500 after nine, and the tenth would
    // give 97656250 < 100 Mb/s.
    for k in 0..9 {
        d.on_cnp(us(50 * k));
    }
    assert_eq!(rates(&d), (195_312_500, 390_625_000));
    d.on_cnp(us(450));
    assert_eq!(rates(&d), (100_000_000, 195_312_500));
    d.on_cnp(us(500));
    assert_eq!(rates(&d), (100_000_000, 100_000_000));
    assert_eq!(d.rate_cuts(), 11);
}

#[test]
fn paper_alpha_decays_without_cnps() {
    let mut d = rp(DcqcnParams::paper());
    d.on_cnp(Instant(0));
    // Ticks at 55, 110, 165, 220 us: 2^32 (255/256)^4 = 255^4 = 4228250625.
    d.on_timer(us(219));
    assert_eq!(d.alpha_q32(), 4_244_832_000); // three ticks: 2^8 x 255^3
    d.on_timer(us(220));
    assert_eq!(d.alpha_q32(), 4_228_250_625);
    // A CNP restarts the alpha timer: the next tick is 55 us after it.
    d.on_cnp(us(250));
    // 4228250625 x 255/256 = 4211734020.996 -> 4211734020, + 2^24 = 4228511236.
    assert_eq!(d.alpha_q32(), 4_228_511_236);
    d.on_timer(us(304));
    assert_eq!(d.alpha_q32(), 4_228_511_236);
    d.on_timer(us(305));
    // floor(4228511236 x 255/256) = 4211993613
    assert_eq!(d.alpha_q32(), 4_211_993_613);
    // After a second, truncation has taken alpha to exactly 0 (it needs
    // fewer than 256 ln(2^32) + 256 < 6000 ticks of 55 us).
    d.on_timer(Instant(1_000_000_000));
    assert_eq!(d.alpha_q32(), 0);
}

// ---- nvidia: periodic reaction, g = 5/1024, alpha tick 1 us, a cut per
// ---- 4 us tick, T = 300 us, B = 32767 B, F = 1, AI 5 Mb/s, HAI 50 Mb/s,
// ---- initial alpha 1023/1024, clamp only after a timer increase.

// alpha from the first CNP: a0 = 1023 x 2^22 = 4290772992, then per tick
// without CNP x 1019/1024: a1 = 1023 x 1019 x 2^12 = 4269821952,
// a2 = 1023 x 1019^2 x 4 = 4248973212, a3 = floor(1023 x 1019^3 / 256)
// = 4228226272, a4 = floor(a3 x 1019/1024) = 4207580635.
const NV_A4: u64 = 4_207_580_635;
// The cut at the first tick: floor(100G x (2^33 - a4) / 2^33)
// = floor(100G x 4382353957 / 8589934592) = 51017314626.
const NV_RC1: u64 = 51_017_314_626;

#[test]
fn nvidia_one_cnp_cuts_at_the_next_monitor_tick() {
    let mut d = rp(DcqcnParams::nvidia());
    d.on_cnp(us(10));
    // Nothing cut yet: the decrease tick is 4 us after the first CNP.
    assert_eq!(rates(&d), (LINE, LINE));
    assert_eq!(d.alpha_q32(), 4_290_772_992);
    assert_eq!((d.rate_cuts(), d.stage()), (0, None));
    assert_eq!(d.next_timer(), Some(us(14)));
    let mut alphas = Vec::new();
    for t in 11..=13 {
        d.on_timer(us(t));
        alphas.push(d.alpha_q32());
    }
    assert_eq!(alphas, [4_269_821_952, 4_248_973_212, 4_228_226_272]);
    assert_eq!(d.rate_cuts(), 0);
    d.on_timer(us(14));
    assert_eq!(d.alpha_q32(), NV_A4);
    // No clamp (no timer increase yet): RT stays 100G.
    assert_eq!(rates(&d), (NV_RC1, LINE));
    assert_eq!(d.rate_cuts(), 1);
    assert_eq!(d.stage(), Some(Stage::FastRecovery));
    assert_eq!(d.next_timer(), Some(us(314)));
}

#[test]
fn nvidia_cnp_burst_in_one_period_cuts_once() {
    let mut d = rp(DcqcnParams::nvidia());
    for t in [us(10), Instant(11_500), Instant(12_500), Instant(13_900)] {
        d.on_cnp(t);
    }
    d.on_timer(us(14));
    // Tick 11: a1 = 4269821952. Ticks 12, 13, 14 each saw a CNP:
    // floor(a x 1019/1024) + 5 x 2^22 (= 20971520):
    //   4248973212 + 20971520 = 4269944732,
    //   floor(4269944732 x 1019/1024) = 4249095392, + .. = 4270066912,
    //   floor(4270066912 x 1019/1024) = 4249216975, + .. = 4270188495.
    assert_eq!(d.alpha_q32(), 4_270_188_495);
    // One cut: floor(100G x (2^33 - 4270188495) / 2^33) = 50288463209.
    assert_eq!(rates(&d), (50_288_463_209, LINE));
    assert_eq!((d.rate_cuts(), d.cnps()), (1, 4));
    // Nothing pending: the next event is the increase timer.
    assert_eq!(d.next_timer(), Some(us(314)));
    // A CNP at exactly a tick counts for the next tick.
    d.on_cnp(us(18));
    assert_eq!(d.next_timer(), Some(us(22)));
}

#[test]
fn nvidia_cnps_across_periods_cut_each_period() {
    let mut d = rp(DcqcnParams::nvidia());
    d.on_cnp(us(10));
    d.on_timer(us(14));
    assert_eq!((d.alpha_q32(), d.rate_bps()), (NV_A4, NV_RC1));
    // Tick 15 decays; the CNP at 15 us comes after it, so tick 16 is the
    // congested one; 17, 18 decay:
    //   floor(4207580635 x 1019/1024) = 4187035807
    //   floor(4187035807 x 1019/1024) + 20971520 = 4187562816
    //   -> 4167115731 -> 4146768486.
    // Cut at 18: floor(51017314626 x (2^33 - 4146768486) / 2^33) = 26388839255.
    d.on_cnp(us(15));
    d.on_timer(us(18));
    assert_eq!((d.alpha_q32(), d.rate_bps()), (4_146_768_486, 26_388_839_255));
    // Same pattern from 19 to 22: 4087135404, cut to 13832892753.
    d.on_cnp(us(19));
    d.on_timer(us(22));
    assert_eq!((d.alpha_q32(), d.rate_bps()), (4_087_135_404, 13_832_892_753));
    // Never clamped (no timer increase): RT is still the line rate.
    assert_eq!((d.target_rate_bps(), d.rate_cuts()), (LINE, 3));
    assert_eq!(d.next_timer(), Some(us(322)));
}

#[test]
fn nvidia_clamps_the_target_only_after_a_timer_increase() {
    // Byte-counter increase, then a CNP: RT is not touched.
    let mut d = rp(DcqcnParams::nvidia());
    d.on_cnp(us(10));
    d.on_bytes_sent(32_767, us(15));
    // Fast recovery: 51017314626 + ceil(48982685374 / 2) = 75508657313.
    assert_eq!(rates(&d), (75_508_657_313, LINE));
    assert_eq!(d.increase_events(), (0, 1));
    d.on_cnp(us(16));
    d.on_timer(us(18));
    // alpha: a4, ticks 15, 16 decay, 17 congested, 18 decays = 4146870386;
    // cut: floor(75508657313 x (2^33 - 4146870386) / 2^33) = 39056154497.
    assert_eq!(d.alpha_q32(), 4_146_870_386);
    assert_eq!(rates(&d), (39_056_154_497, LINE));

    // Timer increase, then a CNP: RT = RC first.
    let d = nvidia_after_clamped_cut();
    assert_eq!(d.rate_cuts(), 2);
    assert_eq!(d.increase_events(), (0, 0));
}

/// CNP at 10 us (cut at 14), fast recovery at 314 us, CNP at 315 us, cut
/// at 318 us with the clamp.
fn nvidia_after_clamped_cut() -> Dcqcn {
    let mut d = rp(DcqcnParams::nvidia());
    d.on_cnp(us(10));
    assert_eq!(d.next_timer(), Some(us(14)));
    d.on_timer(us(14));
    assert_eq!(d.next_timer(), Some(us(314)));
    d.on_timer(us(314));
    assert_eq!(rates(&d), (75_508_657_313, LINE));
    d.on_cnp(us(315));
    assert_eq!(d.next_timer(), Some(us(318)));
    d.on_timer(us(318));
    // alpha: a4 decayed by ticks 15..=315 (301 of them), congested at
    // 316, decayed at 317 and 318: 970928944 (iterating the floor rule).
    // Cut: floor(75508657313 x (2^33 - 970928944) / 2^33) = 66973837853.
    assert_eq!(d.alpha_q32(), 970_928_944);
    assert_eq!(rates(&d), (66_973_837_853, 75_508_657_313));
    d
}

#[test]
fn nvidia_increase_runs_before_a_cut_due_at_the_same_tick() {
    let mut d = rp(DcqcnParams::nvidia());
    d.on_cnp(us(10));
    d.on_timer(us(14));
    // 300 us is 75 decrease periods: the increase timer (14 + 300 us)
    // falls on a decrease tick. A CNP at 313 us makes that tick cut.
    d.on_cnp(us(313));
    assert_eq!(d.next_timer(), Some(us(314)));
    d.on_timer(us(314));
    // First the fast-recovery event (RC = 75508657313, a timer increase),
    // then the cut, clamped because of it: RT = 75508657313. alpha: a4
    // decayed by ticks 15..=313 is 973702748, congested at 314:
    // floor(973702748 x 1019/1024) + 20971520 = 989919860. RC =
    // floor(75508657313 x (2^33 - 989919860) / 2^33) = 66806900777.
    assert_eq!(d.alpha_q32(), 989_919_860);
    assert_eq!(rates(&d), (66_806_900_777, 75_508_657_313));
    assert_eq!((d.rate_cuts(), d.increase_events()), (2, (0, 0)));
    assert_eq!(d.next_timer(), Some(us(614)));
}

#[test]
fn nvidia_recovery_goes_fast_then_additive_then_hyper() {
    let mut d = nvidia_after_clamped_cut();
    // Every 300 us a timer event, then 32767 B sent: F = 1.
    // T (0,0) fast recovery: RC = 66973837853 + ceil(8534819460/2) = 71241247583.
    // B (1,0) additive: RT = 75513657313, RC + ceil(4272409730/2) = 73377452448.
    // T (1,1) hyper, constant 50 Mb/s: RT = 75563657313, RC = 74470554881.
    // B (2,1) hyper: RT = 75613657313, RC = 75042106097.
    // T (2,2) hyper: RT = 75663657313, RC = 75352881705.
    // B (3,2) hyper: RT = 75713657313, RC = 75533269509.
    use Stage::*;
    let mut got = Vec::new();
    for k in 1..=3 {
        let t = us(318 + 300 * k);
        assert_eq!(d.next_timer(), Some(t));
        let s = d.stage().unwrap();
        d.on_timer(t);
        got.push((s, d.rate_bps(), d.target_rate_bps()));
        let s = d.stage().unwrap();
        d.on_bytes_sent(32_767, t);
        got.push((s, d.rate_bps(), d.target_rate_bps()));
    }
    assert_eq!(
        got,
        [
            (FastRecovery, 71_241_247_583, 75_508_657_313),
            (AdditiveIncrease, 73_377_452_448, 75_513_657_313),
            (HyperIncrease, 74_470_554_881, 75_563_657_313),
            (HyperIncrease, 75_042_106_097, 75_613_657_313),
            (HyperIncrease, 75_352_881_705, 75_663_657_313),
            (HyperIncrease, 75_533_269_509, 75_713_657_313),
        ]
    );
    // RT gains 100 Mb/s per pair from here: line rate with the 246th pair;
    // RC follows, both at 100G after the bytes of the 259th pair
    // (318 + 259 x 300 = 78018 us).
    let mut t = us(1_218);
    while let Some(next) = d.next_timer() {
        t = next;
        d.on_timer(t);
        d.on_bytes_sent(32_767, t);
    }
    assert_eq!(t, us(78_018));
    assert_eq!(rates(&d), (LINE, LINE));
}

#[test]
fn nvidia_timer_alone_stays_additive() {
    let mut d = nvidia_after_clamped_cut();
    // BC stays 0 < F = 1, so after the fast-recovery event only additive:
    // 71241247583; RT + 5M = 75513657313, RC = 73377452448;
    // RT + 5M = 75518657313, RC = 73377452448 + ceil(2141204865/2) = 74448054881.
    let mut got = Vec::new();
    for k in 1..=3 {
        d.on_timer(us(318 + 300 * k));
        got.push(rates(&d));
    }
    assert_eq!(
        got,
        [
            (71_241_247_583, 75_508_657_313),
            (73_377_452_448, 75_513_657_313),
            (74_448_054_881, 75_518_657_313),
        ]
    );
    assert_eq!(d.stage(), Some(Stage::AdditiveIncrease));
}

#[test]
fn nvidia_byte_counter_increases_between_timer_events() {
    let mut d = rp(DcqcnParams::nvidia());
    d.on_cnp(us(10));
    d.on_timer(us(14));
    d.on_bytes_sent(32_766, us(15));
    assert_eq!((rates(&d), d.increase_events()), ((NV_RC1, LINE), (0, 0)));
    d.on_bytes_sent(1, us(15));
    // Fast recovery, then (BC 1 >= F, TC 0) additive; RT is at the line
    // rate already: 75508657313 + ceil(24491342687/2) = 87754328657.
    assert_eq!(rates(&d), (75_508_657_313, LINE));
    d.on_bytes_sent(32_767, us(16));
    assert_eq!(rates(&d), (87_754_328_657, LINE));
    assert_eq!(d.increase_events(), (0, 2));
    // The timer still comes 300 us after the cut.
    assert_eq!(d.next_timer(), Some(us(314)));
}

#[test]
fn nvidia_rate_floor_is_1_mbps() {
    let mut d = Dcqcn::new(DcqcnParams::nvidia(), 2_000_000, Instant(0));
    d.on_cnp(us(10));
    d.on_cnp(us(15));
    d.on_timer(us(14));
    // floor(2M x (2^33 - a4) / 2^33) = 1020346
    assert_eq!(d.rate_bps(), 1_020_346);
    d.on_timer(us(18));
    // floor(1020346 x (2^33 - 4146768486) / 2^33) = 527776; the 50 %
    // floor is 510173; both below 1 Mb/s.
    assert_eq!(rates(&d), (1_000_000, 2_000_000));
}

#[test]
fn nvidia_alpha_decays_without_cnps() {
    let mut d = rp(DcqcnParams::nvidia());
    d.on_cnp(us(10));
    d.on_timer(us(12));
    assert_eq!(d.alpha_q32(), 4_248_973_212);
    d.on_timer(us(14));
    assert_eq!(d.alpha_q32(), NV_A4);
    // The decay goes on while the rate recovers; by 1 s truncation has
    // reached 0 (fewer than 205 ln(2^32) + 205 < 5000 ticks of 1 us).
    d.on_timer(Instant(1_000_000_000));
    assert_eq!(d.alpha_q32(), 0);
    assert_eq!(rates(&d), (LINE, LINE));
    assert_eq!(d.next_timer(), None);
    // Timer events at 14 + 300 k us <= 1 s: k = 1..=3333.
    assert_eq!(d.increase_events(), (3333, 0));
    // A CNP now: alpha was 0, the tick after it adds g only (5 x 2^22 =
    // 20971520), the next decays it to floor(20971520 x 1019/1024) =
    // 20869120, and the cut at that instant (the grid of 4 us ticks
    // started at 10 us) is floor(100G x (2^33 - 20869120) / 2^33)
    // = 99757051467.
    d.on_cnp(Instant(1_000_000_500));
    assert_eq!(d.next_timer(), Some(Instant(1_000_002_000)));
    d.on_timer(Instant(1_000_001_000));
    assert_eq!(d.alpha_q32(), 20_971_520);
    d.on_timer(Instant(1_000_002_000));
    assert_eq!(d.alpha_q32(), 20_869_120);
    assert_eq!(rates(&d), (99_757_051_467, LINE));
    assert_eq!(d.rate_cuts(), 2);
}

// ---- hpcc: periodic reaction, g = 1/256, alpha tick 1 us, a cut per
// ---- 4 us tick, RP timer 300 us, no byte counter, F = 1, AI 20 Mb/s,
// ---- HAI 200 Mb/s, min 1000 Mb/s, alpha 1 on the first CNP.

// 4 ticks after the first CNP: 2^32 (255/256)^4 = 255^4 = 4228250625
// exactly; the first cut: floor(100G x (2^33 - 255^4) / 2^33)
// = floor(100G x 4361683967 / 8589934592) = 50776684272.
const HP_A4: u64 = 4_228_250_625;
const HP_RC1: u64 = 50_776_684_272;

#[test]
fn hpcc_one_cnp_cuts_at_the_next_tick() {
    let mut d = rp(DcqcnParams::hpcc());
    d.on_cnp(us(10));
    assert_eq!(rates(&d), (LINE, LINE));
    assert_eq!(d.alpha_q32(), 1 << 32);
    assert_eq!(d.next_timer(), Some(us(14)));
    d.on_timer(us(14));
    assert_eq!(d.alpha_q32(), HP_A4);
    assert_eq!(rates(&d), (HP_RC1, LINE));
    assert_eq!(d.rate_cuts(), 1);
    assert_eq!(d.next_timer(), Some(us(314)));
}

#[test]
fn hpcc_cnp_burst_in_one_period_cuts_once() {
    let mut d = rp(DcqcnParams::hpcc());
    for t in [us(10), Instant(11_500), Instant(12_500), Instant(13_900)] {
        d.on_cnp(t);
    }
    d.on_timer(us(14));
    // 11: 2^32 x 255/256 = 4278190080; 12: 4261478400 + 2^24 = 4278255616;
    // 13: 4261543680 + 2^24 = 4278320896; 14: floor(4278320896 x 255/256)
    // = 4261608705, + 2^24 = 4278385921.
    assert_eq!(d.alpha_q32(), 4_278_385_921);
    // floor(100G x (2^33 - 4278385921) / 2^33) = 50193032610
    assert_eq!(rates(&d), (50_193_032_610, LINE));
    assert_eq!((d.rate_cuts(), d.cnps()), (1, 4));
    // A CNP at exactly the tick at which the first cut happens waits
    // for the next tick.
    let mut e = rp(DcqcnParams::hpcc());
    e.on_cnp(us(10));
    e.on_cnp(us(14));
    assert_eq!((e.rate_cuts(), e.next_timer()), (1, Some(us(18))));
}

#[test]
fn hpcc_cnps_across_periods_cut_each_period() {
    let mut d = rp(DcqcnParams::hpcc());
    d.on_cnp(us(10));
    d.on_timer(us(14));
    assert_eq!((d.alpha_q32(), d.rate_bps()), (HP_A4, HP_RC1));
    // 15 decays: floor(255^5 / 256) = 4211734020; 16 congested:
    // 4195281933 + 2^24 = 4212059149; 17, 18 decay: 4195605792, 4179216706.
    // Cut: floor(50776684272 x (2^33 - 4179216706) / 2^33) = 26072565176.
    d.on_cnp(us(15));
    d.on_timer(us(18));
    assert_eq!((d.alpha_q32(), d.rate_bps()), (4_179_216_706, 26_072_565_176));
    // Same pattern from 19 to 22.
    d.on_cnp(us(19));
    d.on_timer(us(22));
    assert_eq!((d.alpha_q32(), d.rate_bps()), (4_130_944_466, 13_534_132_237));
    // Stage 0 at every cut: RT never clamped.
    assert_eq!((d.target_rate_bps(), d.rate_cuts()), (LINE, 3));
}

#[test]
fn hpcc_recovery_after_one_cut() {
    let mut d = rp(DcqcnParams::hpcc());
    d.on_cnp(us(10));
    d.on_timer(us(14));
    // RT stays 100G; each RP timer event halves the gap (RC + ceil(gap/2)):
    // 314 us fast recovery 75388342136, 614 additive 87694171068 (RT
    // capped at 100G), 914 hyper 93847085534.
    use Stage::*;
    let mut got = Vec::new();
    for k in 1..=3 {
        let s = d.stage().unwrap();
        d.on_timer(us(14 + 300 * k));
        got.push((s, d.rate_bps()));
    }
    assert_eq!(
        got,
        [(FastRecovery, 75_388_342_136), (AdditiveIncrease, 87_694_171_068), (HyperIncrease, 93_847_085_534)]
    );
    // The first gap, 49223315728, is below 2^36: 36 halvings take it to
    // 0, at 14 + 36 x 300 = 10814 us.
    let mut t = us(914);
    while let Some(next) = d.next_timer() {
        t = next;
        d.on_timer(t);
    }
    assert_eq!(t, us(10_814));
    assert_eq!(rates(&d), (LINE, LINE));
    // The RP timer goes on counting at the line rate (not reported by
    // next_timer, run when time is handed in): 100 events by 30014 us.
    d.on_timer(us(14 + 300 * 100) + Duration(299_999));
    assert_eq!(d.increase_events(), (100, 0));
    d.on_timer(us(14 + 300 * 101));
    assert_eq!(d.increase_events(), (101, 0));
    assert_eq!(d.stage(), Some(Stage::HyperIncrease));
}

#[test]
fn hpcc_recovery_after_a_clamped_cut() {
    let mut d = rp(DcqcnParams::hpcc());
    d.on_cnp(us(10));
    d.on_timer(us(314));
    assert_eq!(rates(&d), (75_388_342_136, LINE));
    d.on_cnp(us(315));
    d.on_timer(us(318));
    // Stage 1 at the cut: RT = RC. alpha: 255^4 decayed by 301 ticks,
    // congested at 316, decayed at 317, 318 = 1303194680 (the floor rule
    // iterated). Cut: floor(75388342136 x (2^33 - 1303194680) / 2^33)
    // = 63951038934.
    assert_eq!(d.alpha_q32(), 1_303_194_680);
    assert_eq!(rates(&d), (63_951_038_934, 75_388_342_136));
    // 618 fast recovery: RC + ceil(11437303202/2) = 69669690535;
    // 918 additive: RT + 20M = 75408342136, RC = 72539016336;
    // 1218 hyper: RT + 200M = 75608342136, RC = 74073679236;
    // 1518: RT 75808342136, RC 74941010686; 1818: RT 76008342136, RC 75474676411.
    let mut got = Vec::new();
    for k in 1..=5 {
        d.on_timer(us(318 + 300 * k));
        got.push(rates(&d));
    }
    assert_eq!(
        got,
        [
            (69_669_690_535, 75_388_342_136),
            (72_539_016_336, 75_408_342_136),
            (74_073_679_236, 75_608_342_136),
            (74_941_010_686, 75_808_342_136),
            (75_474_676_411, 76_008_342_136),
        ]
    );
    // RT: 75408342136 + (k - 2) x 200M reaches 100G at k = 125 (37818 us);
    // RC there is 99804171068 and reaches 100G at k = 153 (46218 us).
    d.on_timer(us(318 + 300 * 125));
    assert_eq!(rates(&d), (99_804_171_068, LINE));
    let mut t = us(0);
    while let Some(next) = d.next_timer() {
        t = next;
        d.on_timer(t);
    }
    assert_eq!(t, us(318 + 300 * 153));
    assert_eq!(rates(&d), (LINE, LINE));
}

#[test]
fn hpcc_increase_runs_before_a_cut_due_at_the_same_tick() {
    let mut d = rp(DcqcnParams::hpcc());
    d.on_cnp(us(10));
    d.on_timer(us(14));
    d.on_cnp(us(313));
    d.on_timer(us(314));
    // The RP timer event first (stage 0 -> 1, RC = 75388342136), then the
    // cut with RT = RC. alpha: 255^4 decayed by ticks 15..=313, congested
    // at 314 = 1323625670; RC = floor(75388342136 x (2^33 - 1323625670)
    // / 2^33) = 63771729250.
    assert_eq!(d.alpha_q32(), 1_323_625_670);
    assert_eq!(rates(&d), (63_771_729_250, 75_388_342_136));
    assert_eq!(d.next_timer(), Some(us(614)));
}

#[test]
fn hpcc_has_no_byte_counter() {
    let mut d = rp(DcqcnParams::hpcc());
    d.on_cnp(us(10));
    d.on_timer(us(14));
    d.on_bytes_sent(1_000_000_000, us(20));
    assert_eq!(rates(&d), (HP_RC1, LINE));
    assert_eq!(d.increase_events(), (0, 0));
}

#[test]
fn hpcc_rate_floor_is_1000_mbps() {
    let mut d = Dcqcn::new(DcqcnParams::hpcc(), 2_500_000_000, Instant(0));
    d.on_cnp(us(10));
    d.on_cnp(us(15));
    d.on_timer(us(14));
    // floor(2.5G x 4361683967 / 2^33) = 1269417106
    assert_eq!(d.rate_bps(), 1_269_417_106);
    d.on_timer(us(18));
    // floor(1269417106 x (2^33 - 4179216706) / 2^33) = 651814128, the
    // 50 % floor 634708553: both below 1 Gb/s.
    assert_eq!(rates(&d), (1_000_000_000, 2_500_000_000));
    // A line rate below the floor: the floor follows it down.
    let mut e = Dcqcn::new(DcqcnParams::hpcc(), 500_000_000, Instant(0));
    e.on_cnp(us(1));
    e.on_timer(us(5));
    assert_eq!(rates(&e), (500_000_000, 500_000_000));
}

#[test]
fn hpcc_alpha_decays_without_cnps() {
    let mut d = rp(DcqcnParams::hpcc());
    d.on_cnp(us(10));
    d.on_timer(us(11));
    assert_eq!(d.alpha_q32(), 4_278_190_080); // 2^24 x 255
    d.on_timer(us(13));
    assert_eq!(d.alpha_q32(), 4_244_832_000); // 2^8 x 255^3
    d.on_timer(us(14));
    assert_eq!(d.alpha_q32(), HP_A4); // 255^4
    d.on_timer(us(15));
    assert_eq!(d.alpha_q32(), 4_211_734_020); // floor(255^5 / 256)
    d.on_timer(Instant(1_000_000_000));
    assert_eq!(d.alpha_q32(), 0);
}

// ---- all sets

#[test]
fn notification_point_spaces_cnps_per_set() {
    let mut np = NotificationPoint::from_params(&DcqcnParams::paper());
    let sent: Vec<bool> =
        [0, 10_000, 49_999, 50_000, 60_000, 100_000].map(|t| np.should_send_cnp(Instant(t))).into();
    assert_eq!(sent, [true, false, false, true, false, true]);
    assert_eq!((np.ce_packets(), np.cnps_sent()), (6, 3));

    let mut np = NotificationPoint::from_params(&DcqcnParams::nvidia());
    let sent: Vec<bool> =
        [1_000, 4_999, 5_000, 6_000, 9_000, 9_001].map(|t| np.should_send_cnp(Instant(t))).into();
    assert_eq!(sent, [true, false, true, false, true, false]);

    // HPCC: every CE-marked packet is echoed.
    let mut np = NotificationPoint::from_params(&DcqcnParams::hpcc());
    assert!([5, 5, 6, 7].iter().all(|&t| np.should_send_cnp(Instant(t))));
    assert_eq!(np.cnps_sent(), 4);
}

#[test]
fn earlier_times_are_taken_as_the_latest_seen() {
    let mut d = rp(DcqcnParams::paper());
    d.on_cnp(us(100));
    d.on_cnp(us(40)); // taken as 100 us: within the decrease period
    assert_eq!(d.rate_cuts(), 1);
    let mut np = NotificationPoint::new(Duration::from_micros(4));
    assert!(np.should_send_cnp(us(10)));
    assert!(!np.should_send_cnp(us(2)));
}

/// A reproducible mix of congested and quiet spells over 20 ms, then a
/// quiet second (long enough for every set to get back to the line
/// rate) and a last congested spell: (time, CNP or bytes).
fn script(seed: u64) -> Vec<(Instant, Option<u64>)> {
    fn spell(
        next: &mut impl FnMut(u64) -> u64,
        t: &mut u64,
        end: u64,
        congested: bool,
        gap: u64,
        out: &mut Vec<(Instant, Option<u64>)>,
    ) {
        while *t < end {
            *t += 200 + next(gap);
            let cnp = congested && next(2) == 0;
            out.push((Instant(*t), if cnp { None } else { Some(1 + next(200_000)) }));
        }
    }
    let mut x = seed;
    let mut next = |m: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let mut out = Vec::new();
    let mut t = 0;
    while t < 20_000_000 {
        let congested = next(3) == 0;
        let end = t + 50_000 + next(2_000_000);
        spell(&mut next, &mut t, end, congested, 9_000, &mut out);
    }
    spell(&mut next, &mut t, 1_020_000_000, false, 200_000, &mut out);
    spell(&mut next, &mut t, 1_020_300_000, true, 9_000, &mut out);
    out
}

#[test]
fn lazy_timers_match_running_every_timer_on_time() {
    for params in [DcqcnParams::paper(), DcqcnParams::nvidia(), DcqcnParams::hpcc()] {
        for seed in 1..4 {
            let s = script(seed);
            let end = Instant(1_021_000_000);
            let apply = |d: &mut Dcqcn, (t, ev): (Instant, Option<u64>)| match ev {
                None => d.on_cnp(t),
                Some(b) => d.on_bytes_sent(b, t),
            };
            // (a) on_timer every microsecond as well as the inputs.
            let mut a = rp(params.clone());
            let mut tick = Instant(0);
            let mut cuts_before_last_spell = None;
            for &e in &s {
                if e.0 > Instant(1_020_000_000) && cuts_before_last_spell.is_none() {
                    // The quiet second brought the rate back to the line.
                    assert!(!a.is_limited(), "{params:?} seed {seed}");
                    cuts_before_last_spell = Some(a.rate_cuts());
                }
                while tick <= e.0 {
                    a.on_timer(tick);
                    // Every microsecond while it is busy, then sparser.
                    let step = if tick < Instant(21_000_000) { 1_000 } else { 50_000 };
                    tick = tick + Duration(step);
                }
                apply(&mut a, e);
            }
            // (b) on_timer only when next_timer says so.
            let mut b = rp(params.clone());
            for &e in &s {
                while let Some(n) = b.next_timer().filter(|&n| n <= e.0) {
                    b.on_timer(n);
                    assert!(b.next_timer().is_none_or(|m| m > n));
                }
                apply(&mut b, e);
            }
            // (c) never on_timer: the inputs run the timers.
            let mut c = rp(params.clone());
            for &e in &s {
                apply(&mut c, e);
            }
            for d in [&mut a, &mut b, &mut c] {
                d.on_timer(end);
            }
            assert!(a.rate_cuts() > 100, "the script should congest");
            assert!(a.rate_cuts() > cuts_before_last_spell.unwrap(), "cut again from the line rate");
            // The whole state, timers and counters included.
            assert_eq!(a, b, "{params:?} seed {seed}");
            assert_eq!(a, c, "{params:?} seed {seed}");
        }
    }
}
