//! `roce`: the command-line front end of the stack.
//!
//! ```text
//! roce pcap decode FILE [--json] [--pmtu N] [--port P]
//! ```
//!
//! Each subcommand lives in its own module; this file only declares the
//! command tree and maps outcomes to exit statuses. Later subcommands
//! (`perf`, `ping`, `sim`) are further variants of [`Command`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod pcap_cmd;

/// A user-space RoCEv2 / RDMA stack.
#[derive(Debug, Parser)]
#[command(name = "roce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with packet captures.
    Pcap {
        #[command(subcommand)]
        command: PcapCommand,
    },
}

#[derive(Debug, Subcommand)]
enum PcapCommand {
    /// Decode every frame of a capture: RoCEv2 headers, ICRC verdict, faults.
    ///
    /// Exit status: 0 when every RoCE packet is well-formed with a good ICRC,
    /// 1 when some RoCE packet is malformed or fails its ICRC, 2 when the file
    /// cannot be read (or ends in the middle of a record).
    Decode(pcap_cmd::DecodeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap { command: PcapCommand::Decode(args) } => pcap_cmd::run(&args).exit_code(),
    }
}
