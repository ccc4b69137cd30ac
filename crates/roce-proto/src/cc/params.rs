//! DCQCN parameters: every knob of the reaction point (sender) and the
//! notification point (receiver), three named sets, and overrides by name.
//!
//! Units are fixed per field: rates in bits/s (`u64`), times as
//! [`Duration`] (nanoseconds), byte counts in bytes, alpha and g as exact
//! fractions ([`Fraction`]). Values given to [`DcqcnParams::set`] may carry
//! units (`300us`, `40Mbps`, `10MB`, `1/256`); a bare number is in the base
//! unit of the field (ns, bits/s, bytes).
//!
//! Section numbers in the docs refer to the fabric model notes
//! (`MODEL-NOTES.md` of the simulator baseline): §1 the algorithm of Zhu et
//! al. (SIGCOMM'15), §2 NVIDIA ConnectX firmware defaults, §3 the HPCC ns-3
//! artifact's `rdma-hw.cc` variant and the `config.txt` of its baseline runs.

use core::fmt;

use super::CcError;
use crate::time::Duration;

/// An exact fraction `num/den` with `den > 0`, used for alpha and its gain
/// g. Kept as a ratio so that 1/256 and 5/1024 are exact; the state machine
/// turns it into 32-bit fixed point (see [`crate::cc::Dcqcn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fraction {
    pub num: u32,
    pub den: u32,
}

impl Fraction {
    pub const ONE: Fraction = Fraction { num: 1, den: 1 };

    pub const fn new(num: u32, den: u32) -> Fraction {
        Fraction { num, den }
    }

    /// Parses `a/b`, a decimal (`0.00390625`, at most 9 decimals) or an
    /// integer. The result is reduced.
    pub fn parse(s: &str) -> Result<Fraction, &'static str> {
        let s = s.trim();
        let (num, den) = if let Some((a, b)) = s.split_once('/') {
            let num: u64 = a.trim().parse().map_err(|_| "expected a/b with integers a and b")?;
            let den: u64 = b.trim().parse().map_err(|_| "expected a/b with integers a and b")?;
            (num, den)
        } else {
            let (int, frac) = s.split_once('.').unwrap_or((s, ""));
            if frac.len() > 9 {
                return Err("more than 9 decimals; write it as a/b");
            }
            if int.is_empty() && frac.is_empty() {
                return Err("expected a fraction (1/256, 0.00390625)");
            }
            let all_digits = |t: &str| t.bytes().all(|c| c.is_ascii_digit());
            if !all_digits(int) || !all_digits(frac) {
                return Err("expected a fraction (1/256, 0.00390625)");
            }
            let den = 10u64.pow(frac.len() as u32);
            let int: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| "number too large")? };
            let frac: u64 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| "number too large")? };
            let num = int.checked_mul(den).and_then(|v| v.checked_add(frac)).ok_or("number too large")?;
            (num, den)
        };
        if den == 0 {
            return Err("zero denominator");
        }
        let g = gcd(num, den);
        let (num, den) = (num / g, den / g);
        match (u32::try_from(num), u32::try_from(den)) {
            (Ok(num), Ok(den)) => Ok(Fraction { num, den }),
            _ => Err("numerator or denominator does not fit in 32 bits"),
        }
    }

    /// True when `0 <= self <= 1` and the denominator is not zero.
    pub fn is_unit_interval(self) -> bool {
        self.den != 0 && self.num <= self.den
    }

    /// The value as a float, for display.
    pub fn to_f64(self) -> f64 {
        f64::from(self.num) / f64::from(self.den)
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// When a CNP acts on alpha and on the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reaction {
    /// As in the paper (§1): a CNP cuts the rate at once (unless the last
    /// cut is less than `rate_decrease_period` old) and then updates alpha
    /// (`alpha = (1 - g) alpha + g`); the alpha timer restarts on every CNP
    /// and decays alpha each `alpha_period` without one.
    Immediate,
    /// As the firmware (§2: "the flow rate is reduced at the beginning of
    /// the next rate_reduce_monitor_period") and the HPCC artifact (§3): the
    /// first CNP starts two periodic timers. Every `alpha_period`:
    /// `alpha = (1 - g) alpha + g` if a CNP arrived since the last tick,
    /// else `(1 - g) alpha`. Every `rate_decrease_period`: one cut if a CNP
    /// arrived since the last tick. The first CNP sets alpha to
    /// `initial_alpha` and counts for the cut, not for alpha.
    Periodic,
}

/// Whether a cut first sets the target rate to the current rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClampRule {
    /// Every cut: `RT = RC` (the paper, §1; firmware `CLAMP_TGT_RATE` 1).
    Always,
    /// Only if a timer-driven increase happened since the last cut
    /// (firmware `CLAMP_TGT_RATE` 0 with `CLAMP_TGT_RATE_AFTER_TIME_INC` 1,
    /// §2; HPCC `CLAMP_TARGET_RATE` 0: "unless stage == 0", §3, where the
    /// stage counts timer events). Otherwise RT keeps its value, so fast
    /// recovery heads back to the rate before the previous cut.
    AfterTimerIncrease,
    /// Never (both firmware flags 0).
    Never,
}

/// How much a hyper-increase event adds to the target rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HyperIncrease {
    /// `i x R_HAI` for the i-th hyper event since the cut (§1; ns3-rdma:
    /// `i = min(BC, TC) - F + 1`).
    Linear,
    /// `R_HAI` per event (HPCC `HyperIncreaseMlx`, §3; the firmware's
    /// "rate used to increase rpTargetRate in the hyper increase state").
    Constant,
}

impl Reaction {
    pub fn as_str(self) -> &'static str {
        match self {
            Reaction::Immediate => "immediate",
            Reaction::Periodic => "periodic",
        }
    }
}

impl ClampRule {
    pub fn as_str(self) -> &'static str {
        match self {
            ClampRule::Always => "always",
            ClampRule::AfterTimerIncrease => "after_timer_increase",
            ClampRule::Never => "never",
        }
    }
}

impl HyperIncrease {
    pub fn as_str(self) -> &'static str {
        match self {
            HyperIncrease::Linear => "linear",
            HyperIncrease::Constant => "constant",
        }
    }
}

/// Every knob of DCQCN. The reaction point ([`crate::cc::Dcqcn`]) reads
/// all but the last three; the notification point
/// ([`crate::cc::NotificationPoint`]) reads `min_time_between_cnps`; the
/// CNP marking fields are for whoever builds the CNP.
///
/// Firmware names (§2) and HPCC `config.txt` keys (§3) are given per field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DcqcnParams {
    /// g, the gain of the alpha EWMA: on congestion `alpha = (1-g) alpha + g`,
    /// else `alpha = (1-g) alpha`. Firmware `DCE_TCP_G` (g = (1024 - value)/1024),
    /// HPCC `EWMA_GAIN`.
    pub g: Fraction,
    /// Alpha set by the first CNP of the flow. Firmware `INITIAL_ALPHA_VALUE`
    /// (value/1024); HPCC sets 1.
    pub initial_alpha: Fraction,
    /// The alpha timer, K: the alpha update period. Firmware `DCE_TCP_RTT`,
    /// HPCC `ALPHA_RESUME_INTERVAL`.
    pub alpha_period: Duration,
    /// When a CNP acts (see [`Reaction`]).
    pub reaction: Reaction,
    /// At most one cut per this period. Firmware `RATE_REDUCE_MONITOR_PERIOD`,
    /// HPCC `RATE_DECREASE_INTERVAL`.
    pub rate_decrease_period: Duration,
    /// The rate-increase timer T, restarted by every cut. Firmware
    /// `RPG_TIME_RESET`, HPCC `RP_TIMER`.
    pub rate_increase_period: Duration,
    /// The byte counter B: one increase event per this many bytes sent since
    /// the cut; 0 = no byte counter. Firmware `RPG_BYTE_RESET` (in bytes).
    pub byte_counter_bytes: u64,
    /// F: increase events of fast recovery after a cut. Firmware
    /// `RPG_THRESHOLD`, HPCC `FAST_RECOVERY_TIMES`.
    pub fast_recovery_steps: u32,
    /// R_AI, bits/s added to the target per additive-increase event.
    /// Firmware `RPG_AI_RATE`, HPCC `RATE_AI`.
    pub ai_rate_bps: u64,
    /// R_HAI, bits/s added to the target per hyper-increase event (times i
    /// with [`HyperIncrease::Linear`]). Firmware `RPG_HAI_RATE`, HPCC `RATE_HAI`.
    pub hai_rate_bps: u64,
    /// The hyper-increase step rule.
    pub hyper_increase: HyperIncrease,
    /// Floor of the current rate, bits/s. Firmware `RPG_MIN_RATE`, HPCC
    /// `MIN_RATE`.
    pub min_rate_bps: u64,
    /// Ceiling of both rates, bits/s; 0 = the line rate. Firmware `RPG_MAX_RATE`.
    pub max_rate_bps: u64,
    /// Current and target rate set by the first CNP, bits/s; 0 = keep the
    /// current rate. Firmware `RATE_TO_SET_ON_FIRST_CNP`; HPCC's
    /// `RateOnFirstCnp` 1.0 (x current) is 0 here.
    pub rate_on_first_cnp_bps: u64,
    /// Whether a cut sets the target to the current rate first.
    pub clamp_target: ClampRule,
    /// A cut multiplies the rate by `1 - alpha / 2^decrease_shift`.
    /// Firmware `RPG_GD` - 10 (GD 11: alpha/2).
    pub decrease_shift: u8,
    /// A cut keeps at least this percentage of the rate (0 = no such floor).
    /// Firmware `RPG_MIN_DEC_FAC`.
    pub min_decrease_factor_pct: u8,
    /// Notification point: at most one CNP per QP per this time; 0 = one
    /// per CE-marked packet. Firmware `MIN_TIME_BETWEEN_CNPS`; paper N.
    pub min_time_between_cnps: Duration,
    /// DSCP of the CNPs sent. Firmware `CNP_DSCP`.
    pub cnp_dscp: u8,
    /// 802.1p priority of the CNPs sent. Firmware `CNP_802P_PRIO`.
    pub cnp_priority: u8,
}

const MBPS: u64 = 1_000_000;

impl DcqcnParams {
    /// The names [`DcqcnParams::named`] knows.
    pub const SET_NAMES: [&'static str; 3] = ["paper", "nvidia", "hpcc"];

    /// Every key [`DcqcnParams::set`] and [`DcqcnParams::get`] know, in
    /// declaration order (the field names).
    pub const KEYS: [&'static str; 20] = [
        "g",
        "initial_alpha",
        "alpha_period",
        "reaction",
        "rate_decrease_period",
        "rate_increase_period",
        "byte_counter_bytes",
        "fast_recovery_steps",
        "ai_rate_bps",
        "hai_rate_bps",
        "hyper_increase",
        "min_rate_bps",
        "max_rate_bps",
        "rate_on_first_cnp_bps",
        "clamp_target",
        "decrease_shift",
        "min_decrease_factor_pct",
        "min_time_between_cnps",
        "cnp_dscp",
        "cnp_priority",
    ];

    /// The algorithm as published (Zhu et al., SIGCOMM'15), §1 of the notes.
    ///
    /// - g 1/256, K = T = 55 us, B = 10 MB (read as 10,000,000 bytes),
    ///   F = 5, R_AI 40 Mb/s: §1 (paper, Sec. 5).
    /// - R_HAI 200 Mb/s: §1, marked unconfirmed there (the ns3-rdma sample's
    ///   value); hyper step `i x R_HAI` with i = min(BC, TC) - F + 1 (§1,
    ///   ns3-rdma).
    /// - Cut at once on the CNP with `RT = RC` every time, `(1 - alpha/2)`,
    ///   alpha then `(1-g) alpha + g`: §1.
    /// - Rate-decrease period 50 us: not in the paper (its RP cuts on every
    ///   CNP and the NP sends at most one per 50 us); taken from the HPCC
    ///   artifact's "dcqcn_paper" set (§3), equal to N so it does not bind
    ///   for a single NP.
    /// - Initial alpha 1: as in the HPCC artifact (§3); with alpha 1 the
    ///   first cut halves the rate.
    /// - Minimum rate 100 Mb/s: the paper names none; HPCC code default (§3).
    /// - NP: one CNP per 50 us per flow (N, §1).
    /// - CNP DSCP 48 / priority 6: the paper names none; firmware defaults (§2).
    pub fn paper() -> DcqcnParams {
        DcqcnParams {
            g: Fraction::new(1, 256),
            initial_alpha: Fraction::ONE,
            alpha_period: Duration::from_micros(55),
            reaction: Reaction::Immediate,
            rate_decrease_period: Duration::from_micros(50),
            rate_increase_period: Duration::from_micros(55),
            byte_counter_bytes: 10_000_000,
            fast_recovery_steps: 5,
            ai_rate_bps: 40 * MBPS,
            hai_rate_bps: 200 * MBPS,
            hyper_increase: HyperIncrease::Linear,
            min_rate_bps: 100 * MBPS,
            max_rate_bps: 0,
            rate_on_first_cnp_bps: 0,
            clamp_target: ClampRule::Always,
            decrease_shift: 1,
            min_decrease_factor_pct: 50,
            min_time_between_cnps: Duration::from_micros(50),
            cnp_dscp: 48,
            cnp_priority: 6,
        }
    }

    /// NVIDIA ConnectX (CX-4 and later) firmware defaults, §2 of the notes.
    ///
    /// - `DCE_TCP_G` 1019: g = 5/1024; `DCE_TCP_RTT` 1 us;
    ///   `INITIAL_ALPHA_VALUE` 1023: 1023/1024.
    /// - `RATE_REDUCE_MONITOR_PERIOD` 4 us, `RPG_GD` 11 (alpha/2),
    ///   `RPG_MIN_DEC_FAC` 50 %, `RPG_MIN_RATE` 1 Mb/s, `RPG_MAX_RATE` 0,
    ///   `RATE_TO_SET_ON_FIRST_CNP` 0.
    /// - `RPG_TIME_RESET` 300 us, `RPG_BYTE_RESET` 32767 (bytes, per the
    ///   mlxconfig parameter description), `RPG_THRESHOLD` 1,
    ///   `RPG_AI_RATE` 5 Mb/s, `RPG_HAI_RATE` 50 Mb/s.
    /// - `CLAMP_TGT_RATE` 0 with `CLAMP_TGT_RATE_AFTER_TIME_INC` 1.
    /// - `MIN_TIME_BETWEEN_CNPS` 4 us (the Barre paper's default and a
    ///   recent mlxconfig dump; a CX-5-era dump had 2 us), `CNP_DSCP` 48,
    ///   `CNP_802P_PRIO` 6.
    /// - Periodic reaction and a constant hyper step: the firmware's own
    ///   description of the cut ("at the beginning of the next
    ///   rate_reduce_monitor_period") and its model in the HPCC artifact (§3).
    pub fn nvidia() -> DcqcnParams {
        DcqcnParams {
            g: Fraction::new(5, 1024),
            initial_alpha: Fraction::new(1023, 1024),
            alpha_period: Duration::from_micros(1),
            reaction: Reaction::Periodic,
            rate_decrease_period: Duration::from_micros(4),
            rate_increase_period: Duration::from_micros(300),
            byte_counter_bytes: 32_767,
            fast_recovery_steps: 1,
            ai_rate_bps: 5 * MBPS,
            hai_rate_bps: 50 * MBPS,
            hyper_increase: HyperIncrease::Constant,
            min_rate_bps: MBPS,
            max_rate_bps: 0,
            rate_on_first_cnp_bps: 0,
            clamp_target: ClampRule::AfterTimerIncrease,
            decrease_shift: 1,
            min_decrease_factor_pct: 50,
            min_time_between_cnps: Duration::from_micros(4),
            cnp_dscp: 48,
            cnp_priority: 6,
        }
    }

    /// The HPCC artifact's "Mellanox" DCQCN with the values of the baseline
    /// runs (`config.txt`, CC_MODE 1, 100 Gb/s hosts), §3 of the notes.
    ///
    /// - `EWMA_GAIN` 0.00390625 = 1/256, `ALPHA_RESUME_INTERVAL` 1 us,
    ///   `RATE_DECREASE_INTERVAL` 4 us, `RP_TIMER` 300 us,
    ///   `FAST_RECOVERY_TIMES` 1, `RATE_AI` 20 Mb/s, `RATE_HAI` 200 Mb/s,
    ///   `MIN_RATE` 1000 Mb/s, `CLAMP_TARGET_RATE` 0 (RT = RC unless no
    ///   timer event since the cut).
    /// - First CNP: alpha 1, rate x 1.0 (kept); no byte counter; hyper step
    ///   constant `RATE_HAI`; no NP pacing (the CNP is the ECN echo of each
    ///   ACK, so `min_time_between_cnps` 0).
    /// - No minimum-decrease factor in the artifact: 50 % here, which never
    ///   binds with alpha <= 1 and `(1 - alpha/2)`.
    /// - CNP DSCP 48 / priority 6: the artifact sends CNPs in its highest
    ///   priority queue and names no DSCP; firmware defaults (§2).
    ///
    /// R_AI and R_HAI scale with the NIC rate in the artifact's `run.py`;
    /// see [`DcqcnParams::hpcc_at`].
    pub fn hpcc() -> DcqcnParams {
        DcqcnParams::hpcc_at(100_000_000_000)
    }

    /// [`DcqcnParams::hpcc`] for another NIC rate: `run.py` sets
    /// R_AI = 5 Mb/s x rate/25G and R_HAI = 50 Mb/s x rate/25G (§3).
    pub fn hpcc_at(line_rate_bps: u64) -> DcqcnParams {
        DcqcnParams {
            g: Fraction::new(1, 256),
            initial_alpha: Fraction::ONE,
            alpha_period: Duration::from_micros(1),
            reaction: Reaction::Periodic,
            rate_decrease_period: Duration::from_micros(4),
            rate_increase_period: Duration::from_micros(300),
            byte_counter_bytes: 0,
            fast_recovery_steps: 1,
            ai_rate_bps: line_rate_bps / 5_000,
            hai_rate_bps: line_rate_bps / 500,
            hyper_increase: HyperIncrease::Constant,
            min_rate_bps: 1_000 * MBPS,
            max_rate_bps: 0,
            rate_on_first_cnp_bps: 0,
            clamp_target: ClampRule::AfterTimerIncrease,
            decrease_shift: 1,
            min_decrease_factor_pct: 50,
            min_time_between_cnps: Duration::ZERO,
            cnp_dscp: 48,
            cnp_priority: 6,
        }
    }

    /// One of [`DcqcnParams::SET_NAMES`] (case-insensitive).
    pub fn named(name: &str) -> Result<DcqcnParams, CcError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "paper" => Ok(DcqcnParams::paper()),
            "nvidia" => Ok(DcqcnParams::nvidia()),
            "hpcc" => Ok(DcqcnParams::hpcc()),
            _ => Err(CcError::UnknownSet(name.to_string())),
        }
    }

    /// Overrides one field by its name (one of [`DcqcnParams::KEYS`]). On an
    /// error the parameters are unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), CcError> {
        let key = key.trim();
        let v = value.trim();
        let bad = |reason: &'static str| CcError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            reason,
        };
        let mut new = self.clone();
        match key {
            "g" => new.g = Fraction::parse(v).map_err(bad)?,
            "initial_alpha" => new.initial_alpha = Fraction::parse(v).map_err(bad)?,
            "alpha_period" => new.alpha_period = parse_duration(v).map_err(bad)?,
            "reaction" => {
                new.reaction = match v.to_ascii_lowercase().as_str() {
                    "immediate" => Reaction::Immediate,
                    "periodic" => Reaction::Periodic,
                    _ => return Err(bad("expected immediate or periodic")),
                }
            }
            "rate_decrease_period" => new.rate_decrease_period = parse_duration(v).map_err(bad)?,
            "rate_increase_period" => new.rate_increase_period = parse_duration(v).map_err(bad)?,
            "byte_counter_bytes" => new.byte_counter_bytes = parse_bytes(v).map_err(bad)?,
            "fast_recovery_steps" => {
                new.fast_recovery_steps = u32::try_from(parse_int(v).map_err(bad)?)
                    .map_err(|_| out_of_range(key, value, "0..=4294967295"))?
            }
            "ai_rate_bps" => new.ai_rate_bps = parse_rate(v).map_err(bad)?,
            "hai_rate_bps" => new.hai_rate_bps = parse_rate(v).map_err(bad)?,
            "hyper_increase" => {
                new.hyper_increase = match v.to_ascii_lowercase().as_str() {
                    "linear" => HyperIncrease::Linear,
                    "constant" => HyperIncrease::Constant,
                    _ => return Err(bad("expected linear or constant")),
                }
            }
            "min_rate_bps" => new.min_rate_bps = parse_rate(v).map_err(bad)?,
            "max_rate_bps" => new.max_rate_bps = parse_rate(v).map_err(bad)?,
            "rate_on_first_cnp_bps" => new.rate_on_first_cnp_bps = parse_rate(v).map_err(bad)?,
            "clamp_target" => {
                new.clamp_target = match v.to_ascii_lowercase().as_str() {
                    "always" => ClampRule::Always,
                    "after_timer_increase" => ClampRule::AfterTimerIncrease,
                    "never" => ClampRule::Never,
                    _ => return Err(bad("expected always, after_timer_increase or never")),
                }
            }
            "decrease_shift" => new.decrease_shift = parse_u8(key, value, v)?,
            "min_decrease_factor_pct" => new.min_decrease_factor_pct = parse_u8(key, value, v)?,
            "min_time_between_cnps" => new.min_time_between_cnps = parse_duration(v).map_err(bad)?,
            "cnp_dscp" => new.cnp_dscp = parse_u8(key, value, v)?,
            "cnp_priority" => new.cnp_priority = parse_u8(key, value, v)?,
            _ => return Err(CcError::UnknownKey(key.to_string())),
        }
        new.check(key).map_err(|range| out_of_range(key, value, range))?;
        *self = new;
        Ok(())
    }

    /// Applies `key=value` (the form of a `--cc-param` argument).
    pub fn set_kv(&mut self, kv: &str) -> Result<(), CcError> {
        match kv.split_once('=') {
            Some((k, v)) => self.set(k, v),
            None => Err(CcError::BadValue {
                key: kv.trim().to_string(),
                value: String::new(),
                reason: "expected key=value",
            }),
        }
    }

    /// The value of one field, in a form [`DcqcnParams::set`] reads back.
    pub fn get(&self, key: &str) -> Result<String, CcError> {
        Ok(match key.trim() {
            "g" => self.g.to_string(),
            "initial_alpha" => self.initial_alpha.to_string(),
            "alpha_period" => fmt_duration(self.alpha_period),
            "reaction" => self.reaction.as_str().to_string(),
            "rate_decrease_period" => fmt_duration(self.rate_decrease_period),
            "rate_increase_period" => fmt_duration(self.rate_increase_period),
            "byte_counter_bytes" => self.byte_counter_bytes.to_string(),
            "fast_recovery_steps" => self.fast_recovery_steps.to_string(),
            "ai_rate_bps" => fmt_rate(self.ai_rate_bps),
            "hai_rate_bps" => fmt_rate(self.hai_rate_bps),
            "hyper_increase" => self.hyper_increase.as_str().to_string(),
            "min_rate_bps" => fmt_rate(self.min_rate_bps),
            "max_rate_bps" => fmt_rate(self.max_rate_bps),
            "rate_on_first_cnp_bps" => fmt_rate(self.rate_on_first_cnp_bps),
            "clamp_target" => self.clamp_target.as_str().to_string(),
            "decrease_shift" => self.decrease_shift.to_string(),
            "min_decrease_factor_pct" => self.min_decrease_factor_pct.to_string(),
            "min_time_between_cnps" => fmt_duration(self.min_time_between_cnps),
            "cnp_dscp" => self.cnp_dscp.to_string(),
            "cnp_priority" => self.cnp_priority.to_string(),
            other => return Err(CcError::UnknownKey(other.to_string())),
        })
    }

    /// Checks every field's range (fields are public, so a value built by
    /// hand may be off).
    pub fn validate(&self) -> Result<(), CcError> {
        for key in DcqcnParams::KEYS {
            if let Err(range) = self.check(key) {
                let value = self.get(key).unwrap_or_default();
                return Err(out_of_range(key, &value, range));
            }
        }
        Ok(())
    }

    /// The range of one field, if its value is outside it.
    fn check(&self, key: &str) -> Result<(), &'static str> {
        let ok = match key {
            "g" => self.g.is_unit_interval(),
            "initial_alpha" => self.initial_alpha.is_unit_interval(),
            "alpha_period" => self.alpha_period > Duration::ZERO,
            "rate_decrease_period" => self.rate_decrease_period > Duration::ZERO,
            "rate_increase_period" => self.rate_increase_period > Duration::ZERO,
            "min_rate_bps" => self.min_rate_bps > 0,
            "decrease_shift" => self.decrease_shift <= 31,
            "min_decrease_factor_pct" => self.min_decrease_factor_pct <= 100,
            "cnp_dscp" => self.cnp_dscp <= 63,
            "cnp_priority" => self.cnp_priority <= 7,
            _ => true,
        };
        if ok {
            return Ok(());
        }
        Err(match key {
            "g" | "initial_alpha" => "0..=1 with a non-zero denominator",
            "alpha_period" | "rate_decrease_period" | "rate_increase_period" => "at least 1ns",
            "min_rate_bps" => "at least 1bps",
            "decrease_shift" => "0..=31",
            "min_decrease_factor_pct" => "0..=100",
            "cnp_dscp" => "0..=63",
            _ => "0..=7",
        })
    }
}

impl Default for DcqcnParams {
    /// The firmware defaults ([`DcqcnParams::nvidia`]): what a NIC does
    /// unless told otherwise.
    fn default() -> DcqcnParams {
        DcqcnParams::nvidia()
    }
}

fn out_of_range(key: &str, value: &str, range: &'static str) -> CcError {
    CcError::OutOfRange { key: key.to_string(), value: value.to_string(), range }
}

fn parse_u8(key: &str, value: &str, v: &str) -> Result<u8, CcError> {
    let n = parse_int(v).map_err(|reason| CcError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    })?;
    u8::try_from(n).map_err(|_| out_of_range(key, value, "0..=255"))
}

const DURATION_UNITS: &[(&str, u64)] =
    &[("", 1), ("ns", 1), ("us", 1_000), ("µs", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000)];

const RATE_UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("bps", 1),
    ("b/s", 1),
    ("bit", 1),
    ("bit/s", 1),
    ("k", 1_000),
    ("kbps", 1_000),
    ("kb/s", 1_000),
    ("kbit", 1_000),
    ("kbit/s", 1_000),
    ("m", 1_000_000),
    ("mbps", 1_000_000),
    ("mb/s", 1_000_000),
    ("mbit", 1_000_000),
    ("mbit/s", 1_000_000),
    ("g", 1_000_000_000),
    ("gbps", 1_000_000_000),
    ("gb/s", 1_000_000_000),
    ("gbit", 1_000_000_000),
    ("gbit/s", 1_000_000_000),
    ("t", 1_000_000_000_000),
    ("tbps", 1_000_000_000_000),
    ("tb/s", 1_000_000_000_000),
    ("tbit", 1_000_000_000_000),
    ("tbit/s", 1_000_000_000_000),
];

const BYTE_UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("kb", 1_000),
    ("kib", 1 << 10),
    ("mb", 1_000_000),
    ("mib", 1 << 20),
    ("gb", 1_000_000_000),
    ("gib", 1 << 30),
];

/// A duration: a number with `ns`, `us`, `ms` or `s`; bare numbers are ns.
fn parse_duration(v: &str) -> Result<Duration, &'static str> {
    parse_scaled(v, DURATION_UNITS).map(Duration::from_nanos)
}

/// A rate in bits/s: a number with `bps`, `Kbps`, `Mb/s`, `Gbit`... (case
/// does not matter and every unit is bits); bare numbers are bits/s.
fn parse_rate(v: &str) -> Result<u64, &'static str> {
    parse_scaled(v, RATE_UNITS)
}

/// A byte count: a number with `B`, `KB` (1000), `KiB` (1024), `MB`,
/// `MiB`, `GB`, `GiB`; bare numbers are bytes.
fn parse_bytes(v: &str) -> Result<u64, &'static str> {
    parse_scaled(v, BYTE_UNITS)
}

fn parse_int(v: &str) -> Result<u64, &'static str> {
    parse_scaled(v, &[("", 1)])
}

/// A decimal number (digits, optional `.` and fraction, `_` separators)
/// followed by one of `units` (matched without case); the value in the base
/// unit must be a whole number.
fn parse_scaled(v: &str, units: &[(&str, u64)]) -> Result<u64, &'static str> {
    let v = v.trim();
    let split = v.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let unit = unit.trim().to_lowercase();
    let factor = units.iter().find(|(u, _)| *u == unit).map(|&(_, f)| f).ok_or("unknown unit")?;
    let number: String = number.chars().filter(|&c| c != '_').collect();
    let (int, frac) = number.split_once('.').unwrap_or((&number, ""));
    if int.is_empty() && frac.is_empty() {
        return Err("expected a number");
    }
    if frac.contains('.') {
        return Err("expected a number");
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| "number too large")? };
    let whole = int.checked_mul(factor).ok_or("number too large")?;
    if frac.is_empty() {
        return Ok(whole);
    }
    if frac.len() > 18 {
        return Err("too many decimals");
    }
    let scale = 10u128.pow(frac.len() as u32);
    let frac: u128 = frac.parse().map_err(|_| "expected a number")?;
    let part = frac * u128::from(factor);
    if part % scale != 0 {
        return Err("not a whole number of the base unit");
    }
    u64::try_from(part / scale).ok().and_then(|p| whole.checked_add(p)).ok_or("number too large")
}

/// The largest unit that shows the value exactly.
fn fmt_duration(d: Duration) -> String {
    fmt_scaled(d.as_nanos(), &[(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us"), (1, "ns")])
}

fn fmt_rate(bps: u64) -> String {
    fmt_scaled(bps, &[(1_000_000_000, "Gbps"), (1_000_000, "Mbps"), (1_000, "Kbps"), (1, "bps")])
}

fn fmt_scaled(v: u64, units: &[(u64, &str)]) -> String {
    for &(f, u) in units {
        if v != 0 && v % f == 0 {
            return format!("{}{u}", v / f);
        }
    }
    format!("0{}", units[units.len() - 1].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_sets_carry_the_values_of_the_notes() {
        let p = DcqcnParams::named("paper").unwrap();
        assert_eq!(p.g, Fraction::new(1, 256));
        assert_eq!((p.alpha_period, p.rate_increase_period), (Duration(55_000), Duration(55_000)));
        assert_eq!(p.rate_decrease_period, Duration(50_000));
        assert_eq!((p.byte_counter_bytes, p.fast_recovery_steps), (10_000_000, 5));
        assert_eq!((p.ai_rate_bps, p.hai_rate_bps), (40_000_000, 200_000_000));
        assert_eq!(
            (p.reaction, p.clamp_target, p.hyper_increase),
            (Reaction::Immediate, ClampRule::Always, HyperIncrease::Linear)
        );
        assert_eq!(p.min_time_between_cnps, Duration(50_000));

        let n = DcqcnParams::named("NVIDIA").unwrap();
        assert_eq!((n.g, n.initial_alpha), (Fraction::new(5, 1024), Fraction::new(1023, 1024)));
        assert_eq!((n.alpha_period, n.rate_decrease_period), (Duration(1_000), Duration(4_000)));
        assert_eq!((n.rate_increase_period, n.byte_counter_bytes), (Duration(300_000), 32_767));
        assert_eq!((n.fast_recovery_steps, n.ai_rate_bps, n.hai_rate_bps), (1, 5_000_000, 50_000_000));
        assert_eq!((n.min_rate_bps, n.min_decrease_factor_pct, n.decrease_shift), (1_000_000, 50, 1));
        assert_eq!((n.reaction, n.clamp_target), (Reaction::Periodic, ClampRule::AfterTimerIncrease));
        assert_eq!((n.min_time_between_cnps, n.cnp_dscp, n.cnp_priority), (Duration(4_000), 48, 6));
        assert_eq!(n, DcqcnParams::default());

        // config.txt of the baseline runs: EWMA_GAIN 0.00390625, RP_TIMER 300,
        // RATE_AI 20Mb/s, RATE_HAI 200Mb/s, MIN_RATE 1000Mb/s.
        let h = DcqcnParams::named("hpcc").unwrap();
        assert_eq!(h.g, Fraction::parse("0.00390625").unwrap());
        assert_eq!((h.alpha_period, h.rate_decrease_period), (Duration(1_000), Duration(4_000)));
        assert_eq!(
            (h.rate_increase_period, h.byte_counter_bytes, h.fast_recovery_steps),
            (Duration(300_000), 0, 1)
        );
        assert_eq!((h.ai_rate_bps, h.hai_rate_bps, h.min_rate_bps), (20_000_000, 200_000_000, 1_000_000_000));
        assert_eq!((h.hyper_increase, h.min_time_between_cnps), (HyperIncrease::Constant, Duration::ZERO));

        for name in DcqcnParams::SET_NAMES {
            DcqcnParams::named(name).unwrap().validate().unwrap();
        }
        assert_eq!(DcqcnParams::named("dctcp"), Err(CcError::UnknownSet("dctcp".into())));
    }

    #[test]
    fn hpcc_scales_increase_steps_with_the_nic_rate() {
        // run.py: AI = 5 Mb/s x bw/25G, HAI = 50 Mb/s x bw/25G.
        let p = DcqcnParams::hpcc_at(25_000_000_000);
        assert_eq!((p.ai_rate_bps, p.hai_rate_bps), (5_000_000, 50_000_000));
        let p = DcqcnParams::hpcc_at(400_000_000_000);
        assert_eq!((p.ai_rate_bps, p.hai_rate_bps), (80_000_000, 800_000_000));
    }

    #[test]
    fn fractions_parse_exactly() {
        assert_eq!(Fraction::parse("1/256"), Ok(Fraction::new(1, 256)));
        assert_eq!(Fraction::parse("10/2048"), Ok(Fraction::new(5, 1024)));
        assert_eq!(Fraction::parse("0.00390625"), Ok(Fraction::new(1, 256)));
        assert_eq!(Fraction::parse("0.5"), Ok(Fraction::new(1, 2)));
        assert_eq!(Fraction::parse("1"), Ok(Fraction::ONE));
        assert_eq!(Fraction::parse(".25"), Ok(Fraction::new(1, 4)));
        assert!(Fraction::parse("1/0").is_err());
        assert!(Fraction::parse("0.0000000001").is_err());
        assert!(Fraction::parse("a/b").is_err());
        assert!(Fraction::parse("").is_err());
        assert!(Fraction::parse("-1/2").is_err());
    }

    #[test]
    fn set_reads_units() {
        let mut p = DcqcnParams::paper();
        p.set("alpha_period", "1us").unwrap();
        assert_eq!(p.alpha_period, Duration(1_000));
        p.set("rate_increase_period", " 1.5 ms ").unwrap();
        assert_eq!(p.rate_increase_period, Duration(1_500_000));
        p.set("rate_decrease_period", "4000").unwrap();
        assert_eq!(p.rate_decrease_period, Duration(4_000));
        p.set("ai_rate_bps", "5Mbps").unwrap();
        assert_eq!(p.ai_rate_bps, 5_000_000);
        p.set("hai_rate_bps", "0.2Gb/s").unwrap();
        assert_eq!(p.hai_rate_bps, 200_000_000);
        p.set("min_rate_bps", "400mbit").unwrap();
        assert_eq!(p.min_rate_bps, 400_000_000);
        p.set("max_rate_bps", "25_000_000_000").unwrap();
        assert_eq!(p.max_rate_bps, 25_000_000_000);
        p.set("byte_counter_bytes", "10MiB").unwrap();
        assert_eq!(p.byte_counter_bytes, 10 * 1024 * 1024);
        p.set("byte_counter_bytes", "150KB").unwrap();
        assert_eq!(p.byte_counter_bytes, 150_000);
        p.set("g", "5/1024").unwrap();
        assert_eq!(p.g, Fraction::new(5, 1024));
        p.set("reaction", "Periodic").unwrap();
        assert_eq!(p.reaction, Reaction::Periodic);
        p.set("clamp_target", "never").unwrap();
        assert_eq!(p.clamp_target, ClampRule::Never);
        p.set("hyper_increase", "constant").unwrap();
        assert_eq!(p.hyper_increase, HyperIncrease::Constant);
        p.set_kv("fast_recovery_steps=1").unwrap();
        assert_eq!(p.fast_recovery_steps, 1);
        p.set_kv(" cnp_dscp = 26 ").unwrap();
        assert_eq!(p.cnp_dscp, 26);
    }

    #[test]
    fn set_errors_are_typed_and_leave_the_value() {
        let mut p = DcqcnParams::nvidia();
        let before = p.clone();
        assert_eq!(p.set("kmin", "5KB"), Err(CcError::UnknownKey("kmin".into())));
        assert!(matches!(
            p.set("alpha_period", "1 fortnight"),
            Err(CcError::BadValue { reason: "unknown unit", .. })
        ));
        assert!(matches!(p.set("alpha_period", "0.5ns"), Err(CcError::BadValue { .. })));
        assert!(matches!(p.set("ai_rate_bps", "fast"), Err(CcError::BadValue { .. })));
        assert!(matches!(p.set("ai_rate_bps", "-5Mbps"), Err(CcError::BadValue { .. })));
        assert!(matches!(p.set("reaction", "lazy"), Err(CcError::BadValue { .. })));
        assert!(matches!(p.set_kv("g"), Err(CcError::BadValue { .. })));
        assert_eq!(
            p.set("g", "3/2"),
            Err(CcError::OutOfRange {
                key: "g".into(),
                value: "3/2".into(),
                range: "0..=1 with a non-zero denominator"
            })
        );
        assert!(matches!(p.set("initial_alpha", "1.5"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("alpha_period", "0us"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("rate_increase_period", "0"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("min_rate_bps", "0"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("cnp_dscp", "64"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("cnp_dscp", "300"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("cnp_priority", "8"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("min_decrease_factor_pct", "101"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("decrease_shift", "32"), Err(CcError::OutOfRange { .. })));
        assert!(matches!(p.set("fast_recovery_steps", "4294967296"), Err(CcError::OutOfRange { .. })));
        assert_eq!(p, before);
        let mut broken = before.clone();
        broken.g = Fraction::new(1, 0);
        assert!(matches!(broken.validate(), Err(CcError::OutOfRange { .. })));
    }

    #[test]
    fn get_reads_back_through_set_for_every_key() {
        for name in DcqcnParams::SET_NAMES {
            let p = DcqcnParams::named(name).unwrap();
            let mut q = DcqcnParams::paper();
            for key in DcqcnParams::KEYS {
                q.set(key, &p.get(key).unwrap()).unwrap();
            }
            assert_eq!(q, p, "{name}");
        }
        let n = DcqcnParams::nvidia();
        assert_eq!(n.get("rate_increase_period").unwrap(), "300us");
        assert_eq!(n.get("ai_rate_bps").unwrap(), "5Mbps");
        assert_eq!(n.get("max_rate_bps").unwrap(), "0bps");
        assert_eq!(n.get("g").unwrap(), "5/1024");
        assert_eq!(n.get("nope"), Err(CcError::UnknownKey("nope".into())));
    }
}
