//! Congestion control of the send rate: DCQCN (Zhu et al., SIGCOMM'15) as
//! pure state machines, without a clock like the rest of the engine.
//!
//! - [`Dcqcn`]: the reaction point of one QP (the sender): CNPs cut its
//!   rate, timers and the byte counter raise it again.
//! - [`NotificationPoint`]: the receiver side of one QP: which CE-marked
//!   packets are answered with a CNP.
//! - [`Pacer`]: turns a rate into departure times, packet by packet.
//! - [`RttProbe`]: the round-trip time of a QP's requests, Karn's rule.
//! - [`DcqcnParams`]: every knob, with the named sets `paper`, `nvidia`
//!   (firmware defaults) and `hpcc` (the simulator baseline) and overrides
//!   by name; [`CcAlgorithm`] picks none or DCQCN from a string.

mod dcqcn;
mod pacer;
mod params;
mod rtt;

use core::fmt;
use core::str::FromStr;

pub use dcqcn::{Dcqcn, NotificationPoint, Stage};
pub use pacer::Pacer;
pub use params::{ClampRule, DcqcnParams, Fraction, HyperIncrease, Reaction};
pub use rtt::RttProbe;

/// What went wrong choosing or configuring congestion control.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CcError {
    #[error("unknown congestion control {0:?} (expected none, dcqcn or dcqcn:<set>)")]
    UnknownAlgorithm(String),
    #[error("unknown DCQCN parameter set {0:?} (expected paper, nvidia or hpcc)")]
    UnknownSet(String),
    #[error("unknown DCQCN parameter {0:?} (known: {keys})", keys = DcqcnParams::KEYS.join(", "))]
    UnknownKey(String),
    #[error("DCQCN parameter {key}: cannot read {value:?}: {reason}")]
    BadValue { key: String, value: String, reason: &'static str },
    #[error("DCQCN parameter {key}: {value:?} is out of range ({range})")]
    OutOfRange { key: String, value: String, range: &'static str },
}

/// The congestion control of a QP's send rate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CcAlgorithm {
    /// Send at the line rate; CNPs are counted and otherwise ignored.
    #[default]
    None,
    /// DCQCN with these parameters.
    Dcqcn(DcqcnParams),
}

impl CcAlgorithm {
    /// `none` or `dcqcn` (the parameter set is not part of the name: the
    /// parameters may have been overridden).
    pub fn name(&self) -> &'static str {
        match self {
            CcAlgorithm::None => "none",
            CcAlgorithm::Dcqcn(_) => "dcqcn",
        }
    }

    /// `none`, `dcqcn` (the firmware defaults, [`DcqcnParams::nvidia`]) or
    /// `dcqcn:<set>` with a set of [`DcqcnParams::SET_NAMES`]; without case.
    pub fn parse(s: &str) -> Result<CcAlgorithm, CcError> {
        let lower = s.trim().to_ascii_lowercase();
        match lower.split_once(':') {
            None if lower == "none" => Ok(CcAlgorithm::None),
            None if lower == "dcqcn" => Ok(CcAlgorithm::Dcqcn(DcqcnParams::nvidia())),
            Some(("dcqcn", set)) => DcqcnParams::named(set).map(CcAlgorithm::Dcqcn),
            _ => Err(CcError::UnknownAlgorithm(s.to_string())),
        }
    }

    /// The DCQCN parameters, if DCQCN.
    pub fn dcqcn(&self) -> Option<&DcqcnParams> {
        match self {
            CcAlgorithm::Dcqcn(p) => Some(p),
            CcAlgorithm::None => None,
        }
    }
}

impl FromStr for CcAlgorithm {
    type Err = CcError;
    fn from_str(s: &str) -> Result<CcAlgorithm, CcError> {
        CcAlgorithm::parse(s)
    }
}

impl fmt::Display for CcAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_parse() {
        assert_eq!("none".parse::<CcAlgorithm>(), Ok(CcAlgorithm::None));
        assert_eq!(CcAlgorithm::parse(" DCQCN "), Ok(CcAlgorithm::Dcqcn(DcqcnParams::nvidia())));
        assert_eq!(CcAlgorithm::parse("dcqcn:paper"), Ok(CcAlgorithm::Dcqcn(DcqcnParams::paper())));
        assert_eq!(CcAlgorithm::parse("dcqcn:nvidia"), Ok(CcAlgorithm::Dcqcn(DcqcnParams::nvidia())));
        assert_eq!(CcAlgorithm::parse("dcqcn:HPCC"), Ok(CcAlgorithm::Dcqcn(DcqcnParams::hpcc())));
        assert_eq!(CcAlgorithm::parse("dcqcn:fast"), Err(CcError::UnknownSet("fast".into())));
        assert_eq!(CcAlgorithm::parse("hpcc"), Err(CcError::UnknownAlgorithm("hpcc".into())));
        assert_eq!(CcAlgorithm::parse("none:paper"), Err(CcError::UnknownAlgorithm("none:paper".into())));
        assert_eq!(CcAlgorithm::default().to_string(), "none");
        let a = CcAlgorithm::parse("dcqcn:hpcc").unwrap();
        assert_eq!((a.name(), a.dcqcn()), ("dcqcn", Some(&DcqcnParams::hpcc())));
        assert_eq!(CcAlgorithm::None.dcqcn(), None);
    }
}
