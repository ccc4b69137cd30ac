//! Our own TOML scenario format: everything a [`Scenario`] says, with nodes
//! named, quantities written with units, and generators for repetitive
//! parts (host groups, incasts).
//!
//! # The format
//!
//! ```toml
//! name = "example"           # default: the file's stem (from_path) or "scenario"
//! seed = 1                   # default 1
//! framing = "ethernet"       # or "ppp"; default ethernet
//! stop = "50ms"              # optional: run no further than this
//! deadlock_check = "100us"   # default 100us; "0" = never
//!
//! hosts = ["x", "y1..y2"]    # host names; "y1..y2" is y1, y2 (also "h01..h16")
//! switches = ["sw", "s1"]
//!
//! [[host_group]]             # many hosts at once: h1..h8, each linked to sw
//! prefix = "h"
//! count = 8
//! first = 1                  # default 1
//! attach = "sw"              # optional: link each host to this node
//! rate = "100G"              # default: [link_defaults]
//! delay = "1us"
//!
//! [link_defaults]            # for links that leave rate/delay/loss out
//! rate = "100Gbps"
//! delay = "1us"
//! loss = 0.0
//!
//! [[links]]
//! a = "sw"
//! b = "s1"
//! rate = "400G"              # optional with [link_defaults]
//! delay = "500ns"
//! loss = 0.0                 # optional; and further faults, each optional:
//! faults = { jitter = "0ns", reorder = 0.0, reorder_delay = "0ns", duplicate = 0.0, corrupt = 0.0 }
//!
//! [[links]]
//! a = "x"
//! b = "s1"
//!
//! [[links]]
//! a = "y1"
//! b = "s1"
//!
//! [[links]]
//! a = "y2"
//! b = "s1"
//!
//! [[flows]]
//! src = "h1"
//! dst = "x"
//! size = "1MB"               # KB = 1000 B, KiB = 1024 B; an integer is bytes
//! start = "10us"             # default 0
//! priority = 3               # default 3
//! op = "write"               # or "send"; default write
//!
//! [[incast]]                 # one flow from each sender to the receiver
//! senders = ["h1..h7"]       # or a count: the first N hosts other than the receiver
//! receiver = "h8"
//! size = "1MB"
//! start = "0us"              # default 0
//! stagger = "1us"            # optional: sender k starts k x stagger later
//! priority = 3
//! op = "write"
//!
//! [switch]                   # every key optional: default SwitchConfig::hpcc()
//! buffer = "32MiB"
//! reserve = "4KiB"
//! headroom_rtts = 3.0
//! lossless = [3]             # lossless priorities
//! pfc = true
//! ecn = true
//! scheduling = "strict"      # or "dwrr" with dwrr_weights = [8 integers]
//! pfc_threshold = { kind = "static", xoff = "40KB", xon = "20KB" }
//! pause_quanta = 65535       # XOFF pause time (512-bit quanta), refreshed;
//!                            # absent: XOFF/XON without a timer (HPCC)
//! # or { kind = "dynamic", base_shift = 3, base_rate = "100G", resume_offset = "3KiB" }
//! [[switch.ecn_rules]]       # replaces the default rules; ascending rates
//! rate = "100G"
//! kmin = "400KB"
//! kmax = "1600KB"
//! pmax = 0.2
//!
//! [nic]                      # every key optional: default NicConfig::hpcc()
//! mtu = 1024
//! cc = "dcqcn"               # or "none"
//! dcqcn_set = "hpcc"         # paper, nvidia or hpcc
//! dcqcn_params = ["g=1/256"]
//! ack_priority = 7           # or "flow": ACKs at the flow's priority
//! chunk = "64KiB"
//! max_unacked_psns = 4194304 # the QP's send window, 1..=2^23
//! ack_req_every = 64         # an ACK at least every N packets (1: each)
//! rx_xoff = "64KiB"
//!
//! [[routes]]                 # at switch, frames for dst leave towards via
//! switch = "sw"
//! dst = "x"
//! via = "s1"
//!
//! [[events]]
//! at = "100us"
//! kind = "link_down"         # link_down/link_up take a and b (every link
//! a = "sw"                   # between them); nic_stall/nic_resume take host
//! b = "s1"
//!
//! [watchdog]
//! timeout = "200us"
//! restore = "400us"
//!
//! [monitor]
//! ports = ["sw:9", "sw->h8"] # node:port (from 1), or node->peer: node's port facing peer
//! interval = "1us"           # default 1us
//! flow_rates = true          # default false
//! ```
//!
//! # Rules
//!
//! - Node ids: the `hosts` list first, then each `[[host_group]]`'s hosts,
//!   then the `switches` list. Names are unique, non-empty, and contain
//!   neither `:` nor `->`.
//! - Links (and so port numbers, from 1 per node in link order): first
//!   the `[[host_group]]` attachments, in group and host order, then the
//!   `[[links]]` in order.
//! - Every host has exactly one link (its NIC port). No link joins a node
//!   to itself; every rate is above zero; loss is within [0, 1].
//! - Rates: an integer (b/s) or a number with `bps`, `Kbps`, `Mbps`,
//!   `Gbps`, `Tbps` (also `K`, `M`, `G`, `T`, `Gb/s`...), decimal factors.
//!   Durations: a number with `ps`, `ns`, `us` (or `µs`), `ms` or `s`, or
//!   `"0"`. Sizes: an integer (bytes) or a number with `B`, `KB`, `MB`,
//!   `GB` (powers of 1000) or `KiB`, `MiB`, `GiB` (powers of 1024). Each
//!   must come to a whole number of b/s, picoseconds or bytes.
//! - Priorities are 0..=7; ECN rules have kmin <= kmax and pmax within
//!   [0, 1]; a static PFC threshold has xon <= xoff.
//! - Flows go between two different hosts and carry at least one byte.
//! - Unknown keys are errors. Every error names the key and the value.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::scenario::*;

/// Why a scenario (TOML or built) is not acceptable.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The TOML does not parse, has an unknown key, or a value of the wrong
    /// type (the message names the line and key).
    #[error("{0}")]
    Syntax(String),
    #[error("{key}: cannot read {value:?}: {reason}")]
    BadValue { key: String, value: String, reason: String },
    #[error("{key}: no node named {name:?}")]
    UnknownNode { key: String, name: String },
    #[error("{key}: {name:?} is a {found}, expected a {expected}")]
    WrongKind { key: String, name: String, expected: &'static str, found: &'static str },
    #[error("node name {0:?} is declared twice")]
    DuplicateName(String),
    #[error("{key}: link from {node:?} to itself")]
    SelfLink { key: String, node: String },
    #[error("host {host:?} has {links} links; a host has exactly one (its NIC port)")]
    HostLinks { host: String, links: usize },
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: String },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid { key: key.into(), reason: reason.into() }
}

fn bad_value(key: &str, value: &str, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::BadValue { key: key.to_string(), value: value.to_string(), reason: reason.into() }
}

/// Reads a scenario from TOML text (see the module documentation).
pub fn from_str(s: &str) -> Result<Scenario, ScenarioError> {
    build(s, None)
}

/// Reads a scenario from a TOML file; its name defaults to the file's stem.
pub fn from_path(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ScenarioError::Io { path: path.to_path_buf(), source })?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    build(&text, stem)
}

// ---------------------------------------------------------------------------
// Quantities

/// An integer or a string with a unit, as written in the file.
#[derive(Debug, Clone, PartialEq)]
enum Qty {
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

const RATE_UNITS: &[(&str, u128)] = &[
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

const TIME_UNITS: &[(&str, u128)] = &[
    ("ps", 1),
    ("ns", PS_PER_NS as u128),
    ("us", PS_PER_US as u128),
    ("µs", PS_PER_US as u128),
    ("ms", PS_PER_MS as u128),
    ("s", PS_PER_S as u128),
];

const SIZE_UNITS: &[(&str, u128)] = &[
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
];

/// `number unit` with a decimal number, exactly (no floating point).
fn parse_with_units(text: &str, units: &[(&str, u128)], what: &str) -> Result<u64, String> {
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

fn rate(key: &str, q: &Qty) -> Result<u64, ScenarioError> {
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

fn duration(key: &str, q: &Qty) -> Result<Time, ScenarioError> {
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

fn size(key: &str, q: &Qty) -> Result<u64, ScenarioError> {
    match q {
        Qty::Int(v) => Ok(*v),
        Qty::Text(t) => parse_with_units(t, SIZE_UNITS, "bytes").map_err(|r| bad_value(key, t, r)),
    }
}

fn priority(key: &str, p: u8) -> Result<u8, ScenarioError> {
    if p as usize >= PRIORITIES {
        return Err(bad_value(key, &p.to_string(), "a priority is 0..=7"));
    }
    Ok(p)
}

/// Expands "h1..h8" (or "h1..8", or "h01..h16" keeping the width) into
/// names; any other entry stands for itself.
fn expand_names(key: &str, entries: &[String]) -> Result<Vec<String>, ScenarioError> {
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

// ---------------------------------------------------------------------------
// The file's shape

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    framing: Option<Framing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deadlock_check: Option<Qty>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    switches: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    host_group: Vec<HostGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    link_defaults: Option<LinkDefaults>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    links: Vec<Link>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    flows: Vec<Flow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    incast: Vec<Incast>,
    #[serde(skip_serializing_if = "Option::is_none")]
    switch: Option<SwitchT>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nic: Option<NicT>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    events: Vec<Event>,
    #[serde(skip_serializing_if = "Option::is_none")]
    watchdog: Option<WatchdogT>,
    #[serde(skip_serializing_if = "Option::is_none")]
    monitor: Option<MonitorT>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostGroup {
    prefix: String,
    count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    first: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attach: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loss: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LinkDefaults {
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loss: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Link {
    a: String,
    b: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loss: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    faults: Option<FaultsT>,
}

/// `faults = { jitter = "100ns", reorder = 0.01, reorder_delay = "2us",
/// duplicate = 0.001, corrupt = 0.001 }` on a link.
#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FaultsT {
    #[serde(skip_serializing_if = "Option::is_none")]
    jitter: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reorder: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reorder_delay: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    corrupt: Option<f64>,
}

fn link_faults(key: &str, f: &Option<FaultsT>) -> Result<LinkFaults, ScenarioError> {
    let Some(f) = f else { return Ok(LinkFaults::default()) };
    let prob = |name: &str, v: Option<f64>| -> Result<f64, ScenarioError> {
        match v {
            None => Ok(0.0),
            Some(p) if (0.0..=1.0).contains(&p) => Ok(p),
            Some(p) => {
                Err(bad_value(&format!("{key}.faults.{name}"), &p.to_string(), "a probability, 0 to 1"))
            }
        }
    };
    let time = |name: &str, q: &Option<Qty>| -> Result<Time, ScenarioError> {
        q.as_ref().map_or(Ok(0), |q| duration(&format!("{key}.faults.{name}"), q))
    };
    Ok(LinkFaults {
        jitter_ps: time("jitter", &f.jitter)?,
        reorder: prob("reorder", f.reorder)?,
        reorder_delay_ps: time("reorder_delay", &f.reorder_delay)?,
        duplicate: prob("duplicate", f.duplicate)?,
        corrupt: prob("corrupt", f.corrupt)?,
    })
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Flow {
    src: String,
    dst: String,
    size: Qty,
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    op: Option<FlowOp>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Senders {
    Count(u64),
    Names(Vec<String>),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Incast {
    senders: Senders,
    receiver: String,
    size: Qty,
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stagger: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    op: Option<FlowOp>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchT {
    #[serde(skip_serializing_if = "Option::is_none")]
    buffer: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reserve: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headroom_rtts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lossless: Option<Vec<u8>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pfc: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ecn: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduling: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dwrr_weights: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pfc_threshold: Option<PfcT>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ecn_rules: Option<Vec<EcnT>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pause_quanta: Option<u16>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PfcT {
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    xoff: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    xon: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_shift: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_rate: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resume_offset: Option<Qty>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EcnT {
    rate: Qty,
    kmin: Qty,
    kmax: Qty,
    pmax: f64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum AckPrio {
    Prio(u8),
    Word(String),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NicT {
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cc: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dcqcn_set: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dcqcn_params: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ack_priority: Option<AckPrio>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunk: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_unacked_psns: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ack_req_every: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rx_xoff: Option<Qty>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Route {
    switch: String,
    dst: String,
    via: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Event {
    at: Qty,
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    a: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    b: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchdogT {
    timeout: Qty,
    restore: Qty,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MonitorT {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ports: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interval: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flow_rates: Option<bool>,
}

// ---------------------------------------------------------------------------
// Building

struct Names {
    ids: HashMap<String, NodeId>,
    nodes: Vec<NodeSpec>,
}

impl Names {
    fn add(&mut self, key: &str, name: &str, kind: NodeKind) -> Result<(), ScenarioError> {
        if name.is_empty() || name.contains(':') || name.contains("->") || name.trim() != name {
            return Err(bad_value(key, name, "a node name is non-empty, without spaces around, ':' or '->'"));
        }
        if self.ids.insert(name.to_string(), self.nodes.len()).is_some() {
            return Err(ScenarioError::DuplicateName(name.to_string()));
        }
        self.nodes.push(NodeSpec { kind, name: name.to_string() });
        Ok(())
    }

    fn get(&self, key: &str, name: &str) -> Result<NodeId, ScenarioError> {
        self.ids
            .get(name)
            .copied()
            .ok_or_else(|| ScenarioError::UnknownNode { key: key.into(), name: name.into() })
    }

    fn get_kind(&self, key: &str, name: &str, kind: NodeKind) -> Result<NodeId, ScenarioError> {
        let id = self.get(key, name)?;
        if self.nodes[id].kind != kind {
            return Err(ScenarioError::WrongKind {
                key: key.into(),
                name: name.into(),
                expected: kind_name(kind),
                found: kind_name(self.nodes[id].kind),
            });
        }
        Ok(id)
    }
}

fn kind_name(k: NodeKind) -> &'static str {
    match k {
        NodeKind::Host => "host",
        NodeKind::Switch => "switch",
    }
}

fn loss(key: &str, l: f64) -> Result<f64, ScenarioError> {
    if !(0.0..=1.0).contains(&l) {
        return Err(bad_value(key, &l.to_string(), "loss is a probability within [0, 1]"));
    }
    Ok(l)
}

fn build(text: &str, default_name: Option<String>) -> Result<Scenario, ScenarioError> {
    let f: File = toml::from_str(text).map_err(|e| ScenarioError::Syntax(e.to_string()))?;

    // Nodes.
    let mut names = Names { ids: HashMap::new(), nodes: Vec::new() };
    for n in expand_names("hosts", &f.hosts)? {
        names.add("hosts", &n, NodeKind::Host)?;
    }
    let mut group_hosts = Vec::new();
    for (g, hg) in f.host_group.iter().enumerate() {
        let key = format!("host_group[{g}]");
        if hg.count == 0 {
            return Err(invalid(format!("{key}.count"), "a host group has at least one host"));
        }
        let first = hg.first.unwrap_or(1);
        let mut ids = Vec::new();
        for i in 0..hg.count {
            let n = format!("{}{}", hg.prefix, u64::from(first) + u64::from(i));
            names.add(&format!("{key}.prefix"), &n, NodeKind::Host)?;
            ids.push(names.nodes.len() - 1);
        }
        group_hosts.push(ids);
    }
    for n in expand_names("switches", &f.switches)? {
        names.add("switches", &n, NodeKind::Switch)?;
    }

    // Links.
    let defaults = f.link_defaults.unwrap_or_default();
    let link_rate = |key: &str, r: &Option<Qty>| -> Result<u64, ScenarioError> {
        match r.as_ref().or(defaults.rate.as_ref()) {
            Some(q) => rate(key, q),
            None => Err(invalid(key, "no rate, and no [link_defaults] rate")),
        }
    };
    let link_delay = |key: &str, d: &Option<Qty>| -> Result<Time, ScenarioError> {
        match d.as_ref().or(defaults.delay.as_ref()) {
            Some(q) => duration(key, q),
            None => Err(invalid(key, "no delay, and no [link_defaults] delay")),
        }
    };
    let link_loss = |key: &str, l: Option<f64>| loss(key, l.or(defaults.loss).unwrap_or(0.0));
    let mut links = Vec::new();
    for (g, hg) in f.host_group.iter().enumerate() {
        let key = format!("host_group[{g}]");
        let Some(attach) = &hg.attach else {
            if hg.rate.is_some() || hg.delay.is_some() || hg.loss.is_some() {
                return Err(invalid(
                    key,
                    "rate, delay and loss are for the links of attach, which is missing",
                ));
            }
            continue;
        };
        let to = names.get(&format!("{key}.attach"), attach)?;
        let rate_bps = link_rate(&format!("{key}.rate"), &hg.rate)?;
        let delay_ps = link_delay(&format!("{key}.delay"), &hg.delay)?;
        let loss = link_loss(&format!("{key}.loss"), hg.loss)?;
        for &h in &group_hosts[g] {
            links.push(LinkSpec { a: h, b: to, rate_bps, delay_ps, loss, faults: LinkFaults::default() });
        }
    }
    for (i, l) in f.links.iter().enumerate() {
        let key = format!("links[{i}]");
        let a = names.get(&format!("{key}.a"), &l.a)?;
        let b = names.get(&format!("{key}.b"), &l.b)?;
        if a == b {
            return Err(ScenarioError::SelfLink { key, node: l.a.clone() });
        }
        links.push(LinkSpec {
            a,
            b,
            rate_bps: link_rate(&format!("{key}.rate"), &l.rate)?,
            delay_ps: link_delay(&format!("{key}.delay"), &l.delay)?,
            loss: link_loss(&format!("{key}.loss"), l.loss)?,
            faults: link_faults(&key, &l.faults)?,
        });
    }

    // Flows.
    let mut flows = Vec::new();
    for (i, fl) in f.flows.iter().enumerate() {
        let key = format!("flows[{i}]");
        let src = names.get_kind(&format!("{key}.src"), &fl.src, NodeKind::Host)?;
        let dst = names.get_kind(&format!("{key}.dst"), &fl.dst, NodeKind::Host)?;
        if src == dst {
            return Err(invalid(key, format!("a flow from {:?} to itself", fl.src)));
        }
        let size = size(&format!("{key}.size"), &fl.size)?;
        if size == 0 {
            return Err(bad_value(
                &format!("{key}.size"),
                &fl.size.to_string(),
                "a flow carries at least one byte",
            ));
        }
        flows.push(FlowSpec {
            src,
            dst,
            priority: priority(&format!("{key}.priority"), fl.priority.unwrap_or(3))?,
            size,
            start_ps: fl
                .start
                .as_ref()
                .map(|q| duration(&format!("{key}.start"), q))
                .transpose()?
                .unwrap_or(0),
            op: fl.op.unwrap_or_default(),
        });
    }
    for (i, ic) in f.incast.iter().enumerate() {
        let key = format!("incast[{i}]");
        let dst = names.get_kind(&format!("{key}.receiver"), &ic.receiver, NodeKind::Host)?;
        let senders: Vec<NodeId> = match &ic.senders {
            Senders::Count(n) => {
                let all: Vec<NodeId> = (0..names.nodes.len())
                    .filter(|&h| names.nodes[h].kind == NodeKind::Host && h != dst)
                    .collect();
                if *n == 0 || *n as usize > all.len() {
                    return Err(bad_value(
                        &format!("{key}.senders"),
                        &n.to_string(),
                        format!("between 1 and {} hosts other than the receiver", all.len()),
                    ));
                }
                all[..*n as usize].to_vec()
            }
            Senders::Names(list) => {
                let k = format!("{key}.senders");
                let list = expand_names(&k, list)?;
                if list.is_empty() {
                    return Err(invalid(k, "an incast has at least one sender"));
                }
                let mut ids = Vec::new();
                for n in &list {
                    let id = names.get_kind(&k, n, NodeKind::Host)?;
                    if id == dst {
                        return Err(invalid(k, format!("the receiver {n:?} is also a sender")));
                    }
                    ids.push(id);
                }
                ids
            }
        };
        let size = size(&format!("{key}.size"), &ic.size)?;
        if size == 0 {
            return Err(bad_value(
                &format!("{key}.size"),
                &ic.size.to_string(),
                "a flow carries at least one byte",
            ));
        }
        let start = ic.start.as_ref().map(|q| duration(&format!("{key}.start"), q)).transpose()?.unwrap_or(0);
        let stagger =
            ic.stagger.as_ref().map(|q| duration(&format!("{key}.stagger"), q)).transpose()?.unwrap_or(0);
        let prio = priority(&format!("{key}.priority"), ic.priority.unwrap_or(3))?;
        for (k, &src) in senders.iter().enumerate() {
            flows.push(FlowSpec {
                src,
                dst,
                priority: prio,
                size,
                start_ps: start + stagger * k as u64,
                op: ic.op.unwrap_or_default(),
            });
        }
    }

    let switch = match &f.switch {
        None => SwitchConfig::hpcc(),
        Some(s) => switch_config(s)?,
    };
    let nic = match &f.nic {
        None => NicConfig::hpcc(),
        Some(n) => nic_config(n)?,
    };

    // Routes.
    let neighbours =
        |a: NodeId, b: NodeId| links.iter().any(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a));
    let mut routes = Vec::new();
    for (i, r) in f.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        let switch = names.get_kind(&format!("{key}.switch"), &r.switch, NodeKind::Switch)?;
        let dst = names.get_kind(&format!("{key}.dst"), &r.dst, NodeKind::Host)?;
        let via = names.get(&format!("{key}.via"), &r.via)?;
        if !neighbours(switch, via) {
            return Err(invalid(format!("{key}.via"), format!("{:?} has no link to {:?}", r.switch, r.via)));
        }
        routes.push(RouteSpec { switch, dst, via });
    }

    // Events.
    let mut events = Vec::new();
    for (i, e) in f.events.iter().enumerate() {
        let key = format!("events[{i}]");
        let at_ps = duration(&format!("{key}.at"), &e.at)?;
        match e.kind.as_str() {
            "link_down" | "link_up" => {
                let (Some(a), Some(b), None) = (&e.a, &e.b, &e.host) else {
                    return Err(invalid(key, format!("{} takes a and b (the two ends), not host", e.kind)));
                };
                let (ia, ib) = (names.get(&format!("{key}.a"), a)?, names.get(&format!("{key}.b"), b)?);
                let found: Vec<usize> = (0..links.len())
                    .filter(|&l| {
                        (links[l].a == ia && links[l].b == ib) || (links[l].a == ib && links[l].b == ia)
                    })
                    .collect();
                if found.is_empty() {
                    return Err(invalid(key, format!("no link between {a:?} and {b:?}")));
                }
                for link in found {
                    let kind = if e.kind == "link_down" {
                        EventKind::LinkDown { link }
                    } else {
                        EventKind::LinkUp { link }
                    };
                    events.push(TimedEvent { at_ps, kind });
                }
            }
            "nic_stall" | "nic_resume" => {
                let (None, None, Some(h)) = (&e.a, &e.b, &e.host) else {
                    return Err(invalid(key, format!("{} takes host, not a or b", e.kind)));
                };
                let host = names.get_kind(&format!("{key}.host"), h, NodeKind::Host)?;
                let kind = if e.kind == "nic_stall" {
                    EventKind::NicStall { host }
                } else {
                    EventKind::NicResume { host }
                };
                events.push(TimedEvent { at_ps, kind });
            }
            other => {
                return Err(bad_value(
                    &format!("{key}.kind"),
                    other,
                    "expected link_down, link_up, nic_stall or nic_resume",
                ))
            }
        }
    }

    let watchdog = match &f.watchdog {
        None => None,
        Some(w) => {
            let timeout_ps = duration("watchdog.timeout", &w.timeout)?;
            if timeout_ps == 0 {
                return Err(bad_value(
                    "watchdog.timeout",
                    &w.timeout.to_string(),
                    "the timeout must be above zero",
                ));
            }
            Some(WatchdogConfig { timeout_ps, restore_ps: duration("watchdog.restore", &w.restore)? })
        }
    };

    // Monitor.
    let ports_of = |n: NodeId| -> Vec<NodeId> {
        links
            .iter()
            .filter_map(|l| {
                if l.a == n {
                    Some(l.b)
                } else if l.b == n {
                    Some(l.a)
                } else {
                    None
                }
            })
            .collect()
    };
    let monitor = match &f.monitor {
        None => MonitorConfig::default(),
        Some(m) => {
            let mut ports = Vec::new();
            for (i, p) in m.ports.iter().enumerate() {
                let key = format!("monitor.ports[{i}]");
                let port = if let Some((node, peer)) = p.split_once("->") {
                    let n = names.get(&key, node.trim())?;
                    let peer_id = names.get(&key, peer.trim())?;
                    match ports_of(n).iter().position(|&q| q == peer_id) {
                        Some(k) => (n, k as u32 + 1),
                        None => return Err(invalid(key, format!("{node:?} has no link to {peer:?}"))),
                    }
                } else if let Some((node, port)) = p.split_once(':') {
                    let n = names.get(&key, node.trim())?;
                    let deg = ports_of(n).len();
                    match port.trim().parse::<u32>() {
                        Ok(k) if k >= 1 && k as usize <= deg => (n, k),
                        _ => return Err(bad_value(&key, p, format!("{node:?} has ports 1..={deg}"))),
                    }
                } else {
                    return Err(bad_value(&key, p, "expected \"node:port\" or \"node->peer\""));
                };
                ports.push(port);
            }
            let interval_ps = m
                .interval
                .as_ref()
                .map(|q| duration("monitor.interval", q))
                .transpose()?
                .unwrap_or(PS_PER_US);
            MonitorConfig { ports, interval_ps, flow_rates: m.flow_rates.unwrap_or(false) }
        }
    };

    let scn = Scenario {
        name: f.name.or(default_name).unwrap_or_else(|| "scenario".into()),
        seed: f.seed.unwrap_or(1),
        nodes: names.nodes,
        links,
        flows,
        switch,
        nic,
        framing: f.framing.unwrap_or_default(),
        routes,
        events,
        watchdog,
        stop_ps: f.stop.as_ref().map(|q| duration("stop", q)).transpose()?,
        deadlock_check_ps: match &f.deadlock_check {
            Some(q) => duration("deadlock_check", q)?,
            None => 100 * PS_PER_US,
        },
        monitor,
    };
    validate(&scn)?;
    Ok(scn)
}

fn switch_config(s: &SwitchT) -> Result<SwitchConfig, ScenarioError> {
    let mut c = SwitchConfig::hpcc();
    if let Some(q) = &s.buffer {
        c.buffer_bytes = size("switch.buffer", q)?;
    }
    if let Some(q) = &s.reserve {
        c.reserve_bytes = size("switch.reserve", q)?;
    }
    if let Some(h) = s.headroom_rtts {
        c.headroom_rtts = h;
    }
    if let Some(l) = &s.lossless {
        c.lossless_mask = 0;
        for (i, &p) in l.iter().enumerate() {
            c.lossless_mask |= 1 << priority(&format!("switch.lossless[{i}]"), p)?;
        }
    }
    if let Some(p) = s.pfc {
        c.pfc_enabled = p;
    }
    if let Some(e) = s.ecn {
        c.ecn_enabled = e;
    }
    if let Some(q) = s.pause_quanta {
        if q == 0 {
            return Err(bad_value("switch.pause_quanta", "0", "an XOFF pauses for 1 to 65535 quanta"));
        }
        c.pause_quanta = Some(q);
    }
    match (s.scheduling.as_deref(), &s.dwrr_weights) {
        (None | Some("strict"), None) => {
            if s.scheduling.is_some() {
                c.scheduling = Scheduling::Strict;
            }
        }
        (Some("dwrr"), Some(w)) => {
            let weights: [u32; PRIORITIES] = w.as_slice().try_into().map_err(|_| {
                bad_value("switch.dwrr_weights", &format!("{w:?}"), "one weight per priority: 8 of them")
            })?;
            c.scheduling = Scheduling::Dwrr { weights };
        }
        (Some("dwrr"), None) => {
            return Err(invalid("switch.dwrr_weights", "scheduling = \"dwrr\" needs 8 weights"))
        }
        (None | Some("strict"), Some(_)) => {
            return Err(invalid("switch.dwrr_weights", "weights are for scheduling = \"dwrr\""));
        }
        (Some(other), _) => return Err(bad_value("switch.scheduling", other, "expected strict or dwrr")),
    }
    if let Some(p) = &s.pfc_threshold {
        c.pfc = match p.kind.as_str() {
            "static" => {
                if p.base_shift.is_some() || p.base_rate.is_some() || p.resume_offset.is_some() {
                    return Err(invalid(
                        "switch.pfc_threshold",
                        "a static threshold takes xoff and xon only",
                    ));
                }
                let (Some(xoff), Some(xon)) = (&p.xoff, &p.xon) else {
                    return Err(invalid("switch.pfc_threshold", "a static threshold needs xoff and xon"));
                };
                PfcThreshold::Static {
                    xoff: size("switch.pfc_threshold.xoff", xoff)?,
                    xon: size("switch.pfc_threshold.xon", xon)?,
                }
            }
            "dynamic" => {
                if p.xoff.is_some() || p.xon.is_some() {
                    return Err(invalid(
                        "switch.pfc_threshold",
                        "a dynamic threshold takes base_shift, base_rate and resume_offset, not xoff/xon",
                    ));
                }
                PfcThreshold::Dynamic {
                    base_shift: p.base_shift.unwrap_or(3),
                    base_rate_bps: p
                        .base_rate
                        .as_ref()
                        .map(|q| rate("switch.pfc_threshold.base_rate", q))
                        .transpose()?
                        .unwrap_or(100_000_000_000),
                    resume_offset: p
                        .resume_offset
                        .as_ref()
                        .map(|q| size("switch.pfc_threshold.resume_offset", q))
                        .transpose()?
                        .unwrap_or(3 * 1024),
                }
            }
            other => return Err(bad_value("switch.pfc_threshold.kind", other, "expected static or dynamic")),
        };
    }
    if let Some(rules) = &s.ecn_rules {
        c.ecn = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let key = format!("switch.ecn_rules[{i}]");
            c.ecn.push(EcnRule {
                rate_bps: rate(&format!("{key}.rate"), &r.rate)?,
                kmin: size(&format!("{key}.kmin"), &r.kmin)?,
                kmax: size(&format!("{key}.kmax"), &r.kmax)?,
                pmax: r.pmax,
            });
        }
    }
    Ok(c)
}

fn nic_config(n: &NicT) -> Result<NicConfig, ScenarioError> {
    let mut c = NicConfig::hpcc();
    if let Some(m) = n.mtu {
        c.mtu = m;
    }
    if let Some(cc) = &n.cc {
        c.cc = cc.clone();
    }
    if let Some(s) = &n.dcqcn_set {
        c.dcqcn_set = s.clone();
    }
    if let Some(p) = &n.dcqcn_params {
        c.dcqcn_params = p.clone();
    }
    match &n.ack_priority {
        None => {}
        Some(AckPrio::Prio(p)) => c.ack_priority = Some(priority("nic.ack_priority", *p)?),
        Some(AckPrio::Word(w)) if w == "flow" => c.ack_priority = None,
        Some(AckPrio::Word(w)) => return Err(bad_value("nic.ack_priority", w, "expected 0..=7 or \"flow\"")),
    }
    if let Some(q) = &n.chunk {
        let v = size("nic.chunk", q)?;
        c.chunk_bytes =
            u32::try_from(v).map_err(|_| bad_value("nic.chunk", &q.to_string(), "at most 4 GiB - 1"))?;
    }
    if let Some(w) = n.max_unacked_psns {
        c.max_unacked_psns = w;
    }
    if let Some(a) = n.ack_req_every {
        if a == 0 {
            return Err(bad_value("nic.ack_req_every", "0", "at least 1 (an ACK per packet)"));
        }
        c.ack_req_every = a;
    }
    if let Some(q) = &n.rx_xoff {
        c.rx_xoff_bytes = size("nic.rx_xoff", q)?;
    }
    Ok(c)
}

// ---------------------------------------------------------------------------
// Writing

/// `v` in the largest unit of `units` (largest first) that divides it.
fn with_unit(v: u64, units: &[(&str, u64)]) -> Qty {
    match units.iter().find(|(_, m)| v % m == 0) {
        Some((u, m)) if v > 0 => Qty::Text(format!("{}{u}", v / m)),
        _ => Qty::Int(v),
    }
}

fn fmt_rate(v: u64) -> Qty {
    let units = [("Tbps", 1_000_000_000_000), ("Gbps", 1_000_000_000), ("Mbps", 1_000_000), ("Kbps", 1_000)];
    match with_unit(v, &units) {
        Qty::Int(v) => Qty::Text(format!("{v}bps")),
        q => q,
    }
}

fn fmt_time(v: Time) -> Qty {
    let units = [("s", PS_PER_S), ("ms", PS_PER_MS), ("us", PS_PER_US), ("ns", PS_PER_NS), ("ps", 1)];
    match with_unit(v, &units) {
        Qty::Int(_) => Qty::Text("0".into()),
        q => q,
    }
}

fn fmt_size(v: u64) -> Qty {
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

/// Writes `s` in this module's format. [`from_str`] reads it back to an
/// equal scenario when `s` is valid, lists its hosts before its switches
/// (otherwise node ids come back renumbered that way; names, links, ports
/// and everything else are kept) and has no parallel links that events
/// take down or up (an event names a link by its ends).
pub fn to_toml(s: &Scenario) -> String {
    let name = |n: NodeId| s.nodes.get(n).map_or_else(|| format!("node{n}"), |x| x.name.clone());
    let of_kind = |k: NodeKind| s.nodes.iter().filter(|n| n.kind == k).map(|n| n.name.clone()).collect();
    let sw = &s.switch;
    let (xoff, xon, base_shift, base_rate, resume_offset, kind) = match sw.pfc {
        PfcThreshold::Static { xoff, xon } => {
            (Some(fmt_size(xoff)), Some(fmt_size(xon)), None, None, None, "static")
        }
        PfcThreshold::Dynamic { base_shift, base_rate_bps, resume_offset } => (
            None,
            None,
            Some(base_shift),
            Some(fmt_rate(base_rate_bps)),
            Some(fmt_size(resume_offset)),
            "dynamic",
        ),
    };
    let (scheduling, dwrr_weights) = match sw.scheduling {
        Scheduling::Strict => ("strict", None),
        Scheduling::Dwrr { weights } => ("dwrr", Some(weights.to_vec())),
    };
    let file = File {
        name: Some(s.name.clone()),
        seed: Some(s.seed),
        framing: Some(s.framing),
        stop: s.stop_ps.map(fmt_time),
        deadlock_check: Some(fmt_time(s.deadlock_check_ps)),
        hosts: of_kind(NodeKind::Host),
        switches: of_kind(NodeKind::Switch),
        host_group: Vec::new(),
        link_defaults: None,
        links: s
            .links
            .iter()
            .map(|l| Link {
                a: name(l.a),
                b: name(l.b),
                rate: Some(fmt_rate(l.rate_bps)),
                delay: Some(fmt_time(l.delay_ps)),
                loss: (l.loss != 0.0).then_some(l.loss),
                faults: (l.faults != LinkFaults::default()).then(|| FaultsT {
                    jitter: (l.faults.jitter_ps != 0).then(|| fmt_time(l.faults.jitter_ps)),
                    reorder: (l.faults.reorder != 0.0).then_some(l.faults.reorder),
                    reorder_delay: (l.faults.reorder_delay_ps != 0)
                        .then(|| fmt_time(l.faults.reorder_delay_ps)),
                    duplicate: (l.faults.duplicate != 0.0).then_some(l.faults.duplicate),
                    corrupt: (l.faults.corrupt != 0.0).then_some(l.faults.corrupt),
                }),
            })
            .collect(),
        flows: s
            .flows
            .iter()
            .map(|f| Flow {
                src: name(f.src),
                dst: name(f.dst),
                size: fmt_size(f.size),
                start: (f.start_ps != 0).then(|| fmt_time(f.start_ps)),
                priority: Some(f.priority),
                op: (f.op != FlowOp::Write).then_some(f.op),
            })
            .collect(),
        incast: Vec::new(),
        switch: Some(SwitchT {
            buffer: Some(fmt_size(sw.buffer_bytes)),
            reserve: Some(fmt_size(sw.reserve_bytes)),
            headroom_rtts: Some(sw.headroom_rtts),
            lossless: Some((0..PRIORITIES as u8).filter(|p| sw.lossless_mask & (1 << p) != 0).collect()),
            pfc: Some(sw.pfc_enabled),
            ecn: Some(sw.ecn_enabled),
            scheduling: Some(scheduling.into()),
            dwrr_weights,
            pfc_threshold: Some(PfcT { kind: kind.into(), xoff, xon, base_shift, base_rate, resume_offset }),
            pause_quanta: sw.pause_quanta,
            ecn_rules: Some(
                sw.ecn
                    .iter()
                    .map(|r| EcnT {
                        rate: fmt_rate(r.rate_bps),
                        kmin: fmt_size(r.kmin),
                        kmax: fmt_size(r.kmax),
                        pmax: r.pmax,
                    })
                    .collect(),
            ),
        }),
        nic: Some(NicT {
            mtu: Some(s.nic.mtu),
            cc: Some(s.nic.cc.clone()),
            dcqcn_set: Some(s.nic.dcqcn_set.clone()),
            dcqcn_params: Some(s.nic.dcqcn_params.clone()),
            ack_priority: Some(match s.nic.ack_priority {
                Some(p) => AckPrio::Prio(p),
                None => AckPrio::Word("flow".into()),
            }),
            chunk: Some(fmt_size(u64::from(s.nic.chunk_bytes))),
            max_unacked_psns: Some(s.nic.max_unacked_psns),
            ack_req_every: Some(s.nic.ack_req_every),
            rx_xoff: Some(fmt_size(s.nic.rx_xoff_bytes)),
        }),
        routes: s
            .routes
            .iter()
            .map(|r| Route { switch: name(r.switch), dst: name(r.dst), via: name(r.via) })
            .collect(),
        events: s
            .events
            .iter()
            .map(|e| {
                let link_ends = |l: usize| s.links.get(l).map(|l| (Some(name(l.a)), Some(name(l.b))));
                let (kind, ends, host) = match e.kind {
                    EventKind::LinkDown { link } => ("link_down", link_ends(link), None),
                    EventKind::LinkUp { link } => ("link_up", link_ends(link), None),
                    EventKind::NicStall { host } => ("nic_stall", None, Some(name(host))),
                    EventKind::NicResume { host } => ("nic_resume", None, Some(name(host))),
                };
                let (a, b) = ends.unwrap_or_default();
                Event { at: fmt_time(e.at_ps), kind: kind.into(), a, b, host }
            })
            .collect(),
        watchdog: s
            .watchdog
            .map(|w| WatchdogT { timeout: fmt_time(w.timeout_ps), restore: fmt_time(w.restore_ps) }),
        monitor: (s.monitor != MonitorConfig::default()).then(|| MonitorT {
            ports: s.monitor.ports.iter().map(|&(n, p)| format!("{}:{p}", name(n))).collect(),
            interval: Some(fmt_time(s.monitor.interval_ps)),
            flow_rates: Some(s.monitor.flow_rates),
        }),
    };
    toml::to_string(&file).expect("a scenario serialises as TOML")
}

/// Nodes a scenario may have: a host's address holds its id in 16 bits
/// ([`crate::sim::host_ip`]).
pub const MAX_NODES: usize = 0xffff;

/// Checks the rules of the module documentation on a [`Scenario`] however
/// it was made (TOML, built-in, imported): node indices in range, unique
/// names, one link per host, no self links, rates above zero, losses and
/// pmax within [0, 1], kmin <= kmax, xon <= xoff, priorities 0..=7,
/// flows between two different hosts with at least one byte, a known MTU
/// and congestion control (with DCQCN, a known parameter set and
/// parameters), routes from a switch to a host via a neighbour, events on
/// existing links and hosts, monitored ports that exist. Keys name the
/// scenario's own lists (`links[3]`).
pub fn validate(s: &Scenario) -> Result<(), ScenarioError> {
    let n = s.nodes.len();
    if n > MAX_NODES {
        return Err(invalid(
            "nodes",
            format!("{n} nodes: at most {MAX_NODES} (a host's address holds its id in 16 bits)"),
        ));
    }
    let mut seen = HashMap::new();
    for (i, node) in s.nodes.iter().enumerate() {
        if node.name.is_empty() {
            return Err(invalid(format!("nodes[{i}].name"), "empty node name"));
        }
        if seen.insert(node.name.as_str(), i).is_some() {
            return Err(ScenarioError::DuplicateName(node.name.clone()));
        }
    }
    let node_ok = |key: String, id: NodeId, kind: Option<NodeKind>| -> Result<(), ScenarioError> {
        if id >= n {
            return Err(invalid(key, format!("node {id} does not exist ({n} nodes)")));
        }
        if let Some(k) = kind {
            if s.nodes[id].kind != k {
                return Err(ScenarioError::WrongKind {
                    key,
                    name: s.nodes[id].name.clone(),
                    expected: kind_name(k),
                    found: kind_name(s.nodes[id].kind),
                });
            }
        }
        Ok(())
    };
    let mut degree = vec![0usize; n];
    for (i, l) in s.links.iter().enumerate() {
        let key = format!("links[{i}]");
        node_ok(format!("{key}.a"), l.a, None)?;
        node_ok(format!("{key}.b"), l.b, None)?;
        if l.a == l.b {
            return Err(ScenarioError::SelfLink { key, node: s.nodes[l.a].name.clone() });
        }
        if l.rate_bps == 0 {
            return Err(bad_value(&format!("{key}.rate"), "0", "a rate must be above zero"));
        }
        loss(&format!("{key}.loss"), l.loss)?;
        let f = &l.faults;
        for (name, p) in [("reorder", f.reorder), ("duplicate", f.duplicate), ("corrupt", f.corrupt)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(bad_value(
                    &format!("{key}.faults.{name}"),
                    &p.to_string(),
                    "a probability, 0 to 1",
                ));
            }
        }
        degree[l.a] += 1;
        degree[l.b] += 1;
    }
    for h in s.hosts() {
        if degree[h] != 1 {
            return Err(ScenarioError::HostLinks { host: s.nodes[h].name.clone(), links: degree[h] });
        }
    }
    for (i, f) in s.flows.iter().enumerate() {
        let key = format!("flows[{i}]");
        node_ok(format!("{key}.src"), f.src, Some(NodeKind::Host))?;
        node_ok(format!("{key}.dst"), f.dst, Some(NodeKind::Host))?;
        if f.src == f.dst {
            return Err(invalid(key, format!("a flow from {:?} to itself", s.nodes[f.src].name)));
        }
        priority(&format!("{key}.priority"), f.priority)?;
        if f.size == 0 {
            return Err(bad_value(&format!("{key}.size"), "0", "a flow carries at least one byte"));
        }
    }
    let sw = &s.switch;
    if sw.buffer_bytes == 0 {
        return Err(bad_value("switch.buffer", "0", "the buffer must be above zero"));
    }
    if !(sw.headroom_rtts.is_finite() && sw.headroom_rtts >= 0.0) {
        return Err(bad_value("switch.headroom_rtts", &sw.headroom_rtts.to_string(), "a finite number >= 0"));
    }
    match sw.pfc {
        PfcThreshold::Static { xoff, xon } if xon > xoff => {
            return Err(invalid("switch.pfc_threshold", format!("xon ({xon} B) above xoff ({xoff} B)")));
        }
        PfcThreshold::Static { xoff: 0, .. } => {
            return Err(bad_value("switch.pfc_threshold.xoff", "0", "xoff must be above zero"));
        }
        PfcThreshold::Dynamic { base_shift, base_rate_bps, .. } => {
            if base_shift > 31 {
                return Err(bad_value(
                    "switch.pfc_threshold.base_shift",
                    &base_shift.to_string(),
                    "at most 31",
                ));
            }
            if base_rate_bps == 0 {
                return Err(bad_value("switch.pfc_threshold.base_rate", "0", "a rate must be above zero"));
            }
        }
        PfcThreshold::Static { .. } => {}
    }
    for (i, r) in sw.ecn.iter().enumerate() {
        let key = format!("switch.ecn_rules[{i}]");
        if r.rate_bps == 0 {
            return Err(bad_value(&format!("{key}.rate"), "0", "a rate must be above zero"));
        }
        if r.kmin > r.kmax {
            return Err(invalid(key, format!("kmin ({} B) above kmax ({} B)", r.kmin, r.kmax)));
        }
        if !(0.0..=1.0).contains(&r.pmax) {
            return Err(bad_value(
                &format!("{key}.pmax"),
                &r.pmax.to_string(),
                "a probability within [0, 1]",
            ));
        }
        if i > 0 && sw.ecn[i - 1].rate_bps >= r.rate_bps {
            return Err(invalid(format!("{key}.rate"), "ECN rules are listed by ascending rate"));
        }
    }
    if sw.ecn_enabled && sw.ecn.is_empty() {
        return Err(invalid("switch.ecn_rules", "ECN is on but there is no rule"));
    }
    if let Scheduling::Dwrr { weights } = sw.scheduling {
        if weights.iter().all(|&w| w == 0) {
            return Err(invalid("switch.dwrr_weights", "at least one weight above zero"));
        }
    }
    let nic = &s.nic;
    if ![256, 512, 1024, 2048, 4096].contains(&nic.mtu) {
        return Err(bad_value("nic.mtu", &nic.mtu.to_string(), "expected 256, 512, 1024, 2048 or 4096"));
    }
    if let Some(p) = nic.ack_priority {
        priority("nic.ack_priority", p)?;
    }
    if nic.max_unacked_psns == 0 || nic.max_unacked_psns > 1 << 23 {
        return Err(bad_value(
            "nic.max_unacked_psns",
            &nic.max_unacked_psns.to_string(),
            "a send window of 1..=2^23 PSNs",
        ));
    }
    if nic.chunk_bytes == 0 {
        return Err(bad_value("nic.chunk", "0", "must be above zero"));
    }
    if nic.ack_req_every == 0 {
        return Err(bad_value("nic.ack_req_every", "0", "at least 1 (an ACK per packet)"));
    }
    match nic.cc.as_str() {
        "none" => {}
        "dcqcn" => {
            let mut p = roce_proto::cc::DcqcnParams::named(&nic.dcqcn_set)
                .map_err(|e| bad_value("nic.dcqcn_set", &nic.dcqcn_set, e.to_string()))?;
            for (i, kv) in nic.dcqcn_params.iter().enumerate() {
                p.set_kv(kv).map_err(|e| bad_value(&format!("nic.dcqcn_params[{i}]"), kv, e.to_string()))?;
            }
            p.validate().map_err(|e| invalid("nic.dcqcn_params", e.to_string()))?;
        }
        other => return Err(bad_value("nic.cc", other, "expected none or dcqcn")),
    }
    let linked =
        |a: NodeId, b: NodeId| s.links.iter().any(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a));
    for (i, r) in s.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        node_ok(format!("{key}.switch"), r.switch, Some(NodeKind::Switch))?;
        node_ok(format!("{key}.dst"), r.dst, Some(NodeKind::Host))?;
        node_ok(format!("{key}.via"), r.via, None)?;
        if !linked(r.switch, r.via) {
            return Err(invalid(
                format!("{key}.via"),
                format!("{:?} has no link to {:?}", s.nodes[r.switch].name, s.nodes[r.via].name),
            ));
        }
    }
    for (i, e) in s.events.iter().enumerate() {
        let key = format!("events[{i}]");
        match e.kind {
            EventKind::LinkDown { link } | EventKind::LinkUp { link } if link >= s.links.len() => {
                return Err(invalid(key, format!("link {link} does not exist ({} links)", s.links.len())));
            }
            EventKind::NicStall { host } | EventKind::NicResume { host } => {
                node_ok(format!("{key}.host"), host, Some(NodeKind::Host))?;
            }
            _ => {}
        }
    }
    if let Some(w) = s.watchdog {
        if w.timeout_ps == 0 {
            return Err(bad_value("watchdog.timeout", "0", "the timeout must be above zero"));
        }
    }
    for (i, &(node, port)) in s.monitor.ports.iter().enumerate() {
        let key = format!("monitor.ports[{i}]");
        node_ok(key.clone(), node, None)?;
        if port == 0 || port as usize > degree[node] {
            return Err(bad_value(
                &key,
                &format!("{}:{port}", s.nodes[node].name),
                format!("{:?} has ports 1..={}", s.nodes[node].name, degree[node]),
            ));
        }
    }
    Ok(())
}

/// The port of `node` whose link leads to `peer` (from 1), if any.
pub fn port_towards(s: &Scenario, node: NodeId, peer: NodeId) -> Option<u32> {
    s.links
        .iter()
        .filter(|l| l.a == node || l.b == node)
        .position(|l| l.a == peer || l.b == peer)
        .map(|k| k as u32 + 1)
}

/// The node at the other end of `node`'s port `port` (from 1), if any.
pub fn peer_of(s: &Scenario, node: NodeId, port: u32) -> Option<NodeId> {
    let l = s.links.iter().filter(|l| l.a == node || l.b == node).nth((port as usize).checked_sub(1)?)?;
    Some(if l.a == node { l.b } else { l.a })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
name = "full"
seed = 7
framing = "ppp"
stop = "2.5ms"
deadlock_check = "50us"
hosts = ["x"]
switches = ["s0", "s1"]

[[host_group]]
prefix = "h"
count = 3
attach = "s0"
rate = "25Gbps"
delay = "500ns"

[link_defaults]
rate = "400G"
delay = "1us"

[[links]]
a = "s0"
b = "s1"
loss = 0.001

[[links]]
a = "x"
b = "s1"
rate = "100Gb/s"

[[flows]]
src = "h1"
dst = "x"
size = "1MiB"
start = "10us"
priority = 5
op = "send"

[[incast]]
senders = 2
receiver = "h3"
size = 4096
start = "1us"
stagger = "250ns"

[switch]
buffer = "12MB"
reserve = "2KiB"
headroom_rtts = 2.5
lossless = [3, 4]
pfc = true
ecn = false
scheduling = "dwrr"
dwrr_weights = [0, 1, 2, 3, 4, 5, 6, 7]
pfc_threshold = { kind = "dynamic", base_shift = 2, base_rate = "25G", resume_offset = "1KB" }

[[switch.ecn_rules]]
rate = "25G"
kmin = "5KB"
kmax = "200KB"
pmax = 0.01

[nic]
mtu = 4096
cc = "dcqcn"
dcqcn_set = "paper"
dcqcn_params = ["g=1/256"]
ack_priority = "flow"
chunk = "1MiB"
max_unacked_psns = 64
rx_xoff = "128KB"

[[routes]]
switch = "s0"
dst = "x"
via = "s1"

[[events]]
at = "1ms"
kind = "link_down"
a = "s1"
b = "s0"

[[events]]
at = "1.5ms"
kind = "nic_resume"
host = "h2"

[watchdog]
timeout = "100us"
restore = "1ms"

[monitor]
ports = ["s0:4", "s1->x", "h1:1"]
interval = "2us"
flow_rates = true
"#;

    #[test]
    fn every_field_reaches_the_scenario() {
        let s = from_str(FULL).unwrap();
        let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["x", "h1", "h2", "h3", "s0", "s1"]);
        assert_eq!(s.nodes[4].kind, NodeKind::Switch);
        assert_eq!(s.name, "full");
        assert_eq!(s.seed, 7);
        assert_eq!(s.framing, Framing::Ppp);
        assert_eq!(s.stop_ps, Some(2_500 * PS_PER_US));
        assert_eq!(s.deadlock_check_ps, 50 * PS_PER_US);
        let l = |a, b, rate_bps, delay_ps, loss| LinkSpec {
            a,
            b,
            rate_bps,
            delay_ps,
            loss,
            faults: LinkFaults::default(),
        };
        assert_eq!(
            s.links,
            vec![
                l(1, 4, 25_000_000_000, 500_000, 0.0),
                l(2, 4, 25_000_000_000, 500_000, 0.0),
                l(3, 4, 25_000_000_000, 500_000, 0.0),
                l(4, 5, 400_000_000_000, PS_PER_US, 0.001),
                l(0, 5, 100_000_000_000, PS_PER_US, 0.0),
            ]
        );
        assert_eq!(
            s.flows,
            vec![
                FlowSpec {
                    src: 1,
                    dst: 0,
                    priority: 5,
                    size: 1 << 20,
                    start_ps: 10 * PS_PER_US,
                    op: FlowOp::Send
                },
                FlowSpec { src: 0, dst: 3, priority: 3, size: 4096, start_ps: PS_PER_US, op: FlowOp::Write },
                FlowSpec {
                    src: 1,
                    dst: 3,
                    priority: 3,
                    size: 4096,
                    start_ps: PS_PER_US + 250_000,
                    op: FlowOp::Write
                },
            ]
        );
        assert_eq!(
            s.switch,
            SwitchConfig {
                buffer_bytes: 12_000_000,
                reserve_bytes: 2048,
                headroom_rtts: 2.5,
                pfc: PfcThreshold::Dynamic {
                    base_shift: 2,
                    base_rate_bps: 25_000_000_000,
                    resume_offset: 1000
                },
                lossless_mask: 0b1_1000,
                pfc_enabled: true,
                ecn_enabled: false,
                ecn: vec![EcnRule { rate_bps: 25_000_000_000, kmin: 5000, kmax: 200_000, pmax: 0.01 }],
                scheduling: Scheduling::Dwrr { weights: [0, 1, 2, 3, 4, 5, 6, 7] },
                pause_quanta: None,
            }
        );
        assert_eq!(
            s.nic,
            NicConfig {
                mtu: 4096,
                cc: "dcqcn".into(),
                dcqcn_set: "paper".into(),
                dcqcn_params: vec!["g=1/256".into()],
                ack_priority: None,
                chunk_bytes: 1 << 20,
                max_unacked_psns: 64,
                ack_req_every: 64,
                rx_xoff_bytes: 128_000,
            }
        );
        assert_eq!(s.routes, vec![RouteSpec { switch: 4, dst: 0, via: 5 }]);
        assert_eq!(
            s.events,
            vec![
                TimedEvent { at_ps: PS_PER_MS, kind: EventKind::LinkDown { link: 3 } },
                TimedEvent { at_ps: 1_500 * PS_PER_US, kind: EventKind::NicResume { host: 2 } },
            ]
        );
        assert_eq!(s.watchdog, Some(WatchdogConfig { timeout_ps: 100 * PS_PER_US, restore_ps: PS_PER_MS }));
        // s1's ports: 1 = s0, 2 = x.
        assert_eq!(
            s.monitor,
            MonitorConfig {
                ports: vec![(4, 4), (5, 2), (1, 1)],
                interval_ps: 2 * PS_PER_US,
                flow_rates: true
            }
        );
        assert_eq!(port_towards(&s, 5, 0), Some(2));
        assert_eq!(peer_of(&s, 5, 2), Some(0));
        assert_eq!(peer_of(&s, 5, 3), None);
        assert_eq!(peer_of(&s, 5, 0), None);
    }

    #[test]
    fn the_documented_example_parses() {
        let src = include_str!("toml_scenario.rs");
        let start = src.find("//! ```toml\n").unwrap() + "//! ```toml\n".len();
        let end = start + src[start..].find("//! ```\n").unwrap();
        let text: String = src[start..end]
            .lines()
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start_matches(' ')))
            .collect();
        let s = from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(s.name, "example");
        assert_eq!(s.nodes.len(), 13);
        assert_eq!(s.flows.len(), 8);
        assert!(matches!(s.switch.pfc, PfcThreshold::Static { xoff: 40_000, xon: 20_000 }));
        let sw = s.nodes.iter().position(|n| n.name == "sw").unwrap();
        assert_eq!(s.monitor.ports, vec![(sw, 9), (sw, 8)]);
    }

    #[test]
    fn defaults_when_sections_are_absent() {
        let s = from_str("hosts = [\"a\", \"b\"]\nswitches = [\"s\"]\n[link_defaults]\nrate = \"100G\"\ndelay = \"1us\"\n[[links]]\na = \"a\"\nb = \"s\"\n[[links]]\na = \"b\"\nb = \"s\"\n").unwrap();
        assert_eq!(s.name, "scenario");
        assert_eq!(s.seed, 1);
        assert_eq!(s.switch, SwitchConfig::hpcc());
        assert_eq!(s.nic, NicConfig::hpcc());
        assert_eq!(s.framing, Framing::Ethernet);
        assert_eq!(s.deadlock_check_ps, 100 * PS_PER_US);
        assert_eq!(s.stop_ps, None);
        assert_eq!(s.watchdog, None);
        assert_eq!(s.monitor, MonitorConfig::default());
        assert!(s.flows.is_empty() && s.routes.is_empty() && s.events.is_empty());
    }

    #[test]
    fn from_path_names_after_the_file() {
        let dir = std::env::temp_dir().join(format!("roce-fabric-toml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("my-run.toml");
        std::fs::write(&p, "hosts = [\"a\"]\nswitches = [\"s\"]\n[[links]]\na = \"a\"\nb = \"s\"\nrate = \"1G\"\ndelay = \"1ns\"\n").unwrap();
        assert_eq!(from_path(&p).unwrap().name, "my-run");
        let missing = dir.join("absent.toml");
        assert!(matches!(from_path(&missing), Err(ScenarioError::Io { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn units() {
        let r = |t: &str| parse_with_units(t, RATE_UNITS, "b/s");
        assert_eq!(r("100Gbps"), Ok(100_000_000_000));
        assert_eq!(r("400G"), Ok(400_000_000_000));
        assert_eq!(r("2.5 Gb/s"), Ok(2_500_000_000));
        assert_eq!(r("10mbps"), Ok(10_000_000));
        assert_eq!(r("1_000bps"), Ok(1000));
        assert!(r("100").is_err());
        assert!(r("100Xbps").is_err());
        assert!(r("Gbps").is_err());
        assert!(r("1.5bps").is_err());
        let t = |t: &str| parse_with_units(t, TIME_UNITS, "ps");
        assert_eq!(t("1us"), Ok(PS_PER_US));
        assert_eq!(t("1µs"), Ok(PS_PER_US));
        assert_eq!(t("500ns"), Ok(500_000));
        assert_eq!(t("0.5ps").map_err(|e| e.contains("whole")), Err(true));
        assert_eq!(t("1.25ms"), Ok(1_250 * PS_PER_US));
        assert_eq!(t("2s"), Ok(2 * PS_PER_S));
        assert_eq!(t("0"), Ok(0));
        assert!(t("1.2.3us").is_err());
        assert!(t("99999999999s").is_err());
        let b = |t: &str| parse_with_units(t, SIZE_UNITS, "B");
        assert_eq!(b("500KB"), Ok(500_000));
        assert_eq!(b("1MiB"), Ok(1 << 20));
        assert_eq!(b("1.5KiB"), Ok(1536));
        assert_eq!(b("64B"), Ok(64));
        assert_eq!(b("2GB"), Ok(2_000_000_000));
        assert_eq!(duration("k", &Qty::Int(0)).unwrap(), 0);
        assert!(matches!(duration("k", &Qty::Int(5)), Err(ScenarioError::BadValue { .. })));
        assert!(matches!(rate("k", &Qty::Int(0)), Err(ScenarioError::BadValue { .. })));
    }

    #[test]
    fn name_ranges() {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(expand_names("k", &v(&["h1..h3", "x"])).unwrap(), v(&["h1", "h2", "h3", "x"]));
        assert_eq!(expand_names("k", &v(&["h8..10"])).unwrap(), v(&["h8", "h9", "h10"]));
        assert_eq!(expand_names("k", &v(&["h01..h03"])).unwrap(), v(&["h01", "h02", "h03"]));
        assert_eq!(expand_names("k", &v(&["7..8"])).unwrap(), v(&["7", "8"]));
        for bad in ["h3..h1", "h1..g3", "h..h3", "h1.."] {
            let e = expand_names("k", &v(&[bad])).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    /// A small valid scenario with `extra` appended, parsed.
    fn with(extra: &str) -> Result<Scenario, ScenarioError> {
        from_str(&format!(
            "hosts = [\"h1..h3\"]\nswitches = [\"s\", \"t\"]\n[link_defaults]\nrate = \"100G\"\ndelay = \"1us\"\n\
             [[links]]\na = \"h1\"\nb = \"s\"\n[[links]]\na = \"h2\"\nb = \"s\"\n[[links]]\na = \"h3\"\nb = \"t\"\n\
             [[links]]\na = \"s\"\nb = \"t\"\n{extra}"
        ))
    }

    fn err(extra: &str) -> String {
        match with(extra) {
            Ok(_) => panic!("accepted: {extra}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_base_is_valid() {
        with("").unwrap();
    }

    #[test]
    fn errors_name_the_key_and_value() {
        let cases: &[(&str, &[&str])] = &[
            ("bogus = 1\n", &["bogus"]),
            ("[switch]\nbufer = \"1MB\"\n", &["bufer"]),
            ("[[links]]\na = \"s\"\nb = \"nowhere\"\n", &["links[4].b", "nowhere"]),
            ("[[links]]\na = \"t\"\nb = \"t\"\n", &["links[4]", "itself"]),
            ("[[links]]\na = \"h1\"\nb = \"t\"\n", &["h1", "2 links"]),
            ("[[links]]\na = \"s\"\nb = \"t\"\nrate = \"0G\"\n", &["links[4].rate", "above zero"]),
            ("[[links]]\na = \"s\"\nb = \"t\"\ndelay = \"1 fortnight\"\n", &["links[4].delay", "fortnight"]),
            ("[[flows]]\nsrc = \"h1\"\ndst = \"h1\"\nsize = 1\n", &["flows[0]", "itself"]),
            ("[[flows]]\nsrc = \"h1\"\ndst = \"s\"\nsize = 1\n", &["flows[0].dst", "switch"]),
            ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = 0\n", &["flows[0].size"]),
            ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = \"1XB\"\n", &["flows[0].size", "1XB"]),
            ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = 1\npriority = 8\n", &["flows[0].priority", "8"]),
            ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = 1\nop = \"read\"\n", &["read"]),
            ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = 1\nstart = 10\n", &["flows[0].start", "unit"]),
            ("[switch]\nlossless = [9]\n", &["switch.lossless[0]", "9"]),
            (
                "[[switch.ecn_rules]]\nrate = \"100G\"\nkmin = \"2MB\"\nkmax = \"1MB\"\npmax = 0.1\n",
                &["switch.ecn_rules[0]", "kmin"],
            ),
            (
                "[[switch.ecn_rules]]\nrate = \"100G\"\nkmin = \"1MB\"\nkmax = \"2MB\"\npmax = 1.5\n",
                &["switch.ecn_rules[0].pmax", "1.5"],
            ),
            ("[switch]\npfc_threshold = { kind = \"static\", xoff = \"10KB\", xon = \"20KB\" }\n", &["xon"]),
            ("[switch]\npfc_threshold = { kind = \"static\", xoff = \"10KB\" }\n", &["xon"]),
            ("[switch]\npfc_threshold = { kind = \"fixed\" }\n", &["fixed"]),
            ("[switch]\nscheduling = \"dwrr\"\ndwrr_weights = [1, 2]\n", &["dwrr_weights"]),
            ("[switch]\nscheduling = \"dwrr\"\n", &["dwrr_weights"]),
            ("[switch]\nscheduling = \"wfq\"\n", &["switch.scheduling", "wfq"]),
            ("[nic]\nmtu = 1500\n", &["nic.mtu", "1500"]),
            ("[nic]\nmax_unacked_psns = 0\n", &["nic.max_unacked_psns", "0"]),
            ("[nic]\ncc = \"hpcc\"\n", &["nic.cc", "hpcc"]),
            ("[nic]\ndcqcn_set = \"cisco\"\n", &["nic.dcqcn_set", "cisco"]),
            ("[nic]\ndcqcn_params = [\"nonsense=1\"]\n", &["nic.dcqcn_params[0]", "nonsense"]),
            ("[nic]\nack_priority = \"never\"\n", &["nic.ack_priority", "never"]),
            ("[nic]\nack_priority = 9\n", &["nic.ack_priority", "9"]),
            ("[[routes]]\nswitch = \"h1\"\ndst = \"h3\"\nvia = \"t\"\n", &["routes[0].switch", "host"]),
            ("[[routes]]\nswitch = \"s\"\ndst = \"h3\"\nvia = \"h3\"\n", &["routes[0].via", "no link"]),
            (
                "[[events]]\nat = \"1us\"\nkind = \"link_down\"\na = \"h1\"\nb = \"h2\"\n",
                &["events[0]", "no link"],
            ),
            ("[[events]]\nat = \"1us\"\nkind = \"nic_stall\"\nhost = \"s\"\n", &["events[0].host", "switch"]),
            ("[[events]]\nat = \"1us\"\nkind = \"nic_stall\"\na = \"s\"\n", &["events[0]", "host"]),
            ("[[events]]\nat = \"1us\"\nkind = \"explode\"\nhost = \"h1\"\n", &["events[0].kind", "explode"]),
            ("[watchdog]\ntimeout = \"0\"\nrestore = \"1us\"\n", &["watchdog.timeout"]),
            ("[monitor]\nports = [\"s:9\"]\n", &["monitor.ports[0]", "s:9", "1..=3"]),
            ("[monitor]\nports = [\"s->h3\"]\n", &["monitor.ports[0]", "no link"]),
            ("[monitor]\nports = [\"s\"]\n", &["monitor.ports[0]"]),
            ("[[incast]]\nsenders = 5\nreceiver = \"h1\"\nsize = 1\n", &["incast[0].senders", "5"]),
            (
                "[[incast]]\nsenders = [\"h1..h2\"]\nreceiver = \"h1\"\nsize = 1\n",
                &["incast[0].senders", "receiver"],
            ),
            ("[[incast]]\nsenders = [\"zz\"]\nreceiver = \"h1\"\nsize = 1\n", &["incast[0].senders", "zz"]),
            ("[[host_group]]\nprefix = \"h\"\ncount = 1\n", &["h1", "twice"]),
            ("[[host_group]]\nprefix = \"g\"\ncount = 0\n", &["host_group[0].count"]),
            ("[[host_group]]\nprefix = \"g\"\ncount = 1\n", &["g1", "0 links"]),
            ("[[host_group]]\nprefix = \"g:\"\ncount = 1\n", &["host_group[0].prefix"]),
            ("[[host_group]]\nprefix = \"g\"\ncount = 1\nrate = \"1G\"\n", &["host_group[0]", "attach"]),
        ];
        for (extra, needles) in cases {
            let e = err(extra);
            for n in *needles {
                assert!(e.contains(n), "error for {extra:?} is {e:?}, lacks {n:?}");
            }
        }
        // Without link defaults, a link needs its rate and delay.
        let e =
            from_str("hosts = [\"a\"]\nswitches = [\"s\"]\n[[links]]\na = \"a\"\nb = \"s\"\n").unwrap_err();
        assert!(e.to_string().contains("links[0].rate"), "{e}");
        let e = from_str("hosts = [\"a\"]\nswitches = [\"a\"]\n").unwrap_err();
        assert!(matches!(e, ScenarioError::DuplicateName(ref n) if n == "a"), "{e}");
    }

    #[test]
    fn writes_what_it_reads() {
        let mut all: Vec<Scenario> =
            crate::builtin::NAMES.iter().map(|n| crate::builtin::scenario(n).unwrap()).collect();
        all.push(from_str(FULL).unwrap());
        all.push(with("").unwrap());
        let mut faulty = with("").unwrap();
        faulty.links[0].loss = 0.01;
        faulty.links[0].faults = LinkFaults {
            jitter_ps: 100 * PS_PER_NS,
            reorder: 0.02,
            reorder_delay_ps: 2 * PS_PER_US,
            duplicate: 0.003,
            corrupt: 0.001,
        };
        all.push(faulty);
        for s in &all {
            let text = to_toml(s);
            let back = from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(&back, s, "{text}");
        }
    }

    #[test]
    fn link_faults_are_read_and_checked() {
        let s = with(
            "[[links]]\na = \"s\"\nb = \"t\"\nfaults = { jitter = \"50ns\", reorder = 0.1, reorder_delay = \"1us\", duplicate = 0.2, corrupt = 0.3 }\n",
        )
        .unwrap();
        let f = s.links.last().unwrap().faults;
        assert_eq!(
            f,
            LinkFaults {
                jitter_ps: 50 * PS_PER_NS,
                reorder: 0.1,
                reorder_delay_ps: PS_PER_US,
                duplicate: 0.2,
                corrupt: 0.3
            }
        );
        for (bad, key) in [
            ("faults = { corrupt = 1.5 }", "links[4].faults.corrupt"),
            ("faults = { jitter = \"soon\" }", "links[4].faults.jitter"),
            ("faults = { drop = 0.1 }", "drop"),
        ] {
            let e = with(&format!("[[links]]\na = \"s\"\nb = \"t\"\n{bad}\n")).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn writing_renumbers_interleaved_nodes_hosts_first() {
        let mut s = with("[[flows]]\nsrc = \"h1\"\ndst = \"h3\"\nsize = \"1MB\"\n").unwrap();
        // Move the switch "s" (id 3) to the front.
        let order = [3usize, 0, 1, 2, 4];
        let new_id = |old: usize| order.iter().position(|&o| o == old).unwrap();
        s.nodes = order.iter().map(|&o| s.nodes[o].clone()).collect();
        for l in &mut s.links {
            (l.a, l.b) = (new_id(l.a), new_id(l.b));
        }
        for f in &mut s.flows {
            (f.src, f.dst) = (new_id(f.src), new_id(f.dst));
        }
        validate(&s).unwrap();
        let back = from_str(&to_toml(&s)).unwrap();
        let names = |x: &Scenario| x.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&back), ["h1", "h2", "h3", "s", "t"]);
        let ends = |x: &Scenario| {
            x.links.iter().map(|l| (x.nodes[l.a].name.clone(), x.nodes[l.b].name.clone())).collect::<Vec<_>>()
        };
        assert_eq!(ends(&back), ends(&s));
        assert_eq!(back.nodes[back.flows[0].src].name, "h1");
        assert_eq!(back.nodes[back.flows[0].dst].name, "h3");
    }

    #[test]
    fn units_are_written_exactly() {
        assert_eq!(fmt_rate(100_000_000_000), Qty::Text("100Gbps".into()));
        assert_eq!(fmt_rate(2_500_000_000), Qty::Text("2500Mbps".into()));
        assert_eq!(fmt_rate(7), Qty::Text("7bps".into()));
        assert_eq!(fmt_time(0), Qty::Text("0".into()));
        assert_eq!(fmt_time(1_500_000), Qty::Text("1500ns".into()));
        assert_eq!(fmt_time(3), Qty::Text("3ps".into()));
        assert_eq!(fmt_size(4096), Qty::Text("4KiB".into()));
        assert_eq!(fmt_size(1_000_000), Qty::Text("1MB".into()));
        assert_eq!(fmt_size(1001), Qty::Int(1001));
        assert_eq!(fmt_size(0), Qty::Int(0));
    }

    #[test]
    fn validate_catches_what_a_built_scenario_gets_wrong() {
        let good = with("[[flows]]\nsrc = \"h1\"\ndst = \"h3\"\nsize = 1\n").unwrap();
        validate(&good).unwrap();
        let mut s = good.clone();
        s.flows[0].dst = 99;
        assert!(validate(&s).unwrap_err().to_string().contains("flows[0].dst"));
        let mut s = good.clone();
        s.links[0].b = s.links[0].a;
        assert!(matches!(validate(&s), Err(ScenarioError::SelfLink { .. })));
        let mut s = good.clone();
        s.links[1].rate_bps = 0;
        assert!(validate(&s).unwrap_err().to_string().contains("links[1].rate"));
        let mut s = good.clone();
        s.events.push(TimedEvent { at_ps: 0, kind: EventKind::LinkUp { link: 4 } });
        assert!(validate(&s).unwrap_err().to_string().contains("events[0]"));
        let mut s = good.clone();
        s.switch.ecn.reverse();
        assert!(validate(&s).unwrap_err().to_string().contains("ascending"));
        let mut s = good;
        s.nodes[1].name = "h1".into();
        assert!(matches!(validate(&s), Err(ScenarioError::DuplicateName(_))));
    }
}
