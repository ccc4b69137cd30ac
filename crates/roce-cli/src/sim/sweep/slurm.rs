//! A sweep as a Slurm job array: one batch script, submitted with
//! `sbatch --array`, each task running one point (`--point
//! $SLURM_ARRAY_TASK_ID` plus the chunk's offset), and a wait on `squeue`
//! until the array has left the queue.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::super::{io_err, SimCliError};

/// Tasks per array: Slurm's default `MaxArraySize` is 1001 (indices
/// 0..=1000), so larger sweeps go as several arrays, each told its first
/// point through `ROCE_SWEEP_OFFSET`.
pub const ARRAY_CHUNK: usize = 1000;
/// How often the wait asks `squeue`.
const POLL: Duration = Duration::from_secs(2);

/// `text` quoted for sh.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The batch script of a sweep: every task runs this executable on the
/// grid, for its point.
fn script(exe: &Path, grid: &Path, out: &Path) -> String {
    let q = |p: &Path| sh_quote(&p.to_string_lossy());
    format!(
        "#!/bin/sh\n\
         # roce sim sweep: one point per array task (written by --slurm).\n\
         #SBATCH --job-name=roce-sweep\n\
         #SBATCH --ntasks=1\n\
         #SBATCH --cpus-per-task=1\n\
         exec {} sim sweep {} --out {} --point \"$(( ${{ROCE_SWEEP_OFFSET:-0}} + SLURM_ARRAY_TASK_ID ))\"\n",
        q(exe),
        q(grid),
        q(out)
    )
}

fn run(cmd: &mut Command, what: &str) -> Result<std::process::Output, SimCliError> {
    cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            SimCliError::Usage(format!(
                "{what} not found: --slurm needs Slurm's commands (sbatch, squeue) on PATH"
            ))
        } else {
            SimCliError::Io { path: what.into(), source: e }
        }
    })
}

/// Writes the batch script into `out` and submits `points` points; returns
/// the job ids. `grid` and `out` are absolute.
pub fn submit(
    grid: &Path,
    out: &Path,
    points: usize,
    sbatch_args: &[String],
) -> Result<Vec<String>, SimCliError> {
    let exe = std::env::current_exe().map_err(io_err(Path::new("the roce executable")))?;
    let logs = out.join("slurm");
    std::fs::create_dir_all(&logs).map_err(io_err(&logs))?;
    let path = out.join("sweep.sbatch");
    std::fs::write(&path, script(&exe, grid, out)).map_err(io_err(&path))?;
    let mut ids = Vec::new();
    for first in (0..points).step_by(ARRAY_CHUNK) {
        let len = ARRAY_CHUNK.min(points - first);
        let mut cmd = Command::new("sbatch");
        cmd.arg("--parsable")
            .arg(format!("--array=0-{}", len - 1))
            .arg(format!("--export=ALL,ROCE_SWEEP_OFFSET={first}"))
            .arg("--output")
            .arg(logs.join("%A_%a.out"))
            .args(sbatch_args)
            .arg(&path);
        let o = run(&mut cmd, "sbatch")?;
        let stdout = String::from_utf8_lossy(&o.stdout);
        // --parsable: `jobid` or `jobid;cluster`.
        let id = stdout.trim().split(';').next().unwrap_or("").to_string();
        if !o.status.success() || id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SimCliError::Usage(format!(
                "sbatch {}: {} {}",
                o.status,
                stdout.trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        ids.push(id);
    }
    Ok(ids)
}

/// Waits until the jobs have left Slurm's queue, printing how many rows
/// there are whenever that changes.
pub fn wait(ids: &[String], rows: impl Fn() -> usize) -> Result<(), SimCliError> {
    let mut seen = usize::MAX;
    loop {
        let o = run(Command::new("squeue").args(["-h", "-o", "%i", "-j"]).arg(ids.join(",")), "squeue")?;
        let stderr = String::from_utf8_lossy(&o.stderr);
        // Jobs long finished are forgotten: squeue then calls them invalid.
        let gone = !o.status.success() && stderr.contains("Invalid job id");
        if !o.status.success() && !gone {
            return Err(SimCliError::Usage(format!("squeue {}: {}", o.status, stderr.trim())));
        }
        let n = rows();
        if n != seen {
            println!("  {n} rows written");
            seen = n;
        }
        if gone || String::from_utf8_lossy(&o.stdout).trim().is_empty() {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_one_point_per_task_with_paths_quoted() {
        let s = script(Path::new("/opt/roce"), Path::new("/g/it's.toml"), Path::new("/o"));
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        assert!(s.contains(r#"exec '/opt/roce' sim sweep '/g/it'\''s.toml' --out '/o' --point "$(( ${ROCE_SWEEP_OFFSET:-0} + SLURM_ARRAY_TASK_ID ))""#), "{s}");
    }
}
