//! The file's shape: what serde reads and writes, field for field (unknown
//! keys are errors). Quantities stay as written ([`Qty`]) until building.

use serde::{Deserialize, Serialize};

use super::units::Qty;
use crate::scenario::{AckClass, FlowOp, Framing};

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) framing: Option<Framing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stop: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) deadlock_check: Option<Qty>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) switches: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) host_group: Vec<HostGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) link_defaults: Option<LinkDefaults>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) links: Vec<Link>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) flows: Vec<Flow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) incast: Vec<Incast>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) switch: Option<SwitchT>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) nic: Option<NicT>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) events: Vec<Event>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) watchdog: Option<WatchdogT>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) monitor: Option<MonitorT>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HostGroup {
    pub(super) prefix: String,
    pub(super) count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) first: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) attach: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rate: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) delay: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) loss: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct LinkDefaults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rate: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) delay: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) loss: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Link {
    pub(super) a: String,
    pub(super) b: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rate: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) delay: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) loss: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) faults: Option<FaultsT>,
}

/// `faults = { jitter = "100ns", reorder = 0.01, reorder_delay = "2us",
/// duplicate = 0.001, corrupt = 0.001 }` on a link.
#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FaultsT {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) jitter: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reorder: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reorder_delay: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) duplicate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) corrupt: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Flow {
    pub(super) src: String,
    pub(super) dst: String,
    pub(super) size: Qty,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) start: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) priority: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) op: Option<FlowOp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dport: Option<u16>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum Senders {
    Count(u64),
    Names(Vec<String>),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Incast {
    pub(super) senders: Senders,
    pub(super) receiver: String,
    pub(super) size: Qty,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) start: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stagger: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) priority: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) op: Option<FlowOp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dport: Option<u16>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SwitchT {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) buffer: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reserve: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) headroom_rtts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lossless: Option<Vec<u8>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) pfc: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ecn: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) scheduling: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dwrr_weights: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) pfc_threshold: Option<PfcT>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ecn_rules: Option<Vec<EcnT>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) pause_quanta: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ack_class: Option<AckClass>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) headroom_extra: Option<Vec<HeadroomT>>,
}

/// `[[switch.headroom_extra]] rate = "100G" bytes = "41KB"`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HeadroomT {
    pub(super) rate: Qty,
    pub(super) bytes: Qty,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PfcT {
    pub(super) kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) xoff: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) xon: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) base_shift: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) base_rate: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) resume_offset: Option<Qty>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EcnT {
    pub(super) rate: Qty,
    pub(super) kmin: Qty,
    pub(super) kmax: Qty,
    pub(super) pmax: f64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum AckPrio {
    Prio(u8),
    Word(String),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NicT {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cc: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dcqcn_set: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dcqcn_params: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ack_priority: Option<AckPrio>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) chunk: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_unacked_psns: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ack_req_every: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rx_xoff: Option<Qty>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Route {
    pub(super) switch: String,
    pub(super) dst: String,
    pub(super) via: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Event {
    pub(super) at: Qty,
    pub(super) kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) a: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) b: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) host: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WatchdogT {
    pub(super) timeout: Qty,
    pub(super) restore: Qty,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MonitorT {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) ports: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) interval: Option<Qty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) flow_rates: Option<bool>,
}
