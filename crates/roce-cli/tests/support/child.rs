//! Running commands and `roce` processes from tests in network namespaces.

use std::ffi::OsStr;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Runs `args`: its stdout, or why it failed.
pub fn sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Waits for `child`, killing it after `limit`.
pub fn finish(mut child: Child, what: &str, limit: Duration) -> Output {
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{what} still ran after {limit:?}:\n{}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// What a run printed, which must have succeeded.
pub fn stdout_of(o: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{what}: {:?}\n{out}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    out
}

/// The JSON a successful run printed.
pub fn json_of(o: &Output, what: &str) -> Value {
    let out = stdout_of(o, what);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: not JSON ({e}):\n{out}"))
}

/// Starts `roce ARGS` in network namespace `ns`, its output piped.
pub fn roce_in<S: AsRef<OsStr>>(ns: &str, args: &[S]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec runs")
}
