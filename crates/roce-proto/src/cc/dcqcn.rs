//! The DCQCN reaction point (one per sending QP) and notification point
//! (one per receiving QP).
//!
//! # Arithmetic
//!
//! Everything is integer, so a sequence of calls gives the same numbers on
//! every platform:
//!
//! - alpha is fixed point with 32 fraction bits (1.0 = 2^32). A decay is
//!   `floor(alpha x (1 - g))`, a congestion update adds `floor(g x 2^32)`
//!   to that. With g = 1/256 the first four decays of alpha = 1 are exact
//!   (255^4 is a whole number of units); otherwise each step truncates by
//!   less than 2^-32, and over a long decay the error stays below
//!   `2^-32 / g` (6e-8 for g = 1/256).
//! - A cut is `RC = floor(RC x (1 - alpha / 2^shift))`, at least
//!   `RC x min_decrease_factor / 100` and the minimum rate.
//! - An increase moves RC halfway to RT rounding up, `RC + ceil((RT - RC) / 2)`,
//!   so RC reaches RT in finitely many events.
//!
//! # Timers
//!
//! [`Dcqcn::next_timer`] names the next instant at which the *rate* may
//! change (a pending cut, the next increase event while below the line
//! rate). Alpha timer ticks change only alpha, which matters at the next
//! cut; they run when time is next handed in (every call runs everything
//! due up to its `now`, in time order, exactly as if each timer had fired
//! on time), so an idle QP does not wake its driver every microsecond.
//! Call [`Dcqcn::on_timer`] before reading [`Dcqcn::alpha`] to see it up to
//! date.
//!
//! Timers due at the same instant run as alpha tick, then rate increase,
//! then cut (the HPCC artifact's order: its cut runs 1 ns after the alpha
//! update, its rate-increase timer was scheduled before the cut); a CNP or
//! bytes handed in at `now` come after every timer due at `now`.

use super::params::{ClampRule, DcqcnParams, HyperIncrease, Reaction};
use crate::time::{Duration, Instant};

/// 1.0 in alpha's fixed point.
const ONE: u64 = 1 << 32;

/// Which rule the next rate-increase event follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// `RC = (RT + RC) / 2`: back towards the rate before the cut.
    FastRecovery,
    /// `RT += R_AI`, then `RC = (RT + RC) / 2`.
    AdditiveIncrease,
    /// `RT += R_HAI` (times i for the linear rule), then `RC = (RT + RC) / 2`.
    HyperIncrease,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Timer,
    Bytes,
}

/// The reaction point of one QP: current rate RC, target rate RT, alpha,
/// and the timers and counters that move them. See the module docs for
/// the arithmetic and the timer order, [`DcqcnParams`] and its
/// [`Reaction`] for the algorithm.
///
/// The stage of an increase event depends on how many timer events (TC)
/// and byte-counter events (BC) happened since the last cut, counted
/// before this one:
///
/// - with a byte counter: fast recovery while `max(TC, BC) < F`, hyper
///   increase with `i = min(TC, BC) - F + 1` once both reached F,
///   additive increase in between (§1 of the notes; ns3-rdma);
/// - without one (`byte_counter_bytes` 0), on TC alone: fast recovery
///   while `TC < F`, additive increase at `TC == F`, then hyper increase
///   with `i = TC - F` (the HPCC artifact, §3).
///
/// So there are F fast-recovery events after each cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dcqcn {
    p: DcqcnParams,
    max_rate: u64,
    min_rate: u64,
    g_q32: u64,
    rc: u64,
    rt: u64,
    alpha: u64,
    /// The latest `now` handed in; earlier times are taken as this.
    now: Instant,
    /// A CNP has been seen: the rate limiter is in use.
    active: bool,
    alpha_next: Option<Instant>,
    /// Periodic: a CNP arrived since the last alpha tick.
    alpha_cnp: bool,
    /// Periodic: the decrease ticks are `dec_anchor + k x period`.
    dec_anchor: Instant,
    /// Periodic: the tick that will cut (a CNP arrived since the last one).
    dec_next: Option<Instant>,
    last_cut: Option<Instant>,
    inc_next: Option<Instant>,
    timer_events: u32,
    byte_events: u32,
    byte_acc: u64,
    timer_increase_since_cut: bool,
    cnps: u64,
    rate_cuts: u64,
}

impl Dcqcn {
    /// A flow that has seen no CNP: both rates at the line rate (or
    /// `max_rate_bps` if lower). `params` should pass
    /// [`DcqcnParams::validate`]; zero periods are taken as 1 ns.
    pub fn new(params: DcqcnParams, line_rate_bps: u64, now: Instant) -> Dcqcn {
        debug_assert!(params.validate().is_ok(), "{:?}", params.validate());
        let max_rate = match params.max_rate_bps {
            0 => line_rate_bps,
            m => m.min(line_rate_bps),
        };
        let min_rate = params.min_rate_bps.min(max_rate);
        let g_q32 = frac_q32(params.g.num, params.g.den);
        Dcqcn {
            p: params,
            max_rate,
            min_rate,
            g_q32,
            rc: max_rate,
            rt: max_rate,
            alpha: 0,
            now,
            active: false,
            alpha_next: None,
            alpha_cnp: false,
            dec_anchor: now,
            dec_next: None,
            last_cut: None,
            inc_next: None,
            timer_events: 0,
            byte_events: 0,
            byte_acc: 0,
            timer_increase_since_cut: false,
            cnps: 0,
            rate_cuts: 0,
        }
    }

    pub fn params(&self) -> &DcqcnParams {
        &self.p
    }

    /// The current rate RC, bits/s: what the pacer should use.
    pub fn rate_bps(&self) -> u64 {
        self.rc
    }

    /// The target rate RT, bits/s.
    pub fn target_rate_bps(&self) -> u64 {
        self.rt
    }

    /// The ceiling of both rates: the line rate or `max_rate_bps`.
    pub fn max_rate_bps(&self) -> u64 {
        self.max_rate
    }

    /// alpha as of the last call (0 before the first CNP).
    pub fn alpha(&self) -> f64 {
        self.alpha as f64 / ONE as f64
    }

    /// alpha in its fixed point: units of 2^-32.
    pub fn alpha_q32(&self) -> u64 {
        self.alpha
    }

    /// CNPs received.
    pub fn cnps(&self) -> u64 {
        self.cnps
    }

    /// Rate cuts made.
    pub fn rate_cuts(&self) -> u64 {
        self.rate_cuts
    }

    /// Below the ceiling: the rate limiter is doing something.
    pub fn is_limited(&self) -> bool {
        self.rc < self.max_rate
    }

    /// The rule of the next increase event; `None` before the first cut.
    pub fn stage(&self) -> Option<Stage> {
        self.last_cut.map(|_| self.classify().0)
    }

    /// Increase events since the last cut: (timer, byte counter).
    pub fn increase_events(&self) -> (u32, u32) {
        (self.timer_events, self.byte_events)
    }

    /// The next instant at which the rate may change by itself, if any;
    /// call [`Dcqcn::on_timer`] then.
    pub fn next_timer(&self) -> Option<Instant> {
        let inc = self.inc_next.filter(|_| !self.at_ceiling());
        match (self.dec_next, inc) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs every timer due at `now`.
    pub fn on_timer(&mut self, now: Instant) {
        let now = self.clock(now);
        self.advance(now);
    }

    /// A CNP for this QP arrived at `now`.
    pub fn on_cnp(&mut self, now: Instant) {
        let now = self.clock(now);
        self.advance(now);
        self.cnps += 1;
        if !self.active {
            self.active = true;
            self.alpha = frac_q32(self.p.initial_alpha.num, self.p.initial_alpha.den);
            if self.p.rate_on_first_cnp_bps != 0 {
                let r = self.p.rate_on_first_cnp_bps.clamp(self.min_rate, self.max_rate);
                (self.rc, self.rt) = (r, r);
            }
            self.alpha_next = Some(now + self.alpha_period());
            match self.p.reaction {
                Reaction::Immediate => self.cut(now),
                Reaction::Periodic => {
                    self.dec_anchor = now;
                    self.dec_next = Some(now + self.decrease_period());
                }
            }
            return;
        }
        match self.p.reaction {
            Reaction::Immediate => {
                let may_cut = self.last_cut.is_none_or(|c| now - c >= self.p.rate_decrease_period);
                if may_cut {
                    self.cut(now);
                }
                self.alpha = self.alpha_congested(self.alpha);
                self.alpha_next = Some(now + self.alpha_period());
            }
            Reaction::Periodic => {
                self.alpha_cnp = true;
                if self.dec_next.is_none() {
                    let period = self.decrease_period().as_nanos();
                    let k = (now - self.dec_anchor).as_nanos() / period + 1;
                    self.dec_next = Some(self.dec_anchor + Duration(k.saturating_mul(period)));
                }
            }
        }
    }

    /// `bytes` of this QP went on the wire at `now` (drives the byte
    /// counter once the rate has been cut).
    pub fn on_bytes_sent(&mut self, bytes: u64, now: Instant) {
        let now = self.clock(now);
        if !self.active {
            // Before the first CNP no timer runs and nothing counts.
            return;
        }
        self.advance(now);
        let b = self.p.byte_counter_bytes;
        if b == 0 || self.last_cut.is_none() {
            return;
        }
        self.byte_acc = self.byte_acc.saturating_add(bytes);
        while self.byte_acc >= b {
            if self.at_ceiling() {
                // Every further event leaves both rates at the ceiling.
                let n = self.byte_acc / b;
                self.byte_events = self.byte_events.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
                self.byte_acc -= n * b;
                break;
            }
            self.byte_acc -= b;
            self.increase(Source::Bytes);
        }
    }

    fn clock(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    fn alpha_period(&self) -> Duration {
        self.p.alpha_period.max(Duration(1))
    }

    fn decrease_period(&self) -> Duration {
        self.p.rate_decrease_period.max(Duration(1))
    }

    fn increase_period(&self) -> Duration {
        self.p.rate_increase_period.max(Duration(1))
    }

    fn at_ceiling(&self) -> bool {
        self.rc == self.max_rate && self.rt == self.max_rate
    }

    /// Runs every timer due at or before `now`, earliest first (ties: alpha,
    /// increase, cut).
    fn advance(&mut self, now: Instant) {
        loop {
            let due = [self.alpha_next, self.inc_next, self.dec_next]
                .into_iter()
                .enumerate()
                .filter_map(|(kind, t)| t.filter(|&t| t <= now).map(|t| (t, kind)))
                .min();
            match due {
                None => return,
                Some((t, 0)) => self.alpha_tick(t, now),
                Some((t, 1)) => self.increase_tick(t, now),
                Some((t, _)) => {
                    self.dec_next = None;
                    self.cut(t);
                }
            }
        }
    }

    fn alpha_tick(&mut self, t: Instant, now: Instant) {
        let period = self.alpha_period();
        if self.alpha == 0 && !self.alpha_cnp {
            // Nothing moves alpha from 0 before the next CNP: skip to the
            // first tick after `now`.
            let k = (now - t).as_nanos() / period.as_nanos() + 1;
            self.alpha_next = Some(t + Duration(k.saturating_mul(period.as_nanos())));
            return;
        }
        self.alpha =
            if self.alpha_cnp { self.alpha_congested(self.alpha) } else { self.alpha_decayed(self.alpha) };
        self.alpha_cnp = false;
        self.alpha_next = Some(t + period);
    }

    fn increase_tick(&mut self, t: Instant, now: Instant) {
        let period = self.increase_period().as_nanos();
        if self.at_ceiling() {
            // Every event up to `now` only counts (a cut due before `now`
            // resets the counters and restarts this timer anyway).
            let n = (now - t).as_nanos() / period + 1;
            self.timer_events = self.timer_events.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
            self.timer_increase_since_cut = true;
            self.inc_next = Some(t + Duration(n.saturating_mul(period)));
            return;
        }
        self.increase(Source::Timer);
        self.inc_next = Some(t + Duration(period));
    }

    fn alpha_decayed(&self, alpha: u64) -> u64 {
        let (num, den) = (u128::from(self.p.g.num), u128::from(self.p.g.den.max(1)));
        (u128::from(alpha) * den.saturating_sub(num) / den) as u64
    }

    fn alpha_congested(&self, alpha: u64) -> u64 {
        (self.alpha_decayed(alpha) + self.g_q32).min(ONE)
    }

    /// A cut at `t`: clamp the target by the set's rule, cut RC, restart
    /// the increase machinery.
    fn cut(&mut self, t: Instant) {
        let clamp = match self.p.clamp_target {
            ClampRule::Always => true,
            ClampRule::AfterTimerIncrease => self.timer_increase_since_cut,
            ClampRule::Never => false,
        };
        if clamp {
            self.rt = self.rc;
        }
        let shift = 32 + u32::from(self.p.decrease_shift.min(31));
        let rc = u128::from(self.rc);
        let cut = (rc * ((1u128 << shift) - u128::from(self.alpha))) >> shift;
        let floor = rc * u128::from(self.p.min_decrease_factor_pct.min(100)) / 100;
        self.rc = (cut.max(floor) as u64).max(self.min_rate);
        self.rt = self.rt.max(self.rc);
        self.timer_events = 0;
        self.byte_events = 0;
        self.byte_acc = 0;
        self.timer_increase_since_cut = false;
        self.inc_next = Some(t + self.increase_period());
        self.last_cut = Some(t);
        self.rate_cuts += 1;
    }

    /// The stage of the next increase event and its i (hyper only).
    fn classify(&self) -> (Stage, u64) {
        let f = self.p.fast_recovery_steps;
        let (tc, bc) = (self.timer_events, self.byte_events);
        if self.p.byte_counter_bytes == 0 {
            return match tc.cmp(&f) {
                core::cmp::Ordering::Less => (Stage::FastRecovery, 0),
                core::cmp::Ordering::Equal => (Stage::AdditiveIncrease, 0),
                core::cmp::Ordering::Greater => (Stage::HyperIncrease, u64::from(tc - f)),
            };
        }
        if tc.max(bc) < f {
            (Stage::FastRecovery, 0)
        } else if tc.min(bc) >= f {
            (Stage::HyperIncrease, u64::from(tc.min(bc) - f) + 1)
        } else {
            (Stage::AdditiveIncrease, 0)
        }
    }

    fn increase(&mut self, source: Source) {
        let (stage, i) = self.classify();
        let step = match stage {
            Stage::FastRecovery => 0,
            Stage::AdditiveIncrease => self.p.ai_rate_bps,
            Stage::HyperIncrease => match self.p.hyper_increase {
                HyperIncrease::Linear => self.p.hai_rate_bps.saturating_mul(i),
                HyperIncrease::Constant => self.p.hai_rate_bps,
            },
        };
        self.rt = self.rt.saturating_add(step).min(self.max_rate);
        self.rc += (self.rt - self.rc).div_ceil(2);
        match source {
            Source::Timer => {
                self.timer_events = self.timer_events.saturating_add(1);
                self.timer_increase_since_cut = true;
            }
            Source::Bytes => self.byte_events = self.byte_events.saturating_add(1),
        }
    }
}

/// `floor(num / den x 2^32)`, at most 1.0.
fn frac_q32(num: u32, den: u32) -> u64 {
    ((u128::from(num) << 32) / u128::from(den.max(1))).min(u128::from(ONE)) as u64
}

/// The notification point of one receiving QP: answers a CE-marked packet
/// with a CNP unless it sent one less than `min_time_between_cnps` ago.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationPoint {
    min_interval: Duration,
    last_cnp: Option<Instant>,
    ce_packets: u64,
    cnps_sent: u64,
}

impl NotificationPoint {
    pub fn new(min_time_between_cnps: Duration) -> NotificationPoint {
        NotificationPoint { min_interval: min_time_between_cnps, last_cnp: None, ce_packets: 0, cnps_sent: 0 }
    }

    pub fn from_params(p: &DcqcnParams) -> NotificationPoint {
        NotificationPoint::new(p.min_time_between_cnps)
    }

    /// A CE-marked packet of this QP arrived at `now`: whether to send a
    /// CNP now (if so, it is recorded as sent).
    pub fn should_send_cnp(&mut self, now: Instant) -> bool {
        self.ce_packets += 1;
        let send = self.last_cnp.is_none_or(|last| now >= last && now - last >= self.min_interval);
        if send {
            self.last_cnp = Some(now);
            self.cnps_sent += 1;
        }
        send
    }

    /// CE-marked packets seen.
    pub fn ce_packets(&self) -> u64 {
        self.ce_packets
    }

    /// CNPs sent.
    pub fn cnps_sent(&self) -> u64 {
        self.cnps_sent
    }
}

#[cfg(test)]
mod tests;
