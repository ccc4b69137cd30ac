//! `roce fabric plan`: the arguments, the topology (ours or HPCC's) and
//! the check's workload read, then `roce_fabric::plan` printed, written
//! and, with `--check`, simulated.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use roce_fabric::hpcc::{self, HpccConfig, Topology};
use roce_fabric::plan::check::{check, parse_cdf, poisson_flows, CheckOptions, Workload};
use roce_fabric::plan::{plan, PlanInput};
use roce_fabric::{toml_scenario, validate, FlowOp, FlowSpec, Framing, Scenario, PRIORITIES, PS_PER_NS};

use super::{FabricCliError, EXIT_PLAN_FAILS};

/// Defaults for a topology that names no settings (HPCC's files): the
/// HPCC artifact's 1 KB packets' MTU and 32 MB buffers, priority 3.
const DEFAULT_MTU: u32 = 1024;
const DEFAULT_BUFFER: u64 = 32 * 1024 * 1024;
const DEFAULT_LOSSLESS: u8 = 1 << 3;
/// Fibre's propagation delay, ps per metre (~5 ns/m, MODEL-NOTES §5).
const FIBRE_PS_PER_M: u64 = 5 * PS_PER_NS;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The topology: a TOML scenario (its nodes and links; its [switch]
    /// and [nic] give the defaults below) or an HPCC topology file.
    pub topology: PathBuf,
    /// Read TOPOLOGY as an HPCC topology file (default: unless it ends in
    /// .toml).
    #[arg(long)]
    pub hpcc_topology: bool,
    /// IB path MTU of the NICs: 256, 512, 1024, 2048 or 4096 (default: the
    /// scenario's, else 1024).
    #[arg(long, value_name = "BYTES")]
    pub mtu: Option<u32>,
    /// Each switch's shared buffer, e.g. 32MiB or 12MB (default: the
    /// scenario's, else 32MiB).
    #[arg(long, value_name = "SIZE")]
    pub buffer: Option<String>,
    /// Lossless priorities, e.g. 3 or 3,4 (default: the scenario's, else 3).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub lossless: Vec<u8>,
    /// Give every link this cable length (fibre, 5 ns/m), e.g. 100m
    /// (default: the delays the topology gives).
    #[arg(long, value_name = "LENGTH")]
    pub cable: Option<String>,
    /// Scale every port's headroom (1: the plan; e.g. 0.3 to watch a short
    /// headroom fail its check).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub headroom_scale: f64,
    /// Write the [switch] and [nic] sections to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Simulate the plan: a worst-case incast and, with --flows or --cdf,
    /// a workload.
    #[arg(long)]
    pub check: bool,
    /// Incast senders (default: every host but the receiver).
    #[arg(long, value_name = "N")]
    pub incast_senders: Option<usize>,
    /// Bytes per incast sender (default: three switch buffers over the
    /// senders, at least 64 KiB).
    #[arg(long, value_name = "SIZE")]
    pub incast_size: Option<String>,
    /// The workload: an HPCC flow list (`src dst pg dport size start_s`).
    #[arg(long, value_name = "FILE", conflicts_with = "cdf")]
    pub flows: Option<PathBuf>,
    /// Only the first N flows of --flows (a shortened workload).
    #[arg(long, value_name = "N", requires = "flows")]
    pub max_flows: Option<usize>,
    /// The workload: Poisson arrivals at every host with sizes from this
    /// CDF (`size_bytes cdf_percent` lines, HPCC's traffic_gen format).
    #[arg(long, value_name = "FILE")]
    pub cdf: Option<PathBuf>,
    /// Load of each host's link for --cdf (0..1).
    #[arg(long, value_name = "F", default_value_t = 0.3, requires = "cdf")]
    pub load: f64,
    /// Arrivals over this long for --cdf, e.g. 1ms.
    #[arg(long, value_name = "TIME", default_value = "1ms", requires = "cdf")]
    pub duration: String,
    /// The NICs' DCQCN parameter set: hpcc (the HPCC artifact's), nvidia
    /// (ConnectX firmware defaults) or paper; steps scaled to the NIC rate.
    #[arg(long, value_name = "SET", default_value = roce_fabric::plan::rules::DCQCN_SET)]
    pub dcqcn_set: String,
    /// Seed of the generated workload and the simulations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> FabricCliError + '_ {
    move |source| FabricCliError::Io { path: path.to_path_buf(), source }
}

/// The topology and the settings it names (TOML) or `None` (HPCC).
fn read_topology(args: &PlanArgs) -> Result<(Scenario, bool), FabricCliError> {
    let ours = !args.hpcc_topology && args.topology.extension().is_some_and(|e| e == "toml");
    if ours {
        return Ok((toml_scenario::from_path(&args.topology)?, true));
    }
    let topo = Topology::read(&args.topology)?;
    let mut scn = hpcc::scenario_from_parts(&topo, &[], &HpccConfig::default());
    scn.name =
        args.topology.file_stem().map_or_else(|| "topology".into(), |s| s.to_string_lossy().into_owned());
    // A plan is for a real fabric: Ethernet framing.
    scn.framing = Framing::Ethernet;
    Ok((scn, false))
}

fn plan_input(args: &PlanArgs, scn: &Scenario, ours: bool) -> Result<PlanInput, FabricCliError> {
    let buffer = match &args.buffer {
        Some(b) => toml_scenario::parse_size("--buffer", b)?,
        None if ours => scn.switch.buffer_bytes,
        None => DEFAULT_BUFFER,
    };
    let mut lossless_mask = 0u8;
    for &p in &args.lossless {
        if usize::from(p) >= PRIORITIES {
            return Err(FabricCliError::Usage(format!("--lossless {p}: priorities are 0..=7")));
        }
        lossless_mask |= 1 << p;
    }
    if args.lossless.is_empty() {
        lossless_mask = if ours { scn.switch.lossless_mask } else { DEFAULT_LOSSLESS };
    }
    Ok(PlanInput {
        mtu: args.mtu.unwrap_or(if ours { scn.nic.mtu } else { DEFAULT_MTU }),
        buffer_bytes: buffer,
        lossless_mask,
        headroom_scale: args.headroom_scale,
        framing: scn.framing,
        dcqcn_set: args.dcqcn_set.clone(),
    })
}

/// The check's workload, if one is asked for.
fn workload(args: &PlanArgs, planned: &Scenario) -> Result<Option<Workload>, FabricCliError> {
    if let Some(path) = &args.flows {
        let mut flows: Vec<FlowSpec> = hpcc::read_flows(path)?
            .into_iter()
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
        // From time 0 (HPCC's lists start at 2 s), the gaps kept.
        let first = flows.iter().map(|f| f.start_ps).min().unwrap_or(0);
        for f in &mut flows {
            f.start_ps -= first;
        }
        let all = flows.len();
        if let Some(n) = args.max_flows {
            flows.truncate(n);
        }
        let name = format!("{} ({} of {all} flows)", path.display(), flows.len());
        let mut with = planned.clone();
        with.flows = flows.clone();
        validate(&with)?;
        return Ok(Some(Workload { name, flows }));
    }
    let Some(path) = &args.cdf else { return Ok(None) };
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let cdf = parse_cdf(&text)?;
    let duration = toml_scenario::parse_duration("--duration", &args.duration)?;
    let flows = poisson_flows(planned, &cdf, args.load, duration, args.seed)?;
    let name = format!(
        "{} at load {}, {} ({} flows)",
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
        args.load,
        args.duration,
        flows.len()
    );
    Ok(Some(Workload { name, flows }))
}

pub fn cmd_plan(args: &PlanArgs) -> Result<ExitCode, FabricCliError> {
    let (mut scn, ours) = read_topology(args)?;
    if let Some(len) = &args.cable {
        let metres = len.trim().strip_suffix('m').unwrap_or(len).trim();
        let metres: f64 =
            metres.parse().ok().filter(|m: &f64| m.is_finite() && *m >= 0.0).ok_or_else(|| {
                FabricCliError::Usage(format!("--cable {len:?}: expected metres, e.g. 100m"))
            })?;
        for l in &mut scn.links {
            l.delay_ps = (metres * FIBRE_PS_PER_M as f64).round() as u64;
        }
    }
    let input = plan_input(args, &scn, ours)?;
    let p = plan(&scn, &input)?;
    println!("{p}");
    let sections = p.toml_sections();
    println!("The plan as a scenario's sections (the TOML of `roce sim run`):");
    println!("{sections}");
    if let Some(out) = &args.out {
        let text = format!("# `roce fabric plan` for {}\n{sections}", p.name);
        std::fs::write(out, text).map_err(io_err(out))?;
        println!("written to {}", out.display());
    }
    if !args.check {
        return Ok(ExitCode::SUCCESS);
    }
    let mut planned = p.apply(&scn);
    planned.seed = args.seed;
    planned.stop_ps = None;
    let incast_bytes =
        args.incast_size.as_deref().map(|s| toml_scenario::parse_size("--incast-size", s)).transpose()?;
    let opts = CheckOptions {
        incast_senders: args.incast_senders,
        incast_bytes,
        workload: workload(args, &planned)?,
        payload: u64::from(input.mtu),
    };
    let report = check(&planned, &opts, None)?;
    println!();
    print!("{report}");
    Ok(if report.holds() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PLAN_FAILS) })
}
