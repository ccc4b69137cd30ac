//! The NVMe-oF target (controller side) as a sans-IO state machine.
//!
//! A [`Target`] holds the subsystems and the controllers hosts have made;
//! it is shared by every [`Queue`] (one per RDMA connection, which is one
//! NVMe submission/completion queue pair: RDMA Transport 1.0, 3.2). A queue
//! is fed the capsules its connection receives ([`Queue::command`]) and
//! says what to do with each ([`Step`]): answer it, pull the host's data
//! first (an RDMA READ of the command's keyed SGL, then
//! [`Queue::data_in`]), or push data to the host (an RDMA WRITE) before
//! the answer. No sockets, threads or clocks inside: time is an argument
//! (ns), and the namespaces are [`Backend`](crate::namespace::Backend)s.
//!
//! Controllers follow the dynamic controller model (NVMe-oF 1.1, 3.3):
//! an admin Connect with controller ID 0xFFFF makes one, I/O Connects name
//! it. A controller whose host sends no Keep Alive (nor any other command)
//! for twice its KATO is removed ([`Target::expire`]) and its queues are
//! told to disconnect, as Linux nvmet does after its grace period.

mod admin;
mod command;
mod config;
mod io;
mod queue;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

pub use config::{ConfigError, Namespace, SubsystemConfig, TargetConfig};
pub use queue::{Place, Queue, Response, Step};

/// The controller ID a host gets is in 1..=0xFFEF (0xFFF0.. are reserved,
/// 0xFFFF asks for a dynamic one).
const CNTLID_MAX: u16 = 0xFFEF;

/// What the target counts (the driver prints these).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetStats {
    pub commands: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Commands answered with a status other than success.
    pub errors: u64,
    /// Connects refused (unknown NQN, host not allowed, bad parameters).
    pub connects_refused: u64,
    /// Capsules that were not a command (too short, fused, PRPs).
    pub malformed: u64,
    pub keep_alive_expired: u64,
    pub controllers_made: u64,
}

/// A controller: made by an admin Connect, gone when its admin queue
/// disconnects or its keep-alive lapses.
#[derive(Debug)]
struct Ctrl {
    /// Index into the subsystems; `None` for the discovery controller.
    subsys: Option<usize>,
    hostnqn: String,
    hostid: [u8; 16],
    /// Keep Alive Timeout (ms), 0 = none.
    kato_ms: u32,
    last_activity_ns: u64,
    cc: u32,
    csts: u32,
    /// I/O queues granted by Set Features Number of Queues (count).
    granted_io: Option<u16>,
    io_queues: BTreeSet<u16>,
    async_event_config: u32,
    write_cache: bool,
    /// Asynchronous Event Requests held (their CIDs).
    aers: u32,
}

/// The subsystems and their controllers, shared by every queue.
pub struct Target {
    cfg: TargetConfig,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    ctrls: BTreeMap<u16, Ctrl>,
    next_cntlid: u16,
    stats: TargetStats,
}

impl Target {
    /// A target serving `cfg` (checked first).
    pub fn new(cfg: TargetConfig) -> Result<Target, ConfigError> {
        cfg.validate()?;
        Ok(Target { cfg, state: Mutex::new(State { next_cntlid: 1, ..State::default() }) })
    }

    pub fn config(&self) -> &TargetConfig {
        &self.cfg
    }

    /// Whether every namespace's back-end [never blocks](crate::namespace::Backend::never_blocks).
    pub fn never_blocks(&self) -> bool {
        self.cfg.subsystems.iter().flat_map(|s| &s.namespaces).all(|ns| ns.backend.never_blocks())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A queue that panicked mid-command leaves counters at worst.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn stats(&self) -> TargetStats {
        self.lock().stats.clone()
    }

    /// Live controllers: (ID, subsystem NQN, host NQN, I/O queues).
    pub fn controllers(&self) -> Vec<(u16, String, String, usize)> {
        self.lock()
            .ctrls
            .iter()
            .map(|(&id, c)| (id, self.subsys_nqn(c.subsys).to_string(), c.hostnqn.clone(), c.io_queues.len()))
            .collect()
    }

    fn subsys_nqn(&self, s: Option<usize>) -> &str {
        match s {
            Some(i) => &self.cfg.subsystems[i].nqn,
            None => crate::wire::DISCOVERY_NQN,
        }
    }

    /// Whether controller `cntlid` still exists.
    pub fn is_alive(&self, cntlid: u16) -> bool {
        self.lock().ctrls.contains_key(&cntlid)
    }

    /// The earliest time (ns) a keep-alive may lapse, if any controller
    /// has a KATO.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.lock()
            .ctrls
            .values()
            .filter(|c| c.kato_ms > 0)
            .map(|c| c.last_activity_ns + Self::grace_ns(c.kato_ms))
            .min()
    }

    /// A host is given twice its KATO: its keep-alive period is the KATO
    /// itself (Linux before 6.3), and a command in flight at the deadline
    /// must not end the controller.
    fn grace_ns(kato_ms: u32) -> u64 {
        2 * u64::from(kato_ms) * 1_000_000
    }

    /// Removes the controllers whose keep-alive lapsed by `now`; their
    /// queues see `is_alive` false and disconnect. Returns their IDs.
    pub fn expire(&self, now: u64) -> Vec<u16> {
        let mut st = self.lock();
        let gone: Vec<u16> = st
            .ctrls
            .iter()
            .filter(|(_, c)| c.kato_ms > 0 && now >= c.last_activity_ns + Self::grace_ns(c.kato_ms))
            .map(|(&id, _)| id)
            .collect();
        for id in &gone {
            st.ctrls.remove(id);
        }
        st.stats.keep_alive_expired += gone.len() as u64;
        gone
    }

    fn alloc_cntlid(st: &mut State) -> Option<u16> {
        // Increasing IDs (wrapping), never one in use: the Linux host
        // refuses a controller ID it still knows in the same subsystem.
        for _ in 0..CNTLID_MAX {
            let id = st.next_cntlid;
            st.next_cntlid = if id >= CNTLID_MAX { 1 } else { id + 1 };
            if !st.ctrls.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }
}
