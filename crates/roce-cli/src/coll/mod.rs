//! `roce coll`: nccl-tests' `*_perf` programs over roce, one rank per
//! process.
//!
//! ```text
//! roce coll all-reduce --np 4 -b 8 -e 64M -f 4           # 4 local ranks
//! mpirun -np 4 roce coll all-reduce                       # Open MPI
//! srun -n 8 roce coll all-gather -b 1M -e 1G -f 2         # Slurm
//! torchrun --nproc-per-node 4 --no-python roce coll reduce-scatter
//! roce coll all-reduce --rank R --world N --rendezvous HOST:PORT
//! ```
//!
//! * [`args`]: the flags (nccl-tests' plus the transport's);
//! * [`bench`]: one rank's sweep, its timing and its check;
//! * [`data`]: the integer-valued test data and the expected results;
//! * [`format`]: nccl-tests' header, rows and footer.

use std::process::ExitCode;
use std::time::Duration;

use roce_coll::launch::{self, Placement};
use roce_coll::{CommConfig, CommError, Communicator, Layout, OpKind, RendezvousConfig};

pub(crate) mod args;
mod bench;
pub(crate) mod data;
mod explain;
pub(crate) mod format;

pub use args::{CollArgs, CollCommand};

/// An error meant for the user.
#[derive(Debug)]
pub struct Error(pub String);

impl From<CommError> for Error {
    fn from(e: CommError) -> Error {
        Error(e.to_string())
    }
}

/// The operation a subcommand runs.
pub fn op_of(cmd: &CollCommand) -> (OpKind, &CollArgs) {
    match cmd {
        CollCommand::AllReduce(a) => (OpKind::AllReduce, a),
        CollCommand::ReduceScatter(a) => (OpKind::ReduceScatter, a),
        CollCommand::AllGather(a) => (OpKind::AllGather, a),
        CollCommand::Broadcast(a) => (OpKind::Broadcast, a),
        CollCommand::Reduce(a) => (OpKind::Reduce, a),
        CollCommand::AllToAll(a) => (OpKind::AllToAll, a),
    }
}

/// Who this process is: explicit flags, else the launcher's variables,
/// else a world of one.
fn placement(a: &CollArgs) -> Result<Placement, Error> {
    let env = launch::detect_env().map_err(|e| Error(e.to_string()))?;
    if a.rank.is_some() || a.world.is_some() || a.rendezvous.is_some() {
        let from_env = env.clone();
        let rank = a.rank.or(from_env.as_ref().map(|p| p.rank));
        let world = a.world.or(from_env.as_ref().map(|p| p.world));
        let rdv = a.rendezvous.clone().or(from_env.as_ref().map(|p| p.rendezvous.clone()));
        return match (rank, world, rdv) {
            (Some(rank), Some(world), Some(rendezvous)) if rank < world => {
                Ok(Placement { rank, world, rendezvous, source: "--rank/--world/--rendezvous" })
            }
            (Some(rank), Some(world), Some(_)) => {
                Err(Error(format!("--rank {rank} is not below --world {world}")))
            }
            _ => Err(Error(
                "--rank, --world and --rendezvous go together (unless a launcher provides the others)".into(),
            )),
        };
    }
    if let Some(p) = env {
        return Ok(p);
    }
    let port = launch::free_local_port().map_err(|e| Error(e.to_string()))?;
    Ok(Placement { rank: 0, world: 1, rendezvous: format!("127.0.0.1:{port}"), source: "single process" })
}

/// Starts `--np` ranks as child processes of this one, each running the
/// same command line, and waits for them.
fn launch_local(np: usize, a: &CollArgs) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("roce coll: cannot find this program to start its ranks: {e}");
            return ExitCode::from(2);
        }
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let job = match launch::spawn_local(np, &exe, &args, &|_| Vec::new()) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("roce coll: {e}");
            return ExitCode::from(2);
        }
    };
    // A failing rank makes the others fail within the timeout; past that
    // (and a margin for their own exit) they are killed.
    let grace = Duration::from_secs_f64(a.timeout) * 2 + Duration::from_secs(5);
    let status = job.wait(grace);
    let mut code = 0u8;
    for (r, s) in status.iter().enumerate() {
        match s {
            Some(s) if s.success() => {}
            Some(s) => {
                if code == 0 {
                    code = s.code().map_or(1, |c| c.clamp(1, 255) as u8);
                }
            }
            None => {
                eprintln!(
                    "roce coll: rank {r} did not end within {:.0} s of a failure: killed",
                    grace.as_secs_f64()
                );
                code = code.max(1);
            }
        }
    }
    ExitCode::from(code)
}

/// `roce coll OP ...`.
pub fn main(cmd: &CollCommand) -> ExitCode {
    let (op, a) = op_of(cmd);
    if let Err(e) = a.validate(op) {
        eprintln!("roce coll: {}", e.0);
        return ExitCode::from(2);
    }
    // `--np N`: this process is the launcher, unless it is one of the
    // ranks it started (they see ROCE_COLL_RANK).
    if let Some(np) = a.np {
        if std::env::var_os("ROCE_COLL_RANK").is_none() {
            return launch_local(np, a);
        }
    }
    let p = match placement(a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("roce coll: {}", e.0);
            return ExitCode::from(2);
        }
    };
    match run_rank(op, a, &p) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("roce coll: rank {}: {}", p.rank, e.0);
            ExitCode::from(1)
        }
    }
}

fn run_rank(op: OpKind, a: &CollArgs, p: &Placement) -> Result<u64, Error> {
    let layout = Layout { channels: a.qps_per_peer, slots: a.slots, slot_bytes: a.slot_bytes as usize };
    let rate_bps = a.rate.iter().find(|r| r.rank == p.rank).map(|r| (r.gbps * 1e9) as u64);
    let timeout = Duration::from_secs_f64(a.timeout);
    let cfg = CommConfig {
        layout,
        timeout,
        rate_bps,
        spin: a.spin_us.map(Duration::from_micros),
        cost: a.cost_params(),
    };
    let rdv = RendezvousConfig { addr: p.rendezvous.clone(), rank: p.rank, world: p.world, timeout };
    let mut comm = Communicator::new(rdv, cfg)?;
    let wrong = bench::run(&mut comm, op, a, p)?;
    if std::env::var_os("ROCE_COLL_COUNTERS").is_some() {
        // The engine's non-zero counters and what waiting cost, per rank.
        let w = comm.wait_stats();
        let mut line = format!(
            "# rank {} spins {} sleeps {} slept {:.1} ms",
            p.rank,
            w.spins,
            w.sleeps,
            w.slept_ns as f64 / 1e6
        );
        for (k, v) in comm.transport().counters() {
            if v > 0 {
                line += &format!(" {k}={v}");
            }
        }
        eprintln!("{line}");
    }
    comm.finish()?;
    Ok(wrong)
}
