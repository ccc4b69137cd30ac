//! The workload file of `roce sim coll`: a fabric and the collectives a
//! training job runs on it.
//!
//! ```toml
//! seed = 1                       # default 1: same seed, same bytes out
//!
//! [topology]                     # default: 8 hosts on one switch
//! kind = "switch"                # "switch", "fat-tree", "leaf-spine" or "file"
//! hosts = 8                      # switch, leaf-spine
//! k = 8                          # fat-tree: k^3/4 hosts (8: 128, 16: 1,024)
//! hosts_per_leaf = 16            # leaf-spine
//! spines = 4
//! oversubscription = 1.0         # leaf downlink / uplink rate
//! rails = 1                      # NICs per server, one leaf set per rail
//! path = "fabric.toml"           # file: a scenario in roce-fabric's TOML format
//! rate = "100G"                  # every generated link
//! delay = "1us"                  # every generated link, one way
//!
//! [fabric]
//! mtu = 4096                     # IB path MTU of the QPs
//! pfc = true                     # lossless (PFC on every priority)
//! ecn = false                    # ECN marking at the switches
//! cc = "none"                    # or "dcqcn"
//! buffer = "32MiB"               # switch shared buffer (default the HPCC switch's)
//! placement = "linear"           # rank r on host r, or "random" (seeded)
//! weights = [1, 0, 0, 1, 0, 0, 0, 0]  # switch egress: DWRR weights per priority
//!                                #   (ETS; 0 = strict, above the weighted ones);
//!                                #   default strict priority, higher first
//!
//! [[slow_link]]                  # the host link of `rank`, at a fraction of its rate
//! rank = 3
//! fraction = 0.5
//!
//! [[lossy_link]]                 # the host link of `rank` loses frames (each way)
//! rank = 2
//! loss = 0.01
//!
//! [[background]]                 # flows sharing the fabric (storage, other jobs):
//! from = [8, 9, 10, 11]          #   senders, as fabric host indices (not ranks)
//! to = 0                         #   one receiver (an incast when several send)
//! message = "1MiB"               #   bytes per RDMA WRITE, default 1 MiB
//! priority = 0                   #   traffic class priority 0..7 (collectives: 0)
//! depth = 4                      #   WRITEs in flight per flow
//!
//! [[nic_stall]]                  # `rank`'s NIC stops draining (a PFC storm)
//! rank = 5
//! at = "100us"
//! for = "1ms"                    # default: for ever
//!
//! [[collective]]
//! op = "all-reduce"              # all-reduce, reduce-scatter, all-gather,
//!                                # broadcast, reduce, all-to-all
//! type = "float"                 # nccl-tests names (float, half, bfloat16, int32, ...)
//! redop = "sum"
//! algo = "auto"                  # ring, rabenseifner, tree, rd, ... or auto (the cost model),
//!                                # or "switch": the switches aggregate (all-reduce only)
//! sizes = ["64KiB", "1MiB"]      # or size = "1MiB"; bytes per rank
//! ranks = 8                      # default: every host
//! qps_per_peer = 1               # default 1; 2 with algo = "tree" (a QP per tree, so
//!                                #   the trees' transfers on a shared edge go side by side)
//! slots = 4                      # receive slots per (peer, QP); algo = "switch": each
//! slot_bytes = "64KiB"           #   switch's pool of aggregation slots
//! iterations = 5
//! check = true                   # check the results (default: when all ranks' buffers fit in 256 MiB)
//! in_place_only = false          # skip the out-of-place half
//! priority = 0                   # traffic class priority of its QPs, 0..7
//! compute = { mean = "1ms", sigma = "20us" }   # per iteration, per rank: normal, cut at 0
//! delay = [{ rank = 3, by = "200us" }]         # one rank's compute longer, every iteration
//! ```

use std::path::{Path, PathBuf};

use roce_coll::{Algo, DataType, OpKind, RedOp};
use roce_proto::PathMtu;
use serde::Deserialize;

use crate::scenario::{bad_value, invalid, ScenarioError, Time};
use crate::toml_scenario::units::{self, Qty};

/// The algorithm of a `[[collective]]`: the hosts' (the real library's),
/// or the switches' in-network aggregation ([`super::agg`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimAlgo {
    Host(Algo),
    Switch,
}

impl SimAlgo {
    pub fn name(self) -> &'static str {
        match self {
            SimAlgo::Host(a) => a.name(),
            SimAlgo::Switch => "switch",
        }
    }
}

impl std::str::FromStr for SimAlgo {
    type Err = String;
    fn from_str(s: &str) -> Result<SimAlgo, String> {
        match s.to_ascii_lowercase().as_str() {
            "switch" | "in-network" | "sharp" => Ok(SimAlgo::Switch),
            _ => s.parse().map(SimAlgo::Host).map_err(|e: roce_coll::ParseError| format!("{e}, or switch")),
        }
    }
}

/// Where the hosts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Topology {
    Switch { hosts: usize },
    FatTree { k: usize },
    LeafSpine { hosts: usize, hosts_per_leaf: usize, spines: usize, oversubscription: f64, rails: usize },
    File(PathBuf),
}

/// A fault of the straggler study.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowLink {
    pub rank: usize,
    pub fraction: f64,
}

/// A host link that loses frames at random (each direction, from the
/// workload's seed).
#[derive(Debug, Clone, PartialEq)]
pub struct LossyLink {
    pub rank: usize,
    pub loss: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NicStall {
    pub rank: usize,
    pub at_ps: Time,
    pub for_ps: Option<Time>,
}

/// The fabric's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Fabric {
    pub topology: Topology,
    pub rate_bps: u64,
    pub delay_ps: Time,
    pub mtu: PathMtu,
    pub pfc: bool,
    pub ecn: bool,
    pub dcqcn: bool,
    pub buffer_bytes: Option<u64>,
    pub random_placement: bool,
    pub slow_links: Vec<SlowLink>,
    pub lossy_links: Vec<LossyLink>,
    /// DWRR weights per priority at every switch egress (`None`: strict
    /// priority).
    pub weights: Option<[u32; crate::scenario::PRIORITIES]>,
    pub background: Vec<super::background::BackgroundSpec>,
    pub nic_stalls: Vec<NicStall>,
}

/// The compute phase before each call: normal(mean, sigma) cut at 0 on
/// every rank, plus a fixed delay on some.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Compute {
    pub mean_ps: Time,
    pub sigma_ps: Time,
    pub delays: Vec<(usize, Time)>,
}

/// One `[[collective]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CollSpec {
    pub op: OpKind,
    pub dtype: DataType,
    pub redop: RedOp,
    pub algo: SimAlgo,
    /// Bytes per rank (nccl-tests' size column).
    pub sizes: Vec<u64>,
    /// `None`: every host.
    pub ranks: Option<usize>,
    pub qps_per_peer: usize,
    pub slots: usize,
    pub slot_bytes: usize,
    pub iterations: usize,
    pub check: Option<bool>,
    pub in_place_only: bool,
    /// Traffic class priority of the collectives' QPs, 0..=7.
    pub priority: u8,
    pub compute: Compute,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub seed: u64,
    pub fabric: Fabric,
    pub collectives: Vec<CollSpec>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FTopo {
    kind: Option<String>,
    hosts: Option<usize>,
    k: Option<usize>,
    hosts_per_leaf: Option<usize>,
    spines: Option<usize>,
    oversubscription: Option<f64>,
    rails: Option<usize>,
    path: Option<PathBuf>,
    rate: Option<Qty>,
    delay: Option<Qty>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FFabric {
    mtu: Option<usize>,
    pfc: Option<bool>,
    ecn: Option<bool>,
    cc: Option<String>,
    buffer: Option<Qty>,
    weights: Option<Vec<u32>>,
    placement: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FSlow {
    rank: usize,
    fraction: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FBackground {
    from: Vec<usize>,
    to: usize,
    message: Option<Qty>,
    priority: Option<u8>,
    depth: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FLossy {
    rank: usize,
    loss: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FStall {
    rank: usize,
    at: Qty,
    #[serde(rename = "for")]
    for_: Option<Qty>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FCompute {
    mean: Option<Qty>,
    sigma: Option<Qty>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FDelay {
    rank: usize,
    by: Qty,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FColl {
    op: Option<String>,
    #[serde(rename = "type")]
    dtype: Option<String>,
    redop: Option<String>,
    algo: Option<String>,
    size: Option<Qty>,
    sizes: Option<Vec<Qty>>,
    ranks: Option<usize>,
    qps_per_peer: Option<usize>,
    slots: Option<usize>,
    slot_bytes: Option<Qty>,
    iterations: Option<usize>,
    check: Option<bool>,
    in_place_only: Option<bool>,
    priority: Option<u8>,
    compute: Option<FCompute>,
    #[serde(default)]
    delay: Vec<FDelay>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FWorkload {
    seed: Option<u64>,
    #[serde(default)]
    topology: FTopo,
    #[serde(default)]
    fabric: FFabric,
    #[serde(default)]
    slow_link: Vec<FSlow>,
    #[serde(default)]
    lossy_link: Vec<FLossy>,
    #[serde(default)]
    nic_stall: Vec<FStall>,
    #[serde(default)]
    background: Vec<FBackground>,
    #[serde(default)]
    collective: Vec<FColl>,
}

/// The workload `roce sim coll` runs with no file: 8 ranks at 100G on one
/// switch, all-reduce of 64 KiB .. 16 MiB of floats, 5 iterations.
pub const DEFAULT: &str = r#"
seed = 1
[topology]
kind = "switch"
hosts = 8
rate = "100G"
delay = "1us"

[[collective]]
op = "all-reduce"
type = "float"
sizes = ["64KiB", "256KiB", "1MiB", "4MiB", "16MiB"]
iterations = 5
"#;

fn parse<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, ScenarioError>
where
    T::Err: std::fmt::Display,
{
    v.parse().map_err(|e: T::Err| bad_value(key, v, e.to_string()))
}

/// A traffic class priority (default 0).
fn priority(key: &str, v: Option<u8>) -> Result<u8, ScenarioError> {
    match v.unwrap_or(0) {
        p @ 0..=7 => Ok(p),
        p => Err(bad_value(key, &p.to_string(), "expected 0..=7")),
    }
}

/// Reads a workload; `base` is the directory relative paths start from.
pub fn from_str(text: &str, base: &Path) -> Result<Workload, ScenarioError> {
    let f: FWorkload = toml::from_str(text).map_err(|e| ScenarioError::Syntax(e.to_string()))?;
    let t = &f.topology;
    let kind = t.kind.as_deref().unwrap_or("switch");
    let topology = match kind {
        "switch" => Topology::Switch { hosts: t.hosts.unwrap_or(8) },
        "fat-tree" => Topology::FatTree { k: t.k.unwrap_or(8) },
        "leaf-spine" => Topology::LeafSpine {
            hosts: t.hosts.unwrap_or(64),
            hosts_per_leaf: t.hosts_per_leaf.unwrap_or(16),
            spines: t.spines.unwrap_or(4),
            oversubscription: t.oversubscription.unwrap_or(1.0),
            rails: t.rails.unwrap_or(1),
        },
        "file" => match &t.path {
            Some(p) => Topology::File(base.join(p)),
            None => return Err(invalid("topology.path", "a topology of kind \"file\" needs a path")),
        },
        other => {
            return Err(bad_value("topology.kind", other, "expected switch, fat-tree, leaf-spine or file"))
        }
    };
    let rate_bps = match &t.rate {
        Some(q) => units::rate("topology.rate", q)?,
        None => 100_000_000_000,
    };
    let delay_ps = match &t.delay {
        Some(q) => units::duration("topology.delay", q)?,
        None => crate::scenario::PS_PER_US,
    };
    let fb = &f.fabric;
    let mtu_bytes = fb.mtu.unwrap_or(4096);
    let mtu = PathMtu::from_bytes(mtu_bytes).ok_or_else(|| {
        bad_value("fabric.mtu", &mtu_bytes.to_string(), "expected 256, 512, 1024, 2048 or 4096")
    })?;
    let dcqcn = match fb.cc.as_deref().unwrap_or("none") {
        "none" => false,
        "dcqcn" => true,
        other => return Err(bad_value("fabric.cc", other, "expected none or dcqcn")),
    };
    let random_placement = match fb.placement.as_deref().unwrap_or("linear") {
        "linear" => false,
        "random" => true,
        other => return Err(bad_value("fabric.placement", other, "expected linear or random")),
    };
    let buffer_bytes = fb.buffer.as_ref().map(|q| units::size("fabric.buffer", q)).transpose()?;
    let mut slow_links = Vec::new();
    for s in &f.slow_link {
        if !(s.fraction > 0.0 && s.fraction <= 1.0) {
            return Err(bad_value(
                "slow_link.fraction",
                &s.fraction.to_string(),
                "expected a fraction in (0, 1]",
            ));
        }
        slow_links.push(SlowLink { rank: s.rank, fraction: s.fraction });
    }
    let weights = match &fb.weights {
        None => None,
        Some(v) if v.len() == crate::scenario::PRIORITIES && v.iter().any(|&w| w > 0) => {
            let mut a = [0u32; crate::scenario::PRIORITIES];
            a.copy_from_slice(v);
            Some(a)
        }
        Some(v) => {
            return Err(bad_value(
                "fabric.weights",
                &format!("{v:?}"),
                "expected 8 weights (one per priority), one at least above 0",
            ))
        }
    };
    let mut background = Vec::new();
    for (i, b) in f.background.iter().enumerate() {
        let key = |k: &str| format!("background[{i}].{k}");
        if b.from.is_empty() || b.from.contains(&b.to) {
            return Err(invalid(key("from"), "one sender at least, and not the receiver"));
        }
        let message = match &b.message {
            Some(q) => units::size(&key("message"), q)?,
            None => 1 << 20,
        };
        if message == 0 || message > 1 << 30 {
            return Err(bad_value(&key("message"), &message.to_string(), "expected 1 B ..= 1 GiB"));
        }
        let priority = priority(&key("priority"), b.priority)?;
        let depth = b.depth.unwrap_or(4);
        if !(1..=64).contains(&depth) {
            return Err(bad_value(&key("depth"), &depth.to_string(), "expected 1..=64"));
        }
        background.push(super::background::BackgroundSpec {
            from: b.from.clone(),
            to: b.to,
            message: message as usize,
            priority,
            depth,
        });
    }
    let mut lossy_links = Vec::new();
    for l in &f.lossy_link {
        if !(0.0..1.0).contains(&l.loss) {
            return Err(bad_value(
                "lossy_link.loss",
                &l.loss.to_string(),
                "expected a probability in [0, 1)",
            ));
        }
        lossy_links.push(LossyLink { rank: l.rank, loss: l.loss });
    }
    let mut nic_stalls = Vec::new();
    for s in &f.nic_stall {
        let at_ps = units::duration("nic_stall.at", &s.at)?;
        let for_ps = s.for_.as_ref().map(|q| units::duration("nic_stall.for", q)).transpose()?;
        nic_stalls.push(NicStall { rank: s.rank, at_ps, for_ps });
    }
    let mut collectives = Vec::new();
    for (i, c) in f.collective.iter().enumerate() {
        let key = |k: &str| format!("collective[{i}].{k}");
        let op: OpKind = parse(&key("op"), c.op.as_deref().unwrap_or("all-reduce"))?;
        if op == OpKind::Barrier {
            return Err(bad_value(&key("op"), "barrier", "a barrier moves no bytes; not a workload"));
        }
        let sizes = match (&c.size, &c.sizes) {
            (Some(_), Some(_)) => return Err(invalid(key("sizes"), "give size or sizes, not both")),
            (Some(q), None) => vec![units::size(&key("size"), q)?],
            (None, Some(v)) if !v.is_empty() => {
                v.iter().map(|q| units::size(&key("sizes"), q)).collect::<Result<_, _>>()?
            }
            _ => return Err(invalid(key("sizes"), "a collective needs size or sizes")),
        };
        let slot_bytes = match &c.slot_bytes {
            Some(q) => units::size(&key("slot_bytes"), q)? as usize,
            None => 64 << 10,
        };
        let compute = match &c.compute {
            Some(fc) => Compute {
                mean_ps: fc
                    .mean
                    .as_ref()
                    .map(|q| units::duration(&key("compute.mean"), q))
                    .transpose()?
                    .unwrap_or(0),
                sigma_ps: fc
                    .sigma
                    .as_ref()
                    .map(|q| units::duration(&key("compute.sigma"), q))
                    .transpose()?
                    .unwrap_or(0),
                delays: Vec::new(),
            },
            None => Compute::default(),
        };
        let mut compute = compute;
        for d in &c.delay {
            compute.delays.push((d.rank, units::duration(&key("delay.by"), &d.by)?));
        }
        let priority = priority(&key("priority"), c.priority)?;
        let algo: SimAlgo = parse(&key("algo"), c.algo.as_deref().unwrap_or("auto"))?;
        if algo == SimAlgo::Switch {
            if op != OpKind::AllReduce {
                return Err(bad_value(&key("op"), op.name(), "the switches aggregate all-reduce only"));
            }
            if c.qps_per_peer.is_some_and(|q| q != 1) {
                return Err(invalid(key("qps_per_peer"), "algo = \"switch\" runs one QP per tree edge"));
            }
        }
        let iterations = c.iterations.unwrap_or(5);
        if iterations == 0 {
            return Err(bad_value(&key("iterations"), "0", "at least 1"));
        }
        collectives.push(CollSpec {
            op,
            dtype: parse(&key("type"), c.dtype.as_deref().unwrap_or("float"))?,
            redop: parse(&key("redop"), c.redop.as_deref().unwrap_or("sum"))?,
            algo,
            sizes,
            ranks: c.ranks,
            // the double tree: a QP per tree (`Schedule::lanes`)
            qps_per_peer: c.qps_per_peer.unwrap_or(if algo == SimAlgo::Host(Algo::Tree) { 2 } else { 1 }),
            slots: c.slots.unwrap_or(4),
            slot_bytes,
            iterations,
            check: c.check,
            in_place_only: c.in_place_only.unwrap_or(false),
            priority,
            compute,
        });
    }
    if collectives.is_empty() {
        return Err(invalid("collective", "a workload needs at least one [[collective]]"));
    }
    Ok(Workload {
        seed: f.seed.unwrap_or(1),
        fabric: Fabric {
            topology,
            rate_bps,
            delay_ps,
            mtu,
            pfc: fb.pfc.unwrap_or(true),
            ecn: fb.ecn.unwrap_or(false),
            dcqcn,
            buffer_bytes,
            random_placement,
            slow_links,
            lossy_links,
            weights,
            background,
            nic_stalls,
        },
        collectives,
    })
}

/// Reads a workload file.
pub fn from_path(path: &Path) -> Result<Workload, ScenarioError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ScenarioError::Io { path: path.to_path_buf(), source: e })?;
    from_str(&text, path.parent().unwrap_or(Path::new(".")))
}
