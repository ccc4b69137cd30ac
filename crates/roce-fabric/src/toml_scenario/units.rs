//! Quantities as a scenario file writes them: rates, durations and sizes
//! with units (read exactly, to a whole number of b/s, picoseconds or
//! bytes; written back in the largest unit that divides them), and ranges
//! of node names ("h1..h8").

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::scenario::*;

/// An integer or a string with a unit, as written in the file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Qty {
    Int(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for Qty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Qty, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Qty;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a non-negative integer or a string with a unit (\"100G\", \"1us\", \"64KiB\")")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Qty, E> {
                Ok(Qty::Int(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Qty, E> {
                u64::try_from(v).map(Qty::Int).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Qty, E> {
                Ok(Qty::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Qty {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Qty::Int(v) => s.serialize_u64(*v),
            Qty::Text(t) => s.serialize_str(t),
        }
    }
}

impl std::fmt::Display for Qty {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Qty::Int(v) => write!(f, "{v}"),
            Qty::Text(s) => f.write_str(s),
        }
    }
}

pub(super) const RATE_UNITS: &[(&str, u128)] = &[
    ("bps", 1),
    ("b/s", 1),
    ("kbps", 1_000),
    ("kb/s", 1_000),
    ("k", 1_000),
    ("mbps", 1_000_000),
    ("mb/s", 1_000_000),
    ("m", 1_000_000),
    ("gbps", 1_000_000_000),
    ("gb/s", 1_000_000_000),
    ("g", 1_000_000_000),
    ("tbps", 1_000_000_000_000),
    ("tb/s", 1_000_000_000_000),
    ("t", 1_000_000_000_000),
];

pub(super) const TIME_UNITS: &[(&str, u128)] = &[
    ("ps", 1),
    ("ns", PS_PER_NS as u128),
    ("us", PS_PER_US as u128),
    ("µs", PS_PER_US as u128),
    ("ms", PS_PER_MS as u128),
    ("s", PS_PER_S as u128),
];

pub(super) const SIZE_UNITS: &[(&str, u128)] = &[
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
];

/// `number unit` with a decimal number, exactly (no floating point).
pub(super) fn parse_with_units(text: &str, units: &[(&str, u128)], what: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(t.len());
    let (num, unit) = (t[..split].replace('_', ""), t[split..].trim());
    if num.is_empty() {
        return Err(format!("expected a number followed by a unit of {what}"));
    }
    let mult = if unit.is_empty() {
        if num.chars().all(|c| c == '0' || c == '.') {
            1 // "0" needs no unit
        } else {
            let names: Vec<&str> = units.iter().map(|u| u.0).collect();
            return Err(format!("missing unit ({})", names.join(", ")));
        }
    } else {
        let lower = unit.to_lowercase();
        match units.iter().find(|(u, _)| *u == lower) {
            Some((_, m)) => *m,
            None => {
                let names: Vec<&str> = units.iter().map(|u| u.0).collect();
                return Err(format!("unknown unit {unit:?} (expected one of {})", names.join(", ")));
            }
        }
    };
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num.as_str(), ""),
    };
    if frac.contains('.') || (int.is_empty() && frac.is_empty()) || frac.len() > 18 {
        return Err("not a number".into());
    }
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits.parse().map_err(|_| "number too large".to_string())?;
    let scale = 10u128.pow(frac.len() as u32);
    let total = mantissa.checked_mul(mult).ok_or_else(|| "number too large".to_string())?;
    if total % scale != 0 {
        return Err(format!("not a whole number of {what}"));
    }
    u64::try_from(total / scale).map_err(|_| "number too large".to_string())
}

pub(crate) fn rate(key: &str, q: &Qty) -> Result<u64, ScenarioError> {
    let v = match q {
        Qty::Int(v) => *v,
        Qty::Text(t) => {
            parse_with_units(t, RATE_UNITS, "bits per second").map_err(|r| bad_value(key, t, r))?
        }
    };
    if v == 0 {
        return Err(bad_value(key, &q.to_string(), "a rate must be above zero"));
    }
    Ok(v)
}

pub(crate) fn duration(key: &str, q: &Qty) -> Result<Time, ScenarioError> {
    match q {
        Qty::Int(0) => Ok(0),
        Qty::Int(v) => Err(bad_value(
            key,
            &v.to_string(),
            "a duration needs a unit: write it as a string, e.g. \"10us\"",
        )),
        Qty::Text(t) => parse_with_units(t, TIME_UNITS, "picoseconds").map_err(|r| bad_value(key, t, r)),
    }
}

pub(crate) fn size(key: &str, q: &Qty) -> Result<u64, ScenarioError> {
    match q {
        Qty::Int(v) => Ok(*v),
        Qty::Text(t) => parse_with_units(t, SIZE_UNITS, "bytes").map_err(|r| bad_value(key, t, r)),
    }
}

/// Expands "h1..h8" (or "h1..8", or "h01..h16" keeping the width) into
/// names; any other entry stands for itself.
pub(super) fn expand_names(key: &str, entries: &[String]) -> Result<Vec<String>, ScenarioError> {
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let Some((left, right)) = e.split_once("..") else {
            out.push(e.clone());
            continue;
        };
        let k = format!("{key}[{i}]");
        let bad = || bad_value(&k, e, "a range is written \"h1..h8\" (same prefix, numbers ascending)");
        let ds = left.len() - left.chars().rev().take_while(|c| c.is_ascii_digit()).count();
        let (prefix, from) = left.split_at(ds);
        let de = right.len() - right.chars().rev().take_while(|c| c.is_ascii_digit()).count();
        let (rprefix, to) = right.split_at(de);
        if from.is_empty() || to.is_empty() || !(rprefix.is_empty() || rprefix == prefix) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (from.parse().map_err(|_| bad())?, to.parse().map_err(|_| bad())?);
        if a > b || b - a > 1_000_000 {
            return Err(bad());
        }
        let width = if from.starts_with('0') && from.len() > 1 { from.len() } else { 0 };
        out.extend((a..=b).map(|n| format!("{prefix}{n:0width$}")));
    }
    Ok(out)
}

/// `v` in the largest unit of `units` (largest first) that divides it.
pub(super) fn with_unit(v: u64, units: &[(&str, u64)]) -> Qty {
    match units.iter().find(|(_, m)| v % m == 0) {
        Some((u, m)) if v > 0 => Qty::Text(format!("{}{u}", v / m)),
        _ => Qty::Int(v),
    }
}

pub(super) fn fmt_rate(v: u64) -> Qty {
    let units = [("Tbps", 1_000_000_000_000), ("Gbps", 1_000_000_000), ("Mbps", 1_000_000), ("Kbps", 1_000)];
    match with_unit(v, &units) {
        Qty::Int(v) => Qty::Text(format!("{v}bps")),
        q => q,
    }
}

pub(super) fn fmt_time(v: Time) -> Qty {
    let units = [("s", PS_PER_S), ("ms", PS_PER_MS), ("us", PS_PER_US), ("ns", PS_PER_NS), ("ps", 1)];
    match with_unit(v, &units) {
        Qty::Int(_) => Qty::Text("0".into()),
        q => q,
    }
}

pub(super) fn fmt_size(v: u64) -> Qty {
    with_unit(
        v,
        &[
            ("GB", 1_000_000_000),
            ("GiB", 1 << 30),
            ("MB", 1_000_000),
            ("MiB", 1 << 20),
            ("KB", 1_000),
            ("KiB", 1 << 10),
        ],
    )
}
