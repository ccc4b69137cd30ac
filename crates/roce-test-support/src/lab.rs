//! Driving the rxe lab (Linux Soft-RoCE in a VM, see
//! `../shared/tools/rxe-lab`) from a test: commands in the VM, programs
//! in the lab's network namespace, and loss on its tap with nftables.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The host side's network namespace (the tap `rxetap0`, 10.47.0.3).
pub const NETNS: &str = "rxelab";

/// stdout and stderr of a finished command, together.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The lab tool.
pub struct Lab {
    pub tool: PathBuf,
}

impl Lab {
    /// The lab booted afresh for a test (fetched if need be, a VM left by
    /// another run stopped first), or `None` after a notice saying why it
    /// cannot run here.
    ///
    /// # Panics
    /// When the VM does not come up.
    pub fn boot() -> Option<Lab> {
        let lab = Lab { tool: crate::rxe_lab()? };
        if let Err(e) = lab.run(&["fetch"]) {
            eprintln!("SKIPPED: the lab's packages did not download:\n{e}");
            return None;
        }
        let _ = lab.run(&["down"]);
        if let Err(e) = lab.run(&["up"]) {
            panic!("the lab did not come up: {e}");
        }
        Some(lab)
    }

    /// `rxe-lab ARGS...`: its output, or an error with it.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let o = Command::new(&self.tool).args(args).output().map_err(|e| format!("rxe-lab {args:?}: {e}"))?;
        if o.status.success() {
            Ok(text(&o))
        } else {
            Err(format!("rxe-lab {args:?} failed ({}):\n{}", o.status, text(&o)))
        }
    }

    /// A command in the VM, killed there after `secs`: whether it
    /// succeeded, and its output.
    pub fn exec(&self, cmd: &str, secs: u32) -> (bool, String) {
        let o =
            Command::new(&self.tool).args(["exec", cmd]).env("RXE_LAB_TIMEOUT", secs.to_string()).output();
        match o {
            Ok(o) => (o.status.success(), text(&o)),
            Err(e) => (false, e.to_string()),
        }
    }
}

/// `program ARGS...` in the lab's namespace (not yet started).
pub fn in_netns(program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", NETNS, program]);
    c
}

/// Loads an nftables ruleset in the lab's namespace.
pub fn nft(ruleset: &str) -> Result<(), String> {
    let mut c = in_netns("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    c.stdin.take().expect("piped stdin").write_all(ruleset.as_bytes()).map_err(|e| e.to_string())?;
    let o = c.wait_with_output().map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("nft: {}", text(&o)))
    }
}

/// A netdev table `name` on the tap dropping `percent`% of RoCEv2
/// packets each way, at random.
pub fn add_loss(name: &str, percent: u32) -> Result<(), String> {
    let rule = |chain: &str, hook: &str| {
        format!(
            " chain {chain} {{ type filter hook {hook} device \"rxetap0\" priority 0; \
             udp dport 4791 numgen random mod 100 < {percent} counter drop; }}\n"
        )
    };
    nft(&format!("table netdev {name} {{\n{}{}}}\n", rule("in", "ingress"), rule("eg", "egress")))
}

/// Packets table `name` has dropped so far.
pub fn dropped(name: &str) -> u64 {
    let o = in_netns("nft").args(["list", "table", "netdev", name]).output();
    o.map(|o| text(&o))
        .unwrap_or_default()
        .split("counter packets ")
        .skip(1)
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Removes table `name` (no error if it is not there).
pub fn remove_loss(name: &str) {
    let _ = in_netns("nft").args(["delete", "table", "netdev", name]).output();
}
