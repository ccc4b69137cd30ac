//! `roce nvmf`: NVMe over Fabrics (RDMA) over roce.
//!
//! ```text
//! roce nvmf target --nqn nqn.2026-11.io.roce:disk --namespace disk.img --addr 10.0.0.1
//! nvme connect -t rdma -n nqn.2026-11.io.roce:disk -a 10.0.0.1 -s 4420   # the Linux host
//! ```

use std::process::ExitCode;

use clap::Subcommand;

mod target;

#[derive(Debug, Subcommand)]
pub enum NvmfCommand {
    /// Serve namespaces (files, block devices or memory) as an NVMe-oF
    /// subsystem over RDMA: the Linux kernel's `nvme connect -t rdma`
    /// mounts it. Runs until interrupted (SIGINT/SIGTERM) or --duration.
    Target(target::TargetArgs),
}

pub fn main(cmd: &NvmfCommand) -> ExitCode {
    match cmd {
        NvmfCommand::Target(a) => target::main(a),
    }
}
