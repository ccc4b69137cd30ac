//! The target a fio file names. fio hands an external engine nothing but
//! the job's `filename=`, so the target is spelled there, as SPDK's NVMe
//! engine spells it: `key=value` pairs separated by spaces.
//!
//! ```text
//! filename=traddr=10.0.0.2 trsvcid=4420 subnqn=nqn.2026-11.io.roce\:disk ns=1
//! ```
//!
//! fio splits a file list at `:`, so the colon of an NQN is written `\:`
//! (fio passes the backslash on or drops it; both are read).

use std::net::IpAddr;
use std::time::Duration;

/// The keys a file name may hold.
pub const KEYS: &str = "trtype=RDMA adrfam=IPv4|IPv6 traddr=IP trsvcid=PORT subnqn=NQN ns=NSID \
                        hostaddr=IP hostnqn=NQN timeout=SECONDS";

/// One file: a namespace of a subsystem at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The controller's address and RDMA CM port (4420 unless given).
    pub traddr: IpAddr,
    pub trsvcid: u16,
    pub subnqn: String,
    /// The namespace (1 unless given).
    pub nsid: u32,
    /// Our address (default: the one the kernel routes `traddr` from):
    /// the device binds UDP 4791 there.
    pub hostaddr: Option<IpAddr>,
    pub hostnqn: Option<String>,
    /// How long a command or connection step may go unanswered.
    pub timeout: Duration,
}

/// Why a file name does not name a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{0}` is not key=value (keys: {KEYS})")]
    NotPair(String),
    #[error("unknown key `{0}` (keys: {KEYS})")]
    UnknownKey(String),
    #[error("`{key}` is given twice")]
    Repeated { key: String },
    #[error("{key}={value}: {why}")]
    BadValue { key: &'static str, value: String, why: &'static str },
    #[error("no `{0}=` (keys: {KEYS})")]
    Missing(&'static str),
}

impl Spec {
    /// Reads a fio file name.
    pub fn parse(name: &str) -> Result<Spec, SpecError> {
        let mut seen: Vec<&str> = Vec::new();
        let (mut traddr, mut trsvcid, mut subnqn, mut nsid) = (None, 4420u16, None, 1u32);
        let (mut hostaddr, mut hostnqn, mut timeout, mut adrfam) =
            (None, None, Duration::from_secs(10), None);
        for pair in name.split_whitespace() {
            let (key, raw) = pair.split_once('=').ok_or_else(|| SpecError::NotPair(pair.into()))?;
            if seen.contains(&key) {
                return Err(SpecError::Repeated { key: key.into() });
            }
            seen.push(key);
            let value = raw.replace("\\:", ":");
            let bad =
                |key: &'static str, why: &'static str| SpecError::BadValue { key, value: raw.into(), why };
            match key {
                "trtype" if value.eq_ignore_ascii_case("rdma") => {}
                "trtype" => return Err(bad("trtype", "this engine speaks NVMe/RDMA only")),
                "adrfam" => {
                    adrfam = Some(match value.to_ascii_lowercase().as_str() {
                        "ipv4" => false,
                        "ipv6" => true,
                        _ => return Err(bad("adrfam", "IPv4 or IPv6")),
                    })
                }
                "traddr" => traddr = Some(value.parse().map_err(|_| bad("traddr", "not an IP address"))?),
                "trsvcid" => {
                    trsvcid = value.parse().map_err(|_| bad("trsvcid", "not a port (1-65535)"))?;
                    if trsvcid == 0 {
                        return Err(bad("trsvcid", "not a port (1-65535)"));
                    }
                }
                "subnqn" => subnqn = Some(nqn(&value).map_err(|why| bad("subnqn", why))?),
                "hostnqn" => hostnqn = Some(nqn(&value).map_err(|why| bad("hostnqn", why))?),
                "ns" => {
                    nsid = value.parse().map_err(|_| bad("ns", "not a namespace ID"))?;
                    if nsid == 0 || nsid == u32::MAX {
                        return Err(bad("ns", "namespace IDs are 1 to 0xFFFFFFFE"));
                    }
                }
                "hostaddr" => {
                    hostaddr = Some(value.parse().map_err(|_| bad("hostaddr", "not an IP address"))?)
                }
                "timeout" => {
                    let s: f64 = value.parse().map_err(|_| bad("timeout", "not a number of seconds"))?;
                    if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
                        return Err(bad("timeout", "seconds, more than 0 and at most 3600"));
                    }
                    timeout = Duration::from_secs_f64(s);
                }
                _ => return Err(SpecError::UnknownKey(key.into())),
            }
        }
        let traddr: IpAddr = traddr.ok_or(SpecError::Missing("traddr"))?;
        if adrfam.is_some_and(|v6| v6 != traddr.is_ipv6()) {
            return Err(SpecError::BadValue {
                key: "adrfam",
                value: if traddr.is_ipv6() { "IPv4".into() } else { "IPv6".into() },
                why: "does not match traddr",
            });
        }
        if hostaddr.is_some_and(|h: IpAddr| h.is_ipv6() != traddr.is_ipv6()) {
            return Err(SpecError::BadValue {
                key: "hostaddr",
                value: hostaddr.map(|h| h.to_string()).unwrap_or_default(),
                why: "not of traddr's family",
            });
        }
        Ok(Spec {
            traddr,
            trsvcid,
            subnqn: subnqn.ok_or(SpecError::Missing("subnqn"))?,
            nsid,
            hostaddr,
            hostnqn,
            timeout,
        })
    }
}

/// An NQN as NVMe Base 2.0, 4.5 bounds it: 1 to 223 bytes of UTF-8.
fn nqn(v: &str) -> Result<String, &'static str> {
    if v.is_empty() || v.len() > roce_nvmf::wire::NQN_MAX {
        return Err("an NQN is 1 to 223 bytes");
    }
    Ok(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_name_and_the_defaults() {
        let s = Spec::parse(
            "trtype=RDMA adrfam=IPv4 traddr=10.0.0.2 trsvcid=4421 subnqn=nqn.2026-11.io.roce\\:disk ns=2 \
             hostaddr=10.0.0.3 hostnqn=nqn.h timeout=2.5",
        )
        .unwrap();
        assert_eq!(s.traddr, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!((s.trsvcid, s.nsid), (4421, 2));
        assert_eq!(s.subnqn, "nqn.2026-11.io.roce:disk");
        assert_eq!(s.hostaddr, Some("10.0.0.3".parse().unwrap()));
        assert_eq!(s.hostnqn.as_deref(), Some("nqn.h"));
        assert_eq!(s.timeout, Duration::from_millis(2500));

        let d = Spec::parse("traddr=::1  subnqn=nqn.x:y").unwrap();
        assert_eq!((d.trsvcid, d.nsid, d.hostaddr, d.timeout), (4420, 1, None, Duration::from_secs(10)));
        assert_eq!(d.subnqn, "nqn.x:y");
    }

    #[test]
    fn what_is_refused_and_why() {
        let e = |n: &str| Spec::parse(n).unwrap_err();
        assert_eq!(e("subnqn=a"), SpecError::Missing("traddr"));
        assert_eq!(e("traddr=1.2.3.4"), SpecError::Missing("subnqn"));
        assert_eq!(e("traddr=1.2.3.4 subnqn"), SpecError::NotPair("subnqn".into()));
        assert_eq!(e("traddr=1.2.3.4 subnqn=a color=red"), SpecError::UnknownKey("color".into()));
        assert_eq!(e("traddr=1.2.3.4 traddr=1.2.3.5 subnqn=a"), SpecError::Repeated { key: "traddr".into() });
        for (name, key) in [
            ("traddr=1.2.3 subnqn=a", "traddr"),
            ("traddr=1.2.3.4 subnqn=a trsvcid=0", "trsvcid"),
            ("traddr=1.2.3.4 subnqn=a trsvcid=70000", "trsvcid"),
            ("traddr=1.2.3.4 subnqn=a ns=0", "ns"),
            ("traddr=1.2.3.4 subnqn=a ns=4294967295", "ns"),
            ("traddr=1.2.3.4 subnqn=a trtype=TCP", "trtype"),
            ("traddr=1.2.3.4 subnqn=a adrfam=IPv6", "adrfam"),
            ("traddr=1.2.3.4 subnqn=a adrfam=FC", "adrfam"),
            ("traddr=1.2.3.4 subnqn=a hostaddr=::1", "hostaddr"),
            ("traddr=1.2.3.4 subnqn=a timeout=-1", "timeout"),
            ("traddr=1.2.3.4 subnqn=a timeout=nan", "timeout"),
            ("traddr=1.2.3.4 subnqn=", "subnqn"),
        ] {
            match e(name) {
                SpecError::BadValue { key: k, .. } => assert_eq!(k, key, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        let long = format!("traddr=1.2.3.4 subnqn={}", "n".repeat(224));
        assert!(matches!(e(&long), SpecError::BadValue { key: "subnqn", .. }));
    }
}
