//! Where a rank comes from: its rank, the world size and the rendezvous
//! address, taken from the launcher that started it, and the local
//! launcher (`--np N`) that starts N ranks as child processes.
//!
//! Recognised, first match wins:
//! 1. `ROCE_COLL_RANK`, `ROCE_COLL_WORLD`, `ROCE_COLL_RENDEZVOUS` (what
//!    [`spawn_local`] gives its children; usable by hand).
//! 2. torchrun: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`. The
//!    store listens on `MASTER_PORT + 1`: under torchrun the agent's own
//!    TCPStore already holds `MASTER_PORT`.
//! 3. Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`.
//!    On one host (`OMPI_COMM_WORLD_LOCAL_SIZE` = world size) the store is
//!    on 127.0.0.1 at a port derived from the job id
//!    (`OMPI_MCA_ess_base_jobid` or `PMIX_NAMESPACE`), so plain
//!    `mpirun -np 4 roce coll all-reduce` needs no flag. Across hosts no
//!    rank can know rank 0's address before talking to it: pass
//!    `--rendezvous HOST:PORT` (or `-x ROCE_COLL_RENDEZVOUS=HOST:PORT`).
//! 4. Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`; the store is on the
//!    first node of the step (`SLURM_STEP_NODELIST`, else
//!    `SLURM_JOB_NODELIST`), at the first reserved port
//!    (`SLURM_STEP_RESV_PORTS`) or one derived from job and step id.
//!
//! An explicit `--rank --world --rendezvous` overrides all of them (the
//! CLI applies it on top of [`detect`]).

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Errors in finding or starting ranks.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{var}={value:?} is not a valid {what}")]
    BadVar { var: &'static str, value: String, what: &'static str },
    #[error("{0}")]
    Incomplete(String),
    #[error("cannot start rank {rank} ({program}): {err}")]
    Spawn { rank: usize, program: String, err: std::io::Error },
    #[error("cannot find a free TCP port for the rendezvous: {0}")]
    Port(std::io::Error),
}

/// Who this process is in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub rank: usize,
    pub world: usize,
    /// `HOST:PORT` of rank 0's store.
    pub rendezvous: String,
    /// Which launcher it came from (for the header and error messages).
    pub source: &'static str,
}

/// Ports derived from a job id fall in `[BASE, BASE + SPAN)`: above the
/// registered range most services use, below Linux's ephemeral range.
const PORT_BASE: u16 = 20000;
const PORT_SPAN: u64 = 12000;

/// FNV-1a, so the same job id gives the same port on every rank.
fn derived_port(job: &str) -> u16 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in job.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    PORT_BASE + (h % PORT_SPAN) as u16
}

fn num(
    env: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
    what: &'static str,
) -> Result<Option<usize>, LaunchError> {
    match env(var) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| LaunchError::BadVar { var, value: v, what }),
    }
}

fn check(p: Placement) -> Result<Placement, LaunchError> {
    if p.world == 0 || p.rank >= p.world {
        return Err(LaunchError::Incomplete(format!(
            "{}: rank {} is not in a world of {}",
            p.source, p.rank, p.world
        )));
    }
    Ok(p)
}

/// The first host of a Slurm hostlist (`node[01-04,07],gpu5` -> `node01`).
pub fn first_host(list: &str) -> Option<String> {
    let mut depth = 0;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let first = list[..end].trim();
    if first.is_empty() {
        return None;
    }
    match (first.find('['), first.find(']')) {
        (Some(a), Some(b)) if a < b => {
            let inner = &first[a + 1..b];
            let pick = inner.split(',').next()?.split('-').next()?;
            Some(format!("{}{}{}", &first[..a], pick, &first[b + 1..]))
        }
        (None, None) => Some(first.to_string()),
        _ => None,
    }
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Reads the launcher's variables through `env` (`std::env::var` in
/// practice, a map in tests). `Ok(None)`: no launcher (a single process).
pub fn detect(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Placement>, LaunchError> {
    if let Some(rank) = num(env, "ROCE_COLL_RANK", "rank")? {
        let world = num(env, "ROCE_COLL_WORLD", "world size")?.ok_or_else(|| {
            LaunchError::Incomplete("ROCE_COLL_RANK is set but ROCE_COLL_WORLD is not".into())
        })?;
        let rendezvous = env("ROCE_COLL_RENDEZVOUS").ok_or_else(|| {
            LaunchError::Incomplete(
                "ROCE_COLL_RANK is set but ROCE_COLL_RENDEZVOUS (HOST:PORT) is not".into(),
            )
        })?;
        return check(Placement { rank, world, rendezvous, source: "ROCE_COLL_RANK" }).map(Some);
    }
    let own_rdv = env("ROCE_COLL_RENDEZVOUS");
    if let Some(rank) = num(env, "RANK", "rank")? {
        if let Some(world) = num(env, "WORLD_SIZE", "world size")? {
            let rendezvous = match own_rdv {
                Some(r) => r,
                None => {
                    let addr = env("MASTER_ADDR").ok_or_else(|| {
                        LaunchError::Incomplete("torchrun-style RANK/WORLD_SIZE without MASTER_ADDR".into())
                    })?;
                    let port = num(env, "MASTER_PORT", "port")?.ok_or_else(|| {
                        LaunchError::Incomplete("torchrun-style RANK/WORLD_SIZE without MASTER_PORT".into())
                    })?;
                    let port = u16::try_from(port + 1).map_err(|_| LaunchError::BadVar {
                        var: "MASTER_PORT",
                        value: port.to_string(),
                        what: "port below 65535",
                    })?;
                    host_port(&addr, port)
                }
            };
            return check(Placement {
                rank,
                world,
                rendezvous,
                source: "torchrun (RANK, WORLD_SIZE, MASTER_ADDR)",
            })
            .map(Some);
        }
    }
    if let Some(rank) = num(env, "OMPI_COMM_WORLD_RANK", "rank")? {
        let world = num(env, "OMPI_COMM_WORLD_SIZE", "world size")?.ok_or_else(|| {
            LaunchError::Incomplete("OMPI_COMM_WORLD_RANK without OMPI_COMM_WORLD_SIZE".into())
        })?;
        let rendezvous = match own_rdv {
            Some(r) => r,
            None => {
                let local = num(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "local size")?;
                if local != Some(world) {
                    return Err(LaunchError::Incomplete(
                        "mpirun across several hosts: rank 0's address cannot be known in advance; pass \
                         --rendezvous HOST:PORT (rank 0's host) or -x ROCE_COLL_RENDEZVOUS=HOST:PORT"
                            .into(),
                    ));
                }
                let job = env("OMPI_MCA_ess_base_jobid").or_else(|| env("PMIX_NAMESPACE")).ok_or_else(|| {
                    LaunchError::Incomplete(
                        "mpirun without a job id (OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE): pass --rendezvous".into(),
                    )
                })?;
                host_port("127.0.0.1", derived_port(&job))
            }
        };
        return check(Placement { rank, world, rendezvous, source: "mpirun (OMPI_COMM_WORLD_RANK)" })
            .map(Some);
    }
    if let Some(rank) = num(env, "SLURM_PROCID", "rank")? {
        let world = match num(env, "SLURM_NTASKS", "task count")? {
            Some(w) => w,
            None => num(env, "SLURM_NPROCS", "task count")?
                .ok_or_else(|| LaunchError::Incomplete("SLURM_PROCID without SLURM_NTASKS".into()))?,
        };
        let rendezvous = match own_rdv {
            Some(r) => r,
            None => {
                let list =
                    env("SLURM_STEP_NODELIST").or_else(|| env("SLURM_JOB_NODELIST")).ok_or_else(|| {
                        LaunchError::Incomplete(
                            "SLURM_PROCID without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST".into(),
                        )
                    })?;
                let host = first_host(&list).ok_or(LaunchError::BadVar {
                    var: "SLURM_STEP_NODELIST",
                    value: list.clone(),
                    what: "host list",
                })?;
                let reserved = env("SLURM_STEP_RESV_PORTS")
                    .and_then(|p| p.split(['-', ',']).next().and_then(|x| x.trim().parse::<u16>().ok()));
                let port = match reserved {
                    Some(p) => p,
                    None => {
                        let job = env("SLURM_JOB_ID").unwrap_or_default();
                        let step = env("SLURM_STEP_ID").unwrap_or_default();
                        derived_port(&format!("{job}.{step}"))
                    }
                };
                host_port(&host, port)
            }
        };
        return check(Placement { rank, world, rendezvous, source: "srun (SLURM_PROCID)" }).map(Some);
    }
    Ok(None)
}

/// [`detect`] on the process environment.
pub fn detect_env() -> Result<Option<Placement>, LaunchError> {
    detect(&|k| std::env::var(k).ok())
}

/// A free TCP port on 127.0.0.1 for a local job's store. (Another process
/// may take it before rank 0 binds it: rank 0 then fails with a clear
/// "cannot listen" error.)
pub fn free_local_port() -> Result<u16, LaunchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(LaunchError::Port)?;
    Ok(l.local_addr().map_err(LaunchError::Port)?.port())
}

/// N ranks started as child processes of this one.
pub struct LocalJob {
    children: Vec<Child>,
}

/// Starts `np` copies of `program args` on this host, rank r with
/// `ROCE_COLL_RANK=r`, `ROCE_COLL_WORLD=np` and the store on
/// 127.0.0.1 at a free port. `extra_env(rank)` adds variables per rank.
pub fn spawn_local(
    np: usize,
    program: &std::path::Path,
    args: &[std::ffi::OsString],
    extra_env: &dyn Fn(usize) -> Vec<(String, String)>,
) -> Result<LocalJob, LaunchError> {
    let port = free_local_port()?;
    let mut children = Vec::with_capacity(np);
    for rank in 0..np {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("ROCE_COLL_RANK", rank.to_string())
            .env("ROCE_COLL_WORLD", np.to_string())
            .env("ROCE_COLL_RENDEZVOUS", format!("127.0.0.1:{port}"));
        for (k, v) in extra_env(rank) {
            cmd.env(k, v);
        }
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(err) => {
                let mut job = LocalJob { children };
                job.kill_all();
                return Err(LaunchError::Spawn { rank, program: program.display().to_string(), err });
            }
        }
    }
    Ok(LocalJob { children })
}

impl LocalJob {
    /// The children's process ids, in rank order.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Waits for every rank. Once one has failed, the others get `grace`
    /// to fail by themselves (they do, within their timeout) before they
    /// are killed. Returns each rank's status in rank order (`None`:
    /// killed here).
    pub fn wait(mut self, grace: Duration) -> Vec<Option<ExitStatus>> {
        let n = self.children.len();
        let mut status: Vec<Option<ExitStatus>> = vec![None; n];
        let mut done = vec![false; n];
        let mut failed_at: Option<Instant> = None;
        while done.iter().any(|d| !d) {
            for r in 0..n {
                if done[r] {
                    continue;
                }
                match self.children[r].try_wait() {
                    Ok(Some(s)) => {
                        status[r] = Some(s);
                        done[r] = true;
                        if !s.success() && failed_at.is_none() {
                            failed_at = Some(Instant::now());
                        }
                    }
                    Ok(None) => {}
                    Err(_) => done[r] = true,
                }
            }
            if failed_at.is_some_and(|t| t.elapsed() > grace) {
                for (child, d) in self.children.iter_mut().zip(done.iter_mut()) {
                    if !*d {
                        let _ = child.kill();
                        let _ = child.wait();
                        *d = true;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.children.clear();
        status
    }

    fn kill_all(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for LocalJob {
    fn drop(&mut self) {
        self.kill_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(kv: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn nothing_set_is_a_single_process() {
        assert_eq!(detect(&env_of(&[])).unwrap(), None);
    }

    #[test]
    fn torchrun_uses_the_port_after_master_port() {
        let p = detect(&env_of(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.0.0.7"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((p.rank, p.world, p.rendezvous.as_str()), (2, 4, "10.0.0.7:29501"));
        let e = detect(&env_of(&[("RANK", "0"), ("WORLD_SIZE", "4"), ("MASTER_PORT", "1")])).unwrap_err();
        assert!(e.to_string().contains("MASTER_ADDR"), "{e}");
    }

    #[test]
    fn mpirun_on_one_host_derives_the_port_from_the_job() {
        let vars = [
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("OMPI_MCA_ess_base_jobid", "436142081"),
        ];
        let p = detect(&env_of(&vars)).unwrap().unwrap();
        assert_eq!((p.rank, p.world), (3, 4));
        assert_eq!(p.rendezvous, format!("127.0.0.1:{}", derived_port("436142081")));
        let q =
            detect(&env_of(&[("OMPI_COMM_WORLD_RANK", "0"), vars[1], vars[2], vars[3]])).unwrap().unwrap();
        assert_eq!(p.rendezvous, q.rendezvous, "every rank meets at the same place");
        let multi = [
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ];
        assert!(detect(&env_of(&multi)).unwrap_err().to_string().contains("--rendezvous"));
        let own = [multi[0], multi[1], multi[2], ("ROCE_COLL_RENDEZVOUS", "h:1")];
        assert_eq!(detect(&env_of(&own)).unwrap().unwrap().rendezvous, "h:1");
    }

    #[test]
    fn slurm_meets_on_the_first_node() {
        let p = detect(&env_of(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_STEP_NODELIST", "gpu[07-10,12],login1"),
            ("SLURM_STEP_RESV_PORTS", "12000-12003"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((p.rank, p.world, p.rendezvous.as_str()), (1, 8, "gpu07:12000"));
        assert_eq!(first_host("a-[3-5]-ib,b").as_deref(), Some("a-3-ib"));
        assert_eq!(first_host("single").as_deref(), Some("single"));
        assert_eq!(first_host("bad[1-2"), None);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(detect(&env_of(&[("ROCE_COLL_RANK", "x")])).is_err());
        let e = detect(&env_of(&[
            ("ROCE_COLL_RANK", "4"),
            ("ROCE_COLL_WORLD", "4"),
            ("ROCE_COLL_RENDEZVOUS", "h:1"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("not in a world of 4"), "{e}");
    }
}
