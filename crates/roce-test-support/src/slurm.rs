//! A real single-node Slurm cluster for a test: munged, slurmctld and
//! slurmd (Debian's `munge` and `slurm-wlm`) started in a directory of the
//! test's own, with their own key, ports, state and logs, and shut down
//! when the [`Cluster`] is dropped. Commands the test runs reach it
//! through `SLURM_CONF` ([`Cluster::env`]).
//!
//! Where it cannot start (not installed, not root: slurmd runs jobs as
//! their users) [`Cluster::start`] says why; the caller skips, except
//! under CI (`.ci/run` installs both), where that is a failure.

use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long the daemons get to come up or go down.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

/// The commands the cluster and its users need.
const COMMANDS: &[&str] = &["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo"];

/// A running single-node cluster; dropped, it shuts down.
pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        || Path::new("/usr/sbin").join(cmd).is_file()
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !ok() {
        if start.elapsed() > START_TIMEOUT {
            return Err(format!("{what} did not happen within {START_TIMEOUT:?}"));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd:?}: {}: {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

impl Cluster {
    /// Starts a cluster in `dir` (created; must not be shared with another
    /// cluster), or says why it cannot.
    pub fn start(dir: &Path) -> Result<Cluster, String> {
        let missing: Vec<&str> = COMMANDS.iter().copied().filter(|c| !on_path(c)).collect();
        if !missing.is_empty() {
            return Err(format!(
                "Slurm is not installed (no {}; Debian: slurm-wlm munge)",
                missing.join(", ")
            ));
        }
        let uid = run(Command::new("id").arg("-u"))?;
        if uid.trim() != "0" {
            return Err("a single-node Slurm needs root (slurmd starts jobs as their users)".into());
        }
        let _ = std::fs::remove_dir_all(dir);
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let cluster = Cluster { dir: dir.to_path_buf(), conf: dir.join("slurm.conf") };
        cluster.start_munge()?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_err(|e| format!("hostname: {e}"))?
            .trim()
            .to_string();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (ctld_port, d_port) =
            (free_port().map_err(|e| e.to_string())?, free_port().map_err(|e| e.to_string())?);
        let d = dir.display();
        let conf = format!(
            "ClusterName=rocetest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={d_port}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={d}/munge.sock\n\
             CredType=cred/munge\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SchedulerType=sched/backfill\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             ReturnToService=2\n\
             MpiDefault=none\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP\n"
        );
        std::fs::write(&cluster.conf, conf).map_err(|e| format!("{}: {e}", cluster.conf.display()))?;
        // From here on, a failure drops `cluster`, which stops what did start.
        run(cluster.cmd("slurmctld").arg("-i"))?;
        run(&mut cluster.cmd("slurmd"))?;
        let idle = || {
            cluster.cmd("sinfo").args(["-h", "-o", "%t"]).output().is_ok_and(|o| {
                let s = String::from_utf8_lossy(&o.stdout);
                o.status.success() && s.trim() == "idle"
            })
        };
        wait_for("the node going idle", idle).map_err(|e| format!("{e}\n{}", cluster.logs()))?;
        Ok(cluster)
    }

    fn start_munge(&self) -> Result<(), String> {
        let key = self.dir.join("munge.key");
        let mut bytes = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .and_then(|()| std::fs::write(&key, &bytes))
            .map_err(|e| format!("munge key: {e}"))?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400))
            .map_err(|e| format!("munge key: {e}"))?;
        let socket = self.dir.join("munge.sock");
        run(Command::new("munged")
            .arg("--force")
            .arg("--key-file")
            .arg(&key)
            .arg("--socket")
            .arg(&socket)
            .arg("--pid-file")
            .arg(self.dir.join("munged.pid"))
            .arg("--log-file")
            .arg(self.dir.join("log/munged.log"))
            .arg("--seed-file")
            .arg(self.dir.join("munge.seed")))?;
        wait_for("munged's socket", || socket.exists())
    }

    /// A command of the cluster: `SLURM_CONF` set.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// The environment a command needs to reach the cluster.
    pub fn env(&self) -> (&'static str, &Path) {
        ("SLURM_CONF", &self.conf)
    }

    /// The daemons' logs' tails, for a failure's message.
    pub fn logs(&self) -> String {
        ["slurmctld.log", "slurmd.log", "munged.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.join("log").join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!("== {f}\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn pid(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.cmd("scontrol").arg("shutdown").output();
        // A daemon that exited may stay a zombie of whoever adopted it.
        let alive = |pid: &str| {
            std::fs::read_to_string(Path::new("/proc").join(pid).join("stat")).is_ok_and(|s| {
                s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        };
        for file in ["slurmctld.pid", "slurmd.pid", "munged.pid"] {
            let Some(pid) = self.pid(file) else { continue };
            if file == "munged.pid" {
                let _ = Command::new("kill").arg(&pid).output();
            }
            if wait_for(file, || !alive(&pid)).is_err() {
                let _ = Command::new("kill").args(["-9", &pid]).output();
            }
        }
    }
}
