//! The flags of `roce coll`: nccl-tests' (`-b -e -f -i -n -m -w -c -d -o
//! -r -z -a -I -K -J`, same meanings and defaults) and the transport's.

use clap::{Args, Subcommand};
use roce_coll::cost::Params;
use roce_coll::{Algo, DataType, OpKind, RedOp};

use super::Error;

/// The operations, as nccl-tests' programs.
#[derive(Debug, Subcommand)]
pub enum CollCommand {
    /// all_reduce_perf.
    AllReduce(CollArgs),
    /// reduce_scatter_perf.
    ReduceScatter(CollArgs),
    /// all_gather_perf.
    AllGather(CollArgs),
    /// broadcast_perf.
    Broadcast(CollArgs),
    /// reduce_perf.
    Reduce(CollArgs),
    /// alltoall_perf.
    AllToAll(CollArgs),
}

/// `RANK:VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct RankDelay {
    pub rank: usize,
    pub secs: f64,
}

/// `RANK:GBPS`.
#[derive(Debug, Clone, PartialEq)]
pub struct RankRate {
    pub rank: usize,
    pub gbps: f64,
}

pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (a number, optionally K, M or G)"))?;
    v.checked_mul(mul).ok_or_else(|| format!("{s} is too large"))
}

fn parse_secs(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mul) = if let Some(x) = t.strip_suffix("us") {
        (x, 1e-6)
    } else if let Some(x) = t.strip_suffix("ms") {
        (x, 1e-3)
    } else if let Some(x) = t.strip_suffix('s') {
        (x, 1.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a time (e.g. 5ms, 200us, 0.5s)"))?;
    if !(0.0..=3600.0).contains(&v) {
        return Err(format!("{s} is out of range"));
    }
    Ok(v * mul)
}

fn split_rank(s: &str) -> Result<(usize, &str), String> {
    let (r, v) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected RANK:VALUE"))?;
    let r: usize = r.parse().map_err(|_| format!("{r:?} is not a rank"))?;
    Ok((r, v))
}

fn parse_delay(s: &str) -> Result<RankDelay, String> {
    let (rank, v) = split_rank(s)?;
    Ok(RankDelay { rank, secs: parse_secs(v)? })
}

fn parse_rate(s: &str) -> Result<RankRate, String> {
    let (rank, v) = split_rank(s)?;
    let gbps: f64 = v.parse().map_err(|_| format!("{v:?} is not a rate in Gb/s"))?;
    if !(0.001..=1000.0).contains(&gbps) {
        return Err(format!("{gbps} Gb/s: between 0.001 and 1000"));
    }
    Ok(RankRate { rank, gbps })
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.1..=86_400.0).contains(&v) {
        return Err("the timeout is 0.1 to 86400 s".into());
    }
    Ok(v)
}

/// The flags every operation takes.
#[derive(Debug, Args, Clone)]
pub struct CollArgs {
    /// Smallest size in bytes (K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "32M", value_parser = parse_bytes)]
    pub min_bytes: u64,
    /// Largest size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = parse_bytes)]
    pub max_bytes: u64,
    /// Additive step between sizes (when no -f).
    #[arg(short = 'i', long = "stepbytes", default_value = "1M", value_parser = parse_bytes)]
    pub step_bytes: u64,
    /// Multiplicative step between sizes.
    #[arg(short = 'f', long = "stepfactor")]
    pub step_factor: Option<u64>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 1)]
    pub warmup: usize,
    /// Check the results (0: no, #wrong is N/A).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u32,
    /// Data type: float, double, half, bfloat16, int32, int64, uint8, or all.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub dtype: String,
    /// Reduction: sum, prod, min, max, avg, or all.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub redop: String,
    /// Root of broadcast and reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// nccl-tests' blocking modes. Every call here returns when it is
    /// complete on this rank (a CPU collective has no stream to wait on),
    /// so "wait" is always done. 0: calls back to back, time = elapsed /
    /// calls; 1: a barrier after each call (-m inner iteration), timed (the
    /// time includes the barriers); 2: no barrier (as 0); 3: a barrier
    /// after each outer iteration (-n, after its -m calls), not timed.
    #[arg(short = 'z', long = "blocking", default_value_t = 0)]
    pub blocking: u32,
    /// Calls per timed iteration (nccl-tests' aggregated iterations: its
    /// `-m` groups them in one NCCL group; here they run back to back).
    /// The time reported is per call: elapsed / (iters x agg iters).
    #[arg(short = 'm', long = "agg_iters", default_value_t = 1)]
    pub agg_iters: usize,
    /// Time reported: 0 rank 0's, 1 the average over ranks, 2 the minimum, 3 the maximum.
    #[arg(short = 'a', long = "average", default_value_t = 1)]
    pub average: u32,
    /// 1: per-iteration statistics (max over ranks): i_min i_max i_p99 i_cv%.
    #[arg(short = 'I', long = "per_iter_timing", default_value_t = 0)]
    pub per_iter: u32,
    /// Per-iteration statistics skip the first N iterations.
    #[arg(short = 'K', long = "per_iter_skip", default_value_t = 0)]
    pub per_iter_skip: usize,
    /// Also write the results to this JSON file.
    #[arg(short = 'J', long = "json")]
    pub json: Option<std::path::PathBuf>,

    /// Algorithm (auto: the cost model's pick): ring, rabenseifner,
    /// recursive-doubling, tree, pairwise.
    #[arg(long, default_value = "auto")]
    pub algo: String,
    /// Print the cost model's table for the sweep and the pick, then run.
    #[arg(long)]
    pub explain: bool,
    /// QPs per peer, each on its own UDP source port (and its own device
    /// and driver thread). 1 by default: on one host more QPs only add
    /// threads competing for the cores (np = 2, 64 KiB: 165 us with 1,
    /// 268 us with 2); across a fabric with ECMP, more spread the load.
    /// The double tree (`--algo tree`) sends some peers two transfers (one
    /// per tree); with 2 or more they go side by side on QPs of their own
    /// (in the fabric simulator, 8 ranks at 64 MiB: 10.5% over the tree's
    /// bound with 1, 0.7% with 2).
    #[arg(long, default_value_t = 1)]
    pub qps_per_peer: usize,
    /// Receive slots per peer and QP.
    #[arg(long, default_value_t = 4)]
    pub slots: usize,
    /// Bytes per slot (the largest message; a multiple of 64). 1 MiB by
    /// default: fewer, larger WRITEs cost fewer completions, credits and
    /// wake-ups (np = 2, 16 MiB all-reduce: 19 ms with 4 x 1 MiB slots
    /// against 44 ms with 4 x 256 KiB); the region is ranks x slots x
    /// slot size per rank, twice (receive and staging).
    #[arg(long = "slot-size", default_value = "1M", value_parser = parse_bytes)]
    pub slot_bytes: u64,
    /// A call fails when nothing arrives for it this long (s); a rank
    /// silent for half of it is declared lost.
    #[arg(long, default_value = "30", value_parser = parse_timeout)]
    pub timeout: f64,
    /// RANK:TIME: that rank waits TIME (5ms, 200us, 0.5s) before each
    /// iteration (a compute straggler).
    #[arg(long, value_parser = parse_delay)]
    pub delay: Vec<RankDelay>,
    /// RANK:GBPS: that rank's QPs are paced at GBPS Gb/s.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Vec<RankRate>,
    /// How long a waiting rank spins on its CQs before it sleeps (us).
    /// By default 5,000 when the ranks on this host (the job's ranks at
    /// this rank's address, or on loopback) have a core each, else 0: a
    /// wake-up costs 50-200 us on a small VM, most of a small all-reduce
    /// (np = 2, 4 KiB: ~450 us asleep, ~90 us spinning), but ranks that
    /// spin on shared cores hold them from the peers they wait for
    /// (np = 4 on 2 cores, 64 KiB: 840 us asleep, 4,000 us spinning).
    #[arg(long = "spin-us")]
    pub spin_us: Option<u64>,
    /// Cost model: per-step latency (us).
    #[arg(long = "model-alpha-us")]
    pub model_alpha_us: Option<f64>,
    /// Cost model: CPU time of one rank's wake-up when ranks outnumber
    /// cores (us).
    #[arg(long = "model-wake-us")]
    pub model_wake_us: Option<f64>,
    /// Cost model: per-rank bandwidth (GB/s).
    #[arg(long = "model-bw-gbs")]
    pub model_bw_gbs: Option<f64>,

    /// Start N ranks as local processes.
    #[arg(long)]
    pub np: Option<usize>,
    /// This process's rank (with --world and --rendezvous).
    #[arg(long)]
    pub rank: Option<usize>,
    /// Number of ranks.
    #[arg(long)]
    pub world: Option<usize>,
    /// HOST:PORT of rank 0's store.
    #[arg(long)]
    pub rendezvous: Option<String>,
}

/// Largest size: buffers are allocated per rank (send, receive, in-place).
const MAX_BYTES: u64 = 8 << 30;

impl CollArgs {
    /// Checks what clap cannot.
    pub fn validate(&self, op: OpKind) -> Result<(), Error> {
        if self.min_bytes > self.max_bytes {
            return Err(Error(format!("-b {} is larger than -e {}", self.min_bytes, self.max_bytes)));
        }
        if self.max_bytes > MAX_BYTES {
            return Err(Error(format!("-e {}: at most {MAX_BYTES} bytes", self.max_bytes)));
        }
        if self.step_factor.is_some_and(|f| f < 2) {
            return Err(Error("-f must be at least 2".into()));
        }
        if self.step_factor.is_none() && self.step_bytes == 0 && self.min_bytes != self.max_bytes {
            return Err(Error("-i 0 with -b below -e would never end".into()));
        }
        if self.iters == 0 {
            return Err(Error("-n must be at least 1".into()));
        }
        if self.average > 3 || self.blocking > 3 || self.per_iter > 1 {
            return Err(Error("-a is 0..3, -z 0..3, -I 0 or 1".into()));
        }
        if self.agg_iters == 0 || self.agg_iters > 1 << 20 {
            return Err(Error("-m is 1 to 1048576".into()));
        }
        if self.np == Some(0) || self.np.is_some_and(|n| n > 256) {
            return Err(Error("--np is 1 to 256".into()));
        }
        if self.qps_per_peer == 0 || self.qps_per_peer > 64 {
            return Err(Error("--qps-per-peer is 1 to 64".into()));
        }
        if self.slots == 0 || self.slots > 256 {
            return Err(Error("--slots is 1 to 256".into()));
        }
        if self.slot_bytes < 128 || self.slot_bytes % 64 != 0 || self.slot_bytes > (1 << 30) {
            return Err(Error("--slot-size is a multiple of 64 between 128 B and 1 GiB".into()));
        }
        self.dtypes()?;
        self.redops(op)?;
        let algo = self.algo()?;
        if !algo.applies_to(op) {
            return Err(Error(format!(
                "--algo {algo} does not run {op} (it runs: {:?})",
                Algo::candidates(op)
            )));
        }
        Ok(())
    }

    pub fn algo(&self) -> Result<Algo, Error> {
        self.algo.parse().map_err(|e: roce_coll::ParseError| Error(e.to_string()))
    }

    pub fn dtypes(&self) -> Result<Vec<DataType>, Error> {
        if self.dtype == "all" {
            return Ok(DataType::ALL.to_vec());
        }
        Ok(vec![self.dtype.parse().map_err(|e: roce_coll::ParseError| Error(e.to_string()))?])
    }

    /// The reductions to run (one "none" entry for the operations that do not reduce).
    pub fn redops(&self, op: OpKind) -> Result<Vec<RedOp>, Error> {
        if !op.reduces() {
            return Ok(vec![RedOp::Sum]);
        }
        if self.redop == "all" {
            return Ok(RedOp::ALL.to_vec());
        }
        Ok(vec![self.redop.parse().map_err(|e: roce_coll::ParseError| Error(e.to_string()))?])
    }

    /// The sizes of the sweep, in bytes.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut s = self.min_bytes;
        loop {
            v.push(s);
            let next = match self.step_factor {
                Some(f) => s.max(1).saturating_mul(f),
                None => s.saturating_add(self.step_bytes),
            };
            if next > self.max_bytes || next == s {
                break;
            }
            s = next;
        }
        v
    }

    pub fn cost_params(&self) -> Params {
        let mut p = Params {
            chunk_bytes: (self.slot_bytes as usize - roce_coll::HEADER_BYTES) as f64,
            ..Params::default()
        };
        // `--np`: every rank on this host's cores (the model's sharing
        // terms). Every rank computes the same: one host.
        if let Some(np) = self.np {
            p.ranks_per_host = np;
            p.host_cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        }
        if let Some(w) = self.model_wake_us {
            p.wake_ns = w * 1000.0;
        }
        if let Some(a) = self.model_alpha_us {
            p.alpha_ns = a * 1000.0;
        }
        if let Some(b) = self.model_bw_gbs {
            p.link_bytes_per_s = b * 1e9;
        }
        p
    }

    /// What every rank must agree on, as text (compared at start).
    pub fn signature(&self, op: OpKind) -> String {
        format!(
            "{op} -b {} -e {} -i {} -f {:?} -n {} -m {} -w {} -c {} -d {} -o {} -r {} -z {} -I {} --algo {} \
             --qps-per-peer {} --slots {} --slot-size {}",
            self.min_bytes,
            self.max_bytes,
            self.step_bytes,
            self.step_factor,
            self.iters,
            self.agg_iters,
            self.warmup,
            self.check,
            self.dtype,
            self.redop,
            self.root,
            self.blocking,
            self.per_iter,
            self.algo,
            self.qps_per_peer,
            self.slots,
            self.slot_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_times_parse() {
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("8"), Ok(8));
        assert!(parse_bytes("x").is_err());
        assert_eq!(parse_delay("2:5ms"), Ok(RankDelay { rank: 2, secs: 0.005 }));
        assert_eq!(parse_delay("0:200us").map(|d| (d.secs * 1e6).round()), Ok(200.0));
        assert!(parse_delay("5ms").is_err());
        assert_eq!(parse_rate("1:2.5"), Ok(RankRate { rank: 1, gbps: 2.5 }));
        assert!(parse_rate("1:0").is_err());
    }
}
