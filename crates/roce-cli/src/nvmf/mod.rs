//! `roce nvmf`: NVMe over Fabrics (RDMA) over roce.
//!
//! ```text
//! roce nvmf target --nqn nqn.2026-11.io.roce:disk --namespace disk.img --addr 10.0.0.1
//! nvme connect -t rdma -n nqn.2026-11.io.roce:disk -a 10.0.0.1 -s 4420   # the Linux host
//! ```

use std::process::ExitCode;

use clap::Subcommand;

mod initiator;
mod target;

#[derive(Debug, Subcommand)]
pub enum NvmfCommand {
    /// Serve namespaces (files, block devices or memory) as an NVMe-oF
    /// subsystem over RDMA: the Linux kernel's `nvme connect -t rdma`
    /// mounts it. Runs until interrupted (SIGINT/SIGTERM) or --duration.
    Target(target::TargetArgs),
    /// List the subsystems of a discovery controller (as `nvme discover`).
    Discover(initiator::DiscoverArgs),
    /// Connect to a subsystem, print its controller and namespaces, and
    /// optionally write, read back and compare a pattern.
    Connect(initiator::ConnectArgs),
    /// Benchmark a namespace: random or sequential reads or writes at a
    /// queue depth, IOPS, bandwidth and latency percentiles as fio prints.
    Perf(initiator::PerfArgs),
}

pub fn main(cmd: &NvmfCommand) -> ExitCode {
    match cmd {
        NvmfCommand::Target(a) => target::main(a),
        NvmfCommand::Discover(a) => initiator::discover_main(a),
        NvmfCommand::Connect(a) => initiator::connect_main(a),
        NvmfCommand::Perf(a) => initiator::perf_main(a),
    }
}
