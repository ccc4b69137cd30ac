//! Runs of the HPCC ns-3 simulator (alibaba-edu/High-Precision-Congestion-
//! Control): their input files turned into a [`Scenario`], and their output
//! files (`fct.txt`, `pfc.txt`) written from a [`crate::Report`] and read.
//!
//! A run directory holds `config.txt` ([`config`]), the flow list named by
//! its `FLOW_FILE` ([`flows`]) and, after a run, `fct.txt` and `pfc.txt`
//! ([`files`]); the topology ([`topology`]) is a separate file. Every
//! parse error names the file and line ([`HpccError::Parse`]).
//!
//! The mapping to a [`Scenario`] ([`scenario_from_parts`]):
//! - nodes in HPCC id order, hosts named `h<id>`, switches `s<id>`; links in
//!   file order, so each node's ports number from 1 in the order of its
//!   links, as ns-3 numbers devices (the `if_index` of `pfc.txt`); a link's
//!   loss is its topology `error_rate`;
//! - PPP framing; [`SwitchConfig::hpcc`] with `BUFFER_SIZE`, the ECN rules
//!   of `KMIN_MAP`/`KMAX_MAP`/`PMAX_MAP`, ECN on iff `ENABLE_QCN` 1, and
//!   with `USE_DYNAMIC_PFC_THRESHOLD` 0 the static threshold of
//!   [`static_pfc_threshold`] (our choice: the artifact has no static mode);
//! - [`NicConfig::hpcc`] with the smallest IB MTU holding
//!   `PACKET_PAYLOAD_SIZE`, DCQCN iff `CC_MODE` 1 and `ENABLE_QCN` 1 (else
//!   no CC), its timers, gain, steps and rates from the config as
//!   `key=value` overrides of the `hpcc` set, ACKs at priority 7 iff
//!   `ACK_HIGH_PRIO` 1;
//! - flows in file order (pg = priority, RDMA WRITE); `LINK_DOWN` as a
//!   link-down event; seed 1; stop at `SIMULATOR_STOP_TIME`; deadlock
//!   check every 100 us.
//!
//! Absent keys take the artifact's code defaults where they matter:
//! `ENABLE_QCN` 1, `CC_MODE` 1, `PACKET_PAYLOAD_SIZE` 1000; absent DCQCN
//! keys keep the `hpcc` set's values.

pub mod compat;
pub mod config;
pub mod files;
pub mod flows;
pub mod standalone;
mod text;
pub mod topology;
pub mod units;

use std::path::{Path, PathBuf};

pub use compat::{ns3_compat, Choice};
pub use config::HpccConfig;
pub use files::{
    hpcc_sports, parse_fct, parse_pfc, read_fct, read_pfc, write_fct, write_pfc, FctLine, PfcLine,
    HPCC_FIRST_SPORT,
};
pub use flows::{parse_flows, read_flows, HpccFlow};
pub use standalone::{standalone_fct_ps, Standalone, STANDALONE_HEADER_BYTES};
pub use topology::{TopoLink, Topology};

use crate::scenario::{
    EventKind, FlowOp, FlowSpec, Framing, LinkFaults, LinkSpec, MonitorConfig, NicConfig, NodeId, NodeKind,
    NodeSpec, PfcThreshold, Scenario, SwitchConfig, Time, TimedEvent, PS_PER_US,
};

/// Why an HPCC file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HpccError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Malformed content at a line (1-based).
    #[error("{}:{line}: {reason}", path.display())]
    Parse { path: PathBuf, line: usize, reason: ParseReason },
}

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseReason {
    #[error("the file ends early: expected {0}")]
    UnexpectedEof(&'static str),
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    #[error("bad {field} {value:?}: expected {expected}")]
    BadValue { field: &'static str, value: String, expected: &'static str },
    #[error("unexpected extra field {0:?}")]
    ExtraField(String),
    #[error("{0}")]
    Inconsistent(String),
}

/// The artifact's default `PACKET_PAYLOAD_SIZE`.
pub const DEFAULT_PAYLOAD: u32 = 1000;
/// IB path MTUs, smallest first.
pub const IB_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];
/// Priority of ACKs with `ACK_HIGH_PRIO` 1.
pub const ACK_HIGH_PRIORITY: u8 = 7;
/// Seed of HPCC scenarios (the artifact is deterministic; so are we).
pub const HPCC_SEED: u64 = 1;
/// How often the deadlock detector runs in HPCC scenarios.
pub const DEADLOCK_CHECK_PS: Time = 100 * PS_PER_US;
/// The artifact's `CC_MODE` for DCQCN.
pub const CC_MODE_DCQCN: u32 = 1;
/// Static PFC threshold (`USE_DYNAMIC_PFC_THRESHOLD` 0): XOFF at this
/// fraction of the buffer per ingress (port, priority)...
pub const STATIC_XOFF_BUFFER_DIVISOR: u64 = 16;
/// ...and XON this far below it (the artifact's dynamic resume offset).
pub const STATIC_XON_OFFSET: u64 = 3 * 1024;

/// HPCC's host addressing, which the simulator's hosts use.
pub use crate::scenario::{host_ip, ip_node};

/// The smallest IB MTU that holds `payload` bytes (4096 above that).
pub fn ib_mtu_for(payload: u32) -> u32 {
    IB_MTUS.into_iter().find(|&m| m >= payload).unwrap_or(IB_MTUS[IB_MTUS.len() - 1])
}

/// The static threshold used when a config turns dynamic thresholds off:
/// XOFF at 1/16 of the buffer (2 MiB of 32 MiB: above the 100 Gb/s Kmax of
/// 1.6 MB, so ECN acts before PFC on one congested port, as the DCQCN paper
/// advises), XON 3 KiB below. The artifact has no static mode.
pub fn static_pfc_threshold(buffer_bytes: u64) -> PfcThreshold {
    let xoff = buffer_bytes / STATIC_XOFF_BUFFER_DIVISOR;
    PfcThreshold::Static { xoff, xon: xoff.saturating_sub(STATIC_XON_OFFSET) }
}

/// Payload bytes per packet of a config.
pub fn payload_bytes(cfg: &HpccConfig) -> u32 {
    cfg.packet_payload_size.unwrap_or(DEFAULT_PAYLOAD)
}

/// A loaded run: its scenario and the config it came from.
#[derive(Debug, Clone)]
pub struct HpccRun {
    pub scenario: Scenario,
    pub config: HpccConfig,
    pub topology: Topology,
}

impl HpccRun {
    pub fn payload(&self) -> u32 {
        payload_bytes(&self.config)
    }
}

/// Loads `run_dir` (its `config.txt` and flow list) over the topology file
/// `topology`; the scenario is named after the directory.
pub fn load_run(run_dir: &Path, topology: &Path) -> Result<Scenario, HpccError> {
    Ok(load_run_full(run_dir, topology)?.scenario)
}

/// [`load_run`], keeping the config and topology. The flow list is the file
/// named by `FLOW_FILE` (its last component, in `run_dir`), else
/// `flow.txt`. Flows must join two different hosts and `LINK_DOWN` must
/// name a link.
pub fn load_run_full(run_dir: &Path, topology: &Path) -> Result<HpccRun, HpccError> {
    let config_path = run_dir.join("config.txt");
    let config = HpccConfig::read(&config_path)?;
    let topo = Topology::read(topology)?;
    let flow_name =
        config.flow_file.as_deref().and_then(|f| Path::new(f).file_name()).unwrap_or("flow.txt".as_ref());
    let flow_path = run_dir.join(flow_name);
    let flows = read_flows(&flow_path)?;
    for f in &flows {
        for (end, node) in [("src", f.src), ("dst", f.dst)] {
            let problem = if node >= topo.node_count() {
                Some(format!("{end} {node} is not a node of {}", topology.display()))
            } else if topo.is_switch[node] {
                Some(format!("{end} {node} is a switch"))
            } else {
                None
            };
            if let Some(p) = problem {
                return Err(text::parse_error(&flow_path, f.line, ParseReason::Inconsistent(p)));
            }
        }
        if f.src == f.dst {
            let p = format!("a flow from host {} to itself", f.src);
            return Err(text::parse_error(&flow_path, f.line, ParseReason::Inconsistent(p)));
        }
    }
    if let Some(ld) = &config.link_down {
        if find_link(&topo, ld.a, ld.b).is_none() {
            let p = format!("LINK_DOWN: no link between nodes {} and {}", ld.a, ld.b);
            return Err(text::parse_error(&config_path, ld.line, ParseReason::Inconsistent(p)));
        }
    }
    let mut scenario = scenario_from_parts(&topo, &flows, &config);
    scenario.name = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| run_dir.display().to_string());
    Ok(HpccRun { scenario, config, topology: topo })
}

/// The first link between `a` and `b` (either way round).
fn find_link(topo: &Topology, a: NodeId, b: NodeId) -> Option<usize> {
    topo.links.iter().position(|l| (l.a, l.b) == (a, b) || (l.a, l.b) == (b, a))
}

/// Builds the scenario of a run from its parsed parts (see the module
/// docs for the mapping). Named `hpcc`; [`load_run`] names it after its
/// directory. Inputs are taken as validated: a `LINK_DOWN` naming no link
/// is left out.
pub fn scenario_from_parts(topo: &Topology, flows: &[HpccFlow], cfg: &HpccConfig) -> Scenario {
    let nodes = topo
        .is_switch
        .iter()
        .enumerate()
        .map(|(id, &sw)| {
            let (kind, prefix) = if sw { (NodeKind::Switch, 's') } else { (NodeKind::Host, 'h') };
            NodeSpec { kind, name: format!("{prefix}{id}") }
        })
        .collect();
    let links = topo
        .links
        .iter()
        .map(|l| LinkSpec {
            a: l.a,
            b: l.b,
            rate_bps: l.rate_bps,
            delay_ps: l.delay_ps,
            loss: l.error_rate,
            faults: LinkFaults::default(),
        })
        .collect();
    let flows = flows
        .iter()
        .map(|f| FlowSpec {
            src: f.src,
            dst: f.dst,
            priority: f.pg,
            size: f.size,
            start_ps: f.start_ps,
            op: FlowOp::Write,
            dport: f.dport,
        })
        .collect();
    let events = cfg
        .link_down
        .iter()
        .filter_map(|ld| {
            find_link(topo, ld.a, ld.b)
                .map(|link| TimedEvent { at_ps: ld.at_ps, kind: EventKind::LinkDown { link } })
        })
        .collect();
    Scenario {
        name: "hpcc".into(),
        seed: HPCC_SEED,
        nodes,
        links,
        flows,
        switch: switch_config(cfg),
        nic: nic_config(cfg),
        framing: Framing::Ppp,
        routes: Vec::new(),
        events,
        watchdog: None,
        stop_ps: cfg.stop_time_ps,
        deadlock_check_ps: DEADLOCK_CHECK_PS,
        monitor: MonitorConfig::default(),
    }
}

fn qcn_enabled(cfg: &HpccConfig) -> bool {
    cfg.enable_qcn.unwrap_or(true)
}

fn switch_config(cfg: &HpccConfig) -> crate::scenario::SwitchConfig {
    let mut sw = SwitchConfig::hpcc();
    if let Some(b) = cfg.buffer_bytes {
        sw.buffer_bytes = b;
    }
    if let (Some(kmin), Some(kmax), Some(pmax)) = (&cfg.kmin_map, &cfg.kmax_map, &cfg.pmax_map) {
        sw.ecn = kmin
            .iter()
            .zip(kmax)
            .zip(pmax)
            .map(|((lo, hi), p)| crate::scenario::EcnRule {
                rate_bps: lo.rate_bps,
                kmin: lo.value,
                kmax: hi.value,
                pmax: p.value,
            })
            .collect();
    }
    sw.ecn_enabled = qcn_enabled(cfg);
    if cfg.use_dynamic_pfc_threshold == Some(false) {
        sw.pfc = static_pfc_threshold(sw.buffer_bytes);
    }
    sw
}

fn nic_config(cfg: &HpccConfig) -> NicConfig {
    let mut nic = NicConfig::hpcc();
    nic.mtu = ib_mtu_for(payload_bytes(cfg));
    let dcqcn = cfg.cc_mode.unwrap_or(CC_MODE_DCQCN) == CC_MODE_DCQCN && qcn_enabled(cfg);
    nic.cc = if dcqcn { "dcqcn" } else { "none" }.into();
    nic.dcqcn_params = dcqcn_params(cfg);
    nic.ack_priority = (cfg.ack_high_prio == Some(true)).then_some(ACK_HIGH_PRIORITY);
    nic
}

/// The config's DCQCN keys as `key=value` overrides for
/// `roce_proto::cc::DcqcnParams::set` (bare numbers: ns and bits/s).
pub fn dcqcn_params(cfg: &HpccConfig) -> Vec<String> {
    let mut p = Vec::new();
    let mut push = |key: &str, v: Option<String>| {
        if let Some(v) = v {
            p.push(format!("{key}={v}"));
        }
    };
    push("alpha_period", cfg.alpha_resume_interval_ns.map(|ns| format!("{ns}ns")));
    push("rate_decrease_period", cfg.rate_decrease_interval_ns.map(|ns| format!("{ns}ns")));
    push("rate_increase_period", cfg.rp_timer_ns.map(|ns| format!("{ns}ns")));
    push("g", cfg.ewma_gain.map(|g| g.to_string()));
    push("fast_recovery_steps", cfg.fast_recovery_times.map(|n| n.to_string()));
    push("ai_rate_bps", cfg.rate_ai_bps.map(|r| r.to_string()));
    push("hai_rate_bps", cfg.rate_hai_bps.map(|r| r.to_string()));
    push("min_rate_bps", cfg.min_rate_bps.map(|r| r.to_string()));
    push(
        "clamp_target",
        cfg.clamp_target_rate.map(|c| if c { "always" } else { "after_timer_increase" }.to_string()),
    );
    p
}

#[cfg(test)]
pub(crate) mod tests;
