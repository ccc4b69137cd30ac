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
//! dport = 100                # fct.txt's dport (HPCC's flow-list port); default 100
//!
//! [[incast]]                 # one flow from each sender to the receiver
//! senders = ["h1..h7"]       # or a count: the first N hosts other than the receiver
//! receiver = "h8"
//! size = "1MB"
//! start = "0us"              # default 0
//! stagger = "1us"            # optional: sender k starts k x stagger later
//! priority = 3
//! op = "write"
//! dport = 100
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
//! ack_class = "nic"          # ACKs/CNPs queued at the NIC's ack_priority;
//!                            # "packet": at their own class (an ACK with its
//!                            # flow's data: the HPCC artifact's switches)
//! # or { kind = "dynamic", base_shift = 3, base_rate = "100G", resume_offset = "3KiB" }
//! [[switch.headroom_extra]]  # headroom beyond headroom_rtts x rate x delay
//! rate = "100G"              # for ports of this rate (nearest at or above,
//! bytes = "41KB"             # as ECN rules); default none (HPCC's model)
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

mod build;
mod schema;
pub(crate) mod units;
mod write;

use std::path::Path;

use crate::scenario::Scenario;
pub use crate::scenario::ScenarioError;
pub use write::to_toml;

/// A size as the format writes it (`"32MiB"`, `"1.5MB"`, or bare bytes
/// `"4096"`), for command lines; `key` names it in the error.
pub fn parse_size(key: &str, text: &str) -> Result<u64, ScenarioError> {
    match text.trim().parse::<u64>() {
        Ok(v) => Ok(v),
        Err(_) => units::size(key, &units::Qty::Text(text.to_string())),
    }
}

/// A duration as the format writes it (`"1.5us"`, `"2ms"`); `key` names
/// it in the error.
pub fn parse_duration(key: &str, text: &str) -> Result<crate::scenario::Time, ScenarioError> {
    units::duration(key, &units::Qty::Text(text.to_string()))
}

/// Reads a scenario from TOML text (see the module documentation).
pub fn from_str(s: &str) -> Result<Scenario, ScenarioError> {
    build::build(s, None)
}

/// Reads a scenario from a TOML file; its name defaults to the file's stem.
pub fn from_path(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ScenarioError::Io { path: path.to_path_buf(), source })?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    build::build(&text, stem)
}

#[cfg(test)]
mod tests;
