//! Exact parsing of the numbers in HPCC's input files.
//!
//! Decimals are read digit by digit and scaled with integers, so
//! `2.000000962` seconds is exactly 2,000,000,962,000 ps (a float would
//! give ...961,999). A value that is not a whole number of the target unit
//! (a delay finer than 1 ps, a rate finer than 1 bit/s) is an error, as is
//! an exponent (`1e-6`): the artifact's files never use one.

use crate::scenario::{Time, PS_PER_MS, PS_PER_NS, PS_PER_S, PS_PER_US};

/// Units of a link rate (ns-3 `DataRate` spellings; `B` means bytes).
const RATE_UNITS: &[(&str, u64)] = &[
    ("bps", 1),
    ("b/s", 1),
    ("Bps", 8),
    ("B/s", 8),
    ("Kbps", 1_000),
    ("kbps", 1_000),
    ("Kb/s", 1_000),
    ("kb/s", 1_000),
    ("KBps", 8_000),
    ("kBps", 8_000),
    ("KB/s", 8_000),
    ("kB/s", 8_000),
    ("Mbps", 1_000_000),
    ("Mb/s", 1_000_000),
    ("MBps", 8_000_000),
    ("MB/s", 8_000_000),
    ("Gbps", 1_000_000_000),
    ("Gb/s", 1_000_000_000),
    ("GBps", 8_000_000_000),
    ("GB/s", 8_000_000_000),
];

/// Units of a delay (ns-3 `Time` spellings), in picoseconds.
const DELAY_UNITS: &[(&str, Time)] =
    &[("ps", 1), ("ns", PS_PER_NS), ("us", PS_PER_US), ("ms", PS_PER_MS), ("s", PS_PER_S)];

/// `digits[.digits]` times `scale`, exactly; `None` when malformed, when
/// the result is not a whole number or when it overflows.
pub fn decimal_scaled(s: &str, scale: u64) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|c| c.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    let frac = frac.trim_end_matches('0');
    let den = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_v: u128 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    let scale = u128::from(scale);
    let whole = int.checked_mul(scale)?;
    let part = frac_v.checked_mul(scale)?;
    if part % den != 0 {
        return None;
    }
    u64::try_from(whole.checked_add(part / den)?).ok()
}

/// Splits `123.5Gbps` into the number and its unit suffix.
fn split_unit(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    s.split_at(end)
}

/// A rate with a unit (`100Gbps`, `20Mb/s`, `2.5Gbps`), in bits/s.
pub fn rate_bps(s: &str) -> Option<u64> {
    let (num, unit) = split_unit(s);
    let (_, scale) = RATE_UNITS.iter().find(|(u, _)| *u == unit)?;
    decimal_scaled(num, *scale)
}

/// A delay with a unit (`0.001ms`, `1000ns`, `1us`), in picoseconds.
pub fn delay_ps(s: &str) -> Option<Time> {
    let (num, unit) = split_unit(s);
    let (_, scale) = DELAY_UNITS.iter().find(|(u, _)| *u == unit)?;
    decimal_scaled(num, *scale)
}

/// A number of seconds without a unit (`2.000000962`), in picoseconds.
pub fn seconds_ps(s: &str) -> Option<Time> {
    decimal_scaled(s, PS_PER_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(seconds_ps("2.000000962"), Some(2_000_000_962_000));
        assert_eq!(seconds_ps("2"), Some(2 * PS_PER_S));
        assert_eq!(seconds_ps("4.00"), Some(4 * PS_PER_S));
        assert_eq!(seconds_ps(".5"), Some(PS_PER_S / 2));
        assert_eq!(seconds_ps("0.0000000000015"), None, "finer than 1 ps");
        assert_eq!(seconds_ps("1e-6"), None);
        assert_eq!(seconds_ps(""), None);
        assert_eq!(seconds_ps("."), None);
        assert_eq!(seconds_ps("-1"), None);
        assert_eq!(seconds_ps("99999999999999999999"), None, "overflow");
    }

    #[test]
    fn rates_and_delays_with_units() {
        assert_eq!(rate_bps("100Gbps"), Some(100_000_000_000));
        assert_eq!(rate_bps("400Gbps"), Some(400_000_000_000));
        assert_eq!(rate_bps("2.5Gbps"), Some(2_500_000_000));
        assert_eq!(rate_bps("20Mb/s"), Some(20_000_000));
        assert_eq!(rate_bps("10Kbps"), Some(10_000));
        assert_eq!(rate_bps("7bps"), Some(7));
        assert_eq!(rate_bps("1MBps"), Some(8_000_000));
        assert_eq!(rate_bps("100"), None, "a unit is required");
        assert_eq!(rate_bps("100Gbit"), None);
        assert_eq!(delay_ps("0.001ms"), Some(PS_PER_US));
        assert_eq!(delay_ps("1000ns"), Some(PS_PER_US));
        assert_eq!(delay_ps("1us"), Some(PS_PER_US));
        assert_eq!(delay_ps("0.5s"), Some(PS_PER_S / 2));
        assert_eq!(delay_ps("1.5ps"), None);
        assert_eq!(delay_ps("1000"), None);
        assert_eq!(delay_ps("ms"), None);
    }
}
