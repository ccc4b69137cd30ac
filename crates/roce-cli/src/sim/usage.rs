//! CPU time and peak memory of this process, read from `/proc/self` (std
//! only; `None` where `/proc` is not there).

use std::time::Instant;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, fixed
/// at 100 by the Linux ABI on every architecture).
const USER_HZ: f64 = 100.0;
/// 1-based index of `utime` among the fields of `/proc/<pid>/stat`.
const STAT_UTIME_FIELD: usize = 14;
/// Fields of `/proc/<pid>/stat` up to and including `comm` (which ends at
/// the last `)`).
const STAT_FIELDS_TO_COMM: usize = 2;

/// User CPU seconds of this process so far.
pub fn user_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_utime(&stat)
}

fn parse_utime(stat: &str) -> Option<f64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 =
        after_comm.split_whitespace().nth(STAT_UTIME_FIELD - STAT_FIELDS_TO_COMM - 1)?.parse().ok()?;
    Some(ticks as f64 / USER_HZ)
}

/// Peak resident set size of this process, KiB (`VmHWM`).
pub fn max_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU and wall time spent since [`Meter::start`].
pub struct Meter {
    wall: Instant,
    cpu: Option<f64>,
}

/// What a [`Meter`] measured.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Usage {
    pub user_cpu_s: Option<f64>,
    pub wall_s: f64,
    pub max_rss_kib: Option<u64>,
}

impl Meter {
    pub fn start() -> Meter {
        Meter { wall: Instant::now(), cpu: user_cpu_seconds() }
    }

    pub fn stop(&self) -> Usage {
        let user_cpu_s = match (self.cpu, user_cpu_seconds()) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        Usage { user_cpu_s, wall_s: self.wall.elapsed().as_secs_f64(), max_rss_kib: max_rss_kib() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_after_a_comm_with_spaces() {
        let stat = "1234 (my (odd) cmd) R 1 2 3 4 5 6 7 8 9 10 250 17 0 0 20 0 1 0";
        assert_eq!(parse_utime(stat), Some(2.5));
        assert_eq!(parse_utime("garbage"), None);
    }

    #[test]
    fn reads_vm_hwm() {
        assert_eq!(parse_vm_hwm("Name:\tx\nVmPeak:\t 10 kB\nVmHWM:\t  5120 kB\n"), Some(5120));
        assert_eq!(parse_vm_hwm("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_has_usage() {
        assert!(user_cpu_seconds().is_some());
        assert!(max_rss_kib().unwrap() > 0);
    }
}
