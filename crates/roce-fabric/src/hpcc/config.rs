//! HPCC run configurations (`config.txt`).
//!
//! Format: one `KEY value...` per line. The keys read, with their units:
//!
//! | key | value |
//! |---|---|
//! | `ENABLE_QCN`, `USE_DYNAMIC_PFC_THRESHOLD`, `CLAMP_TARGET_RATE`, `ACK_HIGH_PRIO` | `0` or `1` |
//! | `PACKET_PAYLOAD_SIZE` | bytes, 1..=4096 |
//! | `TOPOLOGY_FILE`, `FLOW_FILE` | file names |
//! | `KMIN_MAP`, `KMAX_MAP` | `n rate_1 k_1 .. rate_n k_n`: rates in bits/s, thresholds in KB (x 1000 bytes) |
//! | `PMAX_MAP` | `n rate_1 p_1 ..`: probabilities |
//! | `BUFFER_SIZE` | MB (x 1024 x 1024 bytes) per switch |
//! | `CC_MODE` | the artifact's CC number (1 = DCQCN) |
//! | `ALPHA_RESUME_INTERVAL`, `RATE_DECREASE_INTERVAL`, `RP_TIMER` | microseconds |
//! | `EWMA_GAIN` | a fraction (`0.00390625`, `1/256`) |
//! | `FAST_RECOVERY_TIMES` | a count |
//! | `RATE_AI`, `RATE_HAI`, `MIN_RATE` | rates with a unit (`20Mb/s`) |
//! | `ERROR_RATE_PER_LINK` | a probability |
//! | `LINK_DOWN` | `t a b`: the link a-b goes down t microseconds after 2 s; t = 0: never |
//! | `SIMULATOR_STOP_TIME` | seconds |
//!
//! Any other key is kept, unread, in [`HpccConfig::other`]. A key given
//! twice takes its last value (as the artifact's reading loop does).

use std::path::Path;

use roce_proto::cc::Fraction;

use super::text::{read_text, Cursor, Fields};
use super::{units, HpccError, ParseReason};
use crate::scenario::{NodeId, Time, PS_PER_S};

/// Largest `PACKET_PAYLOAD_SIZE`: the largest IB MTU.
pub const MAX_PAYLOAD: u32 = 4096;
/// Bytes per KB in the ECN maps (the artifact multiplies by 1000).
const ECN_KB: u64 = 1000;
/// Bytes per MB in `BUFFER_SIZE` (the artifact multiplies by 1024 x 1024).
const BUFFER_MB: u64 = 1024 * 1024;
/// Nanoseconds per microsecond (the DCQCN timer keys are in us).
const NS_PER_US: u64 = 1000;
/// `LINK_DOWN` times count from the artifact's flow start, 2 s.
pub const LINK_DOWN_EPOCH_PS: Time = 2 * PS_PER_S;

/// `LINK_DOWN t a b` with t > 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkDown {
    /// Absolute time: 2 s + t us.
    pub at_ps: Time,
    pub a: NodeId,
    pub b: NodeId,
    /// Line of the config file.
    pub line: usize,
}

/// A key that was not interpreted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub key: String,
    pub value: String,
    pub line: usize,
}

/// One class of an ECN map: ports of `rate_bps` use `value`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MapEntry<T> {
    pub rate_bps: u64,
    pub value: T,
}

/// The keys of a `config.txt` that shape a run; `None` when absent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HpccConfig {
    pub enable_qcn: Option<bool>,
    pub use_dynamic_pfc_threshold: Option<bool>,
    pub packet_payload_size: Option<u32>,
    pub topology_file: Option<String>,
    pub flow_file: Option<String>,
    /// Kmin per port rate, bytes.
    pub kmin_map: Option<Vec<MapEntry<u64>>>,
    /// Kmax per port rate, bytes.
    pub kmax_map: Option<Vec<MapEntry<u64>>>,
    pub pmax_map: Option<Vec<MapEntry<f64>>>,
    pub buffer_bytes: Option<u64>,
    pub cc_mode: Option<u32>,
    pub alpha_resume_interval_ns: Option<u64>,
    pub rate_decrease_interval_ns: Option<u64>,
    pub rp_timer_ns: Option<u64>,
    pub clamp_target_rate: Option<bool>,
    pub ewma_gain: Option<Fraction>,
    pub fast_recovery_times: Option<u32>,
    pub rate_ai_bps: Option<u64>,
    pub rate_hai_bps: Option<u64>,
    pub min_rate_bps: Option<u64>,
    pub error_rate_per_link: Option<f64>,
    pub ack_high_prio: Option<bool>,
    /// `None` also when `LINK_DOWN 0 ...`.
    pub link_down: Option<LinkDown>,
    pub stop_time_ps: Option<Time>,
    /// Keys not interpreted, in file order.
    pub other: Vec<ConfigEntry>,
}

impl HpccConfig {
    /// Reads and parses a config file.
    pub fn read(path: &Path) -> Result<HpccConfig, HpccError> {
        HpccConfig::parse(&read_text(path)?, path)
    }

    /// Parses the text of a config file; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<HpccConfig, HpccError> {
        let mut cfg = HpccConfig::default();
        let mut cur = Cursor::new(text, path);
        // Line of the last ECN map read, for the consistency check.
        let mut map_line = 0;
        while let Some(mut f) = cur.next_opt() {
            let key = f.next("key")?;
            let line = f.line;
            match key {
                "ENABLE_QCN" => cfg.enable_qcn = Some(flag(&mut f)?),
                "USE_DYNAMIC_PFC_THRESHOLD" => cfg.use_dynamic_pfc_threshold = Some(flag(&mut f)?),
                "CLAMP_TARGET_RATE" => cfg.clamp_target_rate = Some(flag(&mut f)?),
                "ACK_HIGH_PRIO" => cfg.ack_high_prio = Some(flag(&mut f)?),
                "PACKET_PAYLOAD_SIZE" => {
                    cfg.packet_payload_size = Some(f.with("value", "bytes, 1..=4096", |s| {
                        s.parse::<u32>().ok().filter(|n| (1..=MAX_PAYLOAD).contains(n))
                    })?)
                }
                "TOPOLOGY_FILE" => cfg.topology_file = Some(f.next("value")?.to_string()),
                "FLOW_FILE" => cfg.flow_file = Some(f.next("value")?.to_string()),
                "KMIN_MAP" | "KMAX_MAP" => {
                    let map =
                        read_map(&mut f, "threshold", "KB, e.g. 400", |s| units::decimal_scaled(s, ECN_KB))?;
                    map_line = line;
                    if key == "KMIN_MAP" {
                        cfg.kmin_map = Some(map);
                    } else {
                        cfg.kmax_map = Some(map);
                    }
                }
                "PMAX_MAP" => {
                    cfg.pmax_map =
                        Some(read_map(&mut f, "probability", "a probability in [0, 1]", probability)?);
                    map_line = line;
                }
                "BUFFER_SIZE" => {
                    cfg.buffer_bytes =
                        Some(f.with("value", "MB, e.g. 32", |s| units::decimal_scaled(s, BUFFER_MB))?)
                }
                "CC_MODE" => cfg.cc_mode = Some(f.parse("value", "a CC mode number")?),
                "ALPHA_RESUME_INTERVAL" => cfg.alpha_resume_interval_ns = Some(micros(&mut f)?),
                "RATE_DECREASE_INTERVAL" => cfg.rate_decrease_interval_ns = Some(micros(&mut f)?),
                "RP_TIMER" => cfg.rp_timer_ns = Some(micros(&mut f)?),
                "EWMA_GAIN" => {
                    cfg.ewma_gain = Some(f.with("value", "a fraction in [0, 1]", |s| {
                        Fraction::parse(s).ok().filter(|g| g.is_unit_interval())
                    })?)
                }
                "FAST_RECOVERY_TIMES" => cfg.fast_recovery_times = Some(f.parse("value", "a count")?),
                "RATE_AI" => cfg.rate_ai_bps = Some(rate(&mut f)?),
                "RATE_HAI" => cfg.rate_hai_bps = Some(rate(&mut f)?),
                "MIN_RATE" => cfg.min_rate_bps = Some(rate(&mut f)?),
                "ERROR_RATE_PER_LINK" => {
                    cfg.error_rate_per_link = Some(f.with("value", "a probability in [0, 1]", probability)?)
                }
                "LINK_DOWN" => {
                    let t_ps =
                        f.with("t", "microseconds after 2 s", |s| units::decimal_scaled(s, 1_000_000))?;
                    let a = f.parse("a", "a node id")?;
                    let b = f.parse("b", "a node id")?;
                    cfg.link_down =
                        (t_ps > 0).then_some(LinkDown { at_ps: LINK_DOWN_EPOCH_PS + t_ps, a, b, line });
                }
                "SIMULATOR_STOP_TIME" => {
                    cfg.stop_time_ps = Some(f.with("value", "seconds, e.g. 4.00", units::seconds_ps)?)
                }
                _ => {
                    let value = f.rest();
                    cfg.other.push(ConfigEntry { key: key.to_string(), value, line });
                    continue;
                }
            }
            f.end()?;
        }
        cfg.check_maps(path, map_line)?;
        Ok(cfg)
    }

    /// The three ECN maps must name the same rates in the same order.
    fn check_maps(&self, path: &Path, line: usize) -> Result<(), HpccError> {
        let rates = |m: Option<Vec<u64>>| m.unwrap_or_default();
        let kmin = rates(self.kmin_map.as_ref().map(|m| m.iter().map(|e| e.rate_bps).collect()));
        let kmax = rates(self.kmax_map.as_ref().map(|m| m.iter().map(|e| e.rate_bps).collect()));
        let pmax = rates(self.pmax_map.as_ref().map(|m| m.iter().map(|e| e.rate_bps).collect()));
        let present = [&self.kmin_map.is_some(), &self.kmax_map.is_some(), &self.pmax_map.is_some()];
        let all_or_none = present.iter().all(|p| **p) || present.iter().all(|p| !**p);
        if !all_or_none || kmin != kmax || kmin != pmax {
            return Err(super::text::parse_error(
                path,
                line,
                ParseReason::Inconsistent("KMIN_MAP, KMAX_MAP and PMAX_MAP must list the same rates".into()),
            ));
        }
        let bad_order = self
            .kmin_map
            .iter()
            .flatten()
            .zip(self.kmax_map.iter().flatten())
            .any(|(a, b)| a.value > b.value);
        if bad_order {
            return Err(super::text::parse_error(
                path,
                line,
                ParseReason::Inconsistent("a Kmin above its Kmax".into()),
            ));
        }
        Ok(())
    }
}

fn probability(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p))
}

fn flag(f: &mut Fields<'_>) -> Result<bool, HpccError> {
    f.with("value", "0 or 1", |s| match s {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    })
}

fn micros(f: &mut Fields<'_>) -> Result<u64, HpccError> {
    f.with("value", "microseconds, e.g. 55", |s| units::decimal_scaled(s, NS_PER_US))
}

fn rate(f: &mut Fields<'_>) -> Result<u64, HpccError> {
    f.with("value", "a rate with a unit, e.g. 20Mb/s", units::rate_bps)
}

/// `n rate_1 v_1 .. rate_n v_n`.
fn read_map<T>(
    f: &mut Fields<'_>,
    field: &'static str,
    expected: &'static str,
    value: impl Fn(&str) -> Option<T>,
) -> Result<Vec<MapEntry<T>>, HpccError> {
    let n: usize = f.parse("n", "a number of rate classes")?;
    let mut map = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let rate_bps = f.with("rate", "a rate in bits/s", |s| s.parse::<u64>().ok().filter(|&r| r > 0))?;
        let value = f.with(field, expected, &value)?;
        map.push(MapEntry { rate_bps, value });
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HpccConfig, HpccError> {
        HpccConfig::parse(text, Path::new("config.txt"))
    }

    fn err(text: &str) -> (usize, ParseReason) {
        match parse(text) {
            Err(HpccError::Parse { line, reason, .. }) => (line, reason),
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn reads_the_baseline_keys() {
        let text = "ENABLE_QCN 1\nUSE_DYNAMIC_PFC_THRESHOLD 0\nPACKET_PAYLOAD_SIZE 1000\nTOPOLOGY_FILE t.txt\n\
            KMAX_MAP 2 100000000000 1600 400000000000 6400\nKMIN_MAP 2 100000000000 400 400000000000 1600\n\
            PMAX_MAP 2 100000000000 0.20 400000000000 0.20\nBUFFER_SIZE 32\nCC_MODE 1\n\
            ALPHA_RESUME_INTERVAL 1\nRATE_DECREASE_INTERVAL 4\nCLAMP_TARGET_RATE 0\nRP_TIMER 300\n\
            EWMA_GAIN 0.00390625\nFAST_RECOVERY_TIMES 1\nRATE_AI 20Mb/s\nRATE_HAI 200Mb/s\nMIN_RATE 1000Mb/s\n\
            ERROR_RATE_PER_LINK 0.0000\nACK_HIGH_PRIO 1\nLINK_DOWN 0 0 0\nSIMULATOR_STOP_TIME 4.00\n\
            U_TARGET 0.95\nQLEN_MON_FILE qlen.txt\n";
        let c = parse(text).unwrap();
        assert_eq!(c.enable_qcn, Some(true));
        assert_eq!(c.use_dynamic_pfc_threshold, Some(false));
        assert_eq!(c.packet_payload_size, Some(1000));
        assert_eq!(c.topology_file.as_deref(), Some("t.txt"));
        let kmax = c.kmax_map.as_ref().unwrap();
        assert_eq!(kmax[1], MapEntry { rate_bps: 400_000_000_000, value: 6_400_000 });
        assert_eq!(c.kmin_map.as_ref().unwrap()[0].value, 400_000);
        assert_eq!(c.pmax_map.as_ref().unwrap()[0].value, 0.2);
        assert_eq!(c.buffer_bytes, Some(32 * 1024 * 1024));
        assert_eq!(c.alpha_resume_interval_ns, Some(1_000));
        assert_eq!(c.rate_decrease_interval_ns, Some(4_000));
        assert_eq!(c.rp_timer_ns, Some(300_000));
        assert_eq!(c.clamp_target_rate, Some(false));
        assert_eq!(c.ewma_gain, Some(Fraction::new(1, 256)));
        assert_eq!(c.fast_recovery_times, Some(1));
        assert_eq!(c.rate_ai_bps, Some(20_000_000));
        assert_eq!(c.rate_hai_bps, Some(200_000_000));
        assert_eq!(c.min_rate_bps, Some(1_000_000_000));
        assert_eq!(c.error_rate_per_link, Some(0.0));
        assert_eq!(c.ack_high_prio, Some(true));
        assert_eq!(c.link_down, None);
        assert_eq!(c.stop_time_ps, Some(4 * PS_PER_S));
        let other: Vec<_> = c.other.iter().map(|e| (e.key.as_str(), e.value.as_str(), e.line)).collect();
        assert_eq!(other, vec![("U_TARGET", "0.95", 23), ("QLEN_MON_FILE", "qlen.txt", 24)]);
    }

    #[test]
    fn link_down_counts_from_two_seconds() {
        let c = parse("LINK_DOWN 150 3 4\n").unwrap();
        assert_eq!(c.link_down, Some(LinkDown { at_ps: 2 * PS_PER_S + 150_000_000, a: 3, b: 4, line: 1 }));
    }

    #[test]
    fn malformed_configs_name_the_line() {
        assert!(matches!(err("\nENABLE_QCN 2\n"), (2, ParseReason::BadValue { field: "value", .. })));
        assert!(matches!(err("ENABLE_QCN\n"), (1, ParseReason::MissingField("value"))));
        assert!(matches!(err("ENABLE_QCN 1 1\n"), (1, ParseReason::ExtraField(_))));
        assert!(matches!(err("PACKET_PAYLOAD_SIZE 5000\n"), (1, ParseReason::BadValue { .. })));
        assert!(matches!(err("RATE_AI 20\n"), (1, ParseReason::BadValue { .. })));
        assert!(matches!(err("EWMA_GAIN 2\n"), (1, ParseReason::BadValue { .. })));
        assert!(matches!(err("KMAX_MAP 2 100000000000 1600\n"), (1, ParseReason::MissingField("rate"))));
        assert!(matches!(err("SIMULATOR_STOP_TIME 4s\n"), (1, ParseReason::BadValue { .. })));
        assert!(matches!(err("LINK_DOWN 1 2\n"), (1, ParseReason::MissingField("b"))));
        let maps = "KMAX_MAP 1 100000000000 1600\nKMIN_MAP 1 100000000000 400\nPMAX_MAP 1 40000000000 0.2\n";
        assert!(matches!(err(maps), (3, ParseReason::Inconsistent(_))));
        assert!(matches!(err("KMAX_MAP 1 100000000000 1600\n"), (1, ParseReason::Inconsistent(_))));
        let inverted = "KMAX_MAP 1 1 400\nKMIN_MAP 1 1 1600\nPMAX_MAP 1 1 0.2\n";
        assert!(matches!(err(inverted), (3, ParseReason::Inconsistent(_))));
    }
}
