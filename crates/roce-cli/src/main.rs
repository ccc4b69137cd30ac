//! `roce`: the command-line front end of the stack.
//!
//! ```text
//! roce pcap decode FILE [--json] [--pmtu N] [--port P]
//! roce perf {write,read,send,atomic}-{bw,lat} [SERVER | --loopback] [perftest options]
//! roce ping [SERVER | --loopback] [-s SIZE] [-n ITERS] [-m MTU]
//! roce sim {hpcc,compare,baseline,run} ... (the fabric simulator)
//! roce fabric plan TOPOLOGY [--check] ... (PFC/ECN/DCQCN settings for a fabric)
//! roce exec [--addr ADDR] [--name roce0] -- PROGRAM ARGS...
//! roce coll {all-reduce,reduce-scatter,all-gather,broadcast,reduce,all-to-all} [nccl-tests options]
//! ```
//!
//! Each subcommand lives in its own module; this file only declares the
//! command tree and maps outcomes to exit statuses. Later subcommands
//! (`perf`, `ping`, `sim`) are further variants of [`Command`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod coll;
mod exec;
mod fabric;
mod nvmf;
mod oob;
mod pcap;
mod perf;
mod ping;
mod report;
mod sim;
mod soak;

/// A user-space RoCEv2 / RDMA stack.
#[derive(Debug, Parser)]
#[command(name = "roce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Work with packet captures.
    Pcap {
        #[command(subcommand)]
        command: PcapCommand,
    },
    /// Run the deterministic simulation over many seeds (see `soak`).
    Soak(soak::SoakArgs),
    /// perftest's benchmarks over the UDP driver (ib_write_bw, ib_read_lat, ...).
    Perf {
        #[command(subcommand)]
        test: perf::PerfCommand,
    },
    /// ibv_rc_pingpong over the UDP driver.
    Ping(ping::PingArgs),
    /// The fabric simulator: HPCC runs, comparisons with the HPCC baseline,
    /// TOML and built-in scenarios.
    Sim {
        #[command(subcommand)]
        command: sim::SimCommand,
    },
    /// Settings for a RoCE fabric: `plan` computes PFC headroom, XOFF/XON,
    /// buffer alpha, ECN and DCQCN for a topology and checks them by
    /// simulation.
    Fabric {
        #[command(subcommand)]
        command: fabric::FabricCommand,
    },
    /// Collectives over roce, nccl-tests' `*_perf` programs: all-reduce,
    /// reduce-scatter, all-gather, broadcast, reduce, all-to-all. `--np N`
    /// starts N local ranks; under mpirun, srun or torchrun each process
    /// is one rank.
    Coll {
        #[command(subcommand)]
        op: coll::CollCommand,
    },
    /// NVMe over Fabrics (RDMA): `target` serves files or memory to the
    /// Linux kernel's `nvme connect -t rdma` and to roce's initiator.
    Nvmf {
        #[command(subcommand)]
        command: nvmf::NvmfCommand,
    },
    /// Run an unmodified verbs program (perftest, ibv_*_pingpong, ...) over
    /// roce: its libibverbs.so.1 becomes roce's, with one device.
    Exec(exec::ExecArgs),
}

#[derive(Debug, Subcommand)]
enum PcapCommand {
    /// Decode every frame of a capture: RoCEv2 headers, ICRC verdict, faults.
    ///
    /// Exit status: 0 when every RoCE packet is well-formed with a good ICRC,
    /// 1 when some RoCE packet is malformed or fails its ICRC, 2 when the file
    /// cannot be read (or ends in the middle of a record).
    Decode(pcap::DecodeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap { command: PcapCommand::Decode(args) } => pcap::run(&args).exit_code(),
        Command::Soak(args) => soak::run(&args),
        Command::Perf { test } => perf::main(&test),
        Command::Ping(args) => ping::main(&args),
        Command::Sim { command } => sim::main(&command),
        Command::Fabric { command } => fabric::main(&command),
        Command::Exec(args) => exec::main(&args),
        Command::Coll { op } => coll::main(&op),
        Command::Nvmf { command } => nvmf::main(&command),
    }
}

/// mimalloc, not the system allocator: the fabric simulator keeps some
/// ten thousand long-lived engine records, QP maps and queue buffers that
/// every packet touches, and mimalloc's size-segregated pages keep them
/// denser than glibc's heap (about 10% of `roce sim`'s CPU time on the
/// fat-tree run; `scripts/sim-speed.sh`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
