//! What a target serves, checked before it serves it.

use std::sync::Arc;

use crate::namespace::Backend;
use crate::wire::{DISCOVERY_NQN, NQN_MAX};

/// One namespace: its storage and its block size.
#[derive(Clone)]
pub struct Namespace {
    pub backend: Arc<dyn Backend>,
    /// log2 of the logical block size (9 = 512 B, 12 = 4 KiB).
    pub lbads: u8,
}

impl Namespace {
    pub fn new(backend: Arc<dyn Backend>, block_size: u32) -> Namespace {
        Namespace { backend, lbads: block_size.trailing_zeros() as u8 }
    }
    pub fn block_size(&self) -> u64 {
        1u64 << self.lbads
    }
    pub fn blocks(&self) -> u64 {
        self.backend.len() >> self.lbads
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Namespace({}, {} B blocks)", self.backend.describe(), self.block_size())
    }
}

/// An NVM subsystem: its NQN, who may connect, its namespaces (NSID 1..).
#[derive(Debug, Clone)]
pub struct SubsystemConfig {
    pub nqn: String,
    /// Host NQNs allowed to connect; empty: any host.
    pub allowed_hosts: Vec<String>,
    pub namespaces: Vec<Namespace>,
}

impl SubsystemConfig {
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.allowed_hosts.is_empty() || self.allowed_hosts.iter().any(|h| h == hostnqn)
    }
}

/// A target's settings.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    pub subsystems: Vec<SubsystemConfig>,
    /// The address and RDMA CM port the discovery log page names
    /// (TRADDR, TRSVCID).
    pub traddr: String,
    pub trsvcid: u16,
    /// Largest data transfer of one command, bytes (a power of two, at
    /// least 4 KiB: Identify MDTS in 4 KiB pages).
    pub max_transfer: u32,
    /// In-capsule data an I/O command may carry (bytes, a multiple of 16,
    /// at most 16 KiB; 0 = none). Linux nvmet's default is one page.
    pub in_capsule: u32,
    /// Entries a queue may have (CAP.MQES + 1; the admin queue at most 32).
    pub max_queue_entries: u16,
    /// I/O queues a controller may have.
    pub max_io_queues: u16,
    /// Answer with SEND WITH INVALIDATE when the host's key allows it
    /// (as Linux nvmet does), which spares the host a LOCAL_INV.
    pub send_with_invalidate: bool,
    /// Serial number prefix of the subsystems' controllers.
    pub serial: String,
}

impl Default for TargetConfig {
    fn default() -> Self {
        TargetConfig {
            subsystems: Vec::new(),
            traddr: "127.0.0.1".into(),
            trsvcid: 4420,
            max_transfer: 128 * 1024,
            in_capsule: 4096,
            max_queue_entries: 1024,
            max_io_queues: 64,
            send_with_invalidate: true,
            serial: "roce".into(),
        }
    }
}

/// A target configuration that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("no subsystem to serve")]
    NoSubsystem,
    #[error("{0:?} is not an NQN (\"nqn.\" and at most 223 bytes, e.g. nqn.2026-11.io.roce:disk)")]
    BadNqn(String),
    #[error("subsystem {0} is named twice")]
    DuplicateNqn(String),
    #[error("{0} is the discovery subsystem's NQN; the target serves it by itself")]
    DiscoveryNqn(String),
    #[error("subsystem {0} has no namespace")]
    NoNamespace(String),
    #[error(
        "namespace {nsid} of {nqn} ({what}): {len} bytes is not a whole number (> 0) of {block} B blocks"
    )]
    NamespaceSize { nqn: String, nsid: u32, what: String, len: u64, block: u64 },
    #[error("block size {0} B: must be a power of two from 512 B to 64 KiB")]
    BlockSize(u64),
    #[error("max transfer {0} B: must be a power of two from 4 KiB to 8 MiB")]
    MaxTransfer(u32),
    #[error("in-capsule data {0} B: must be a multiple of 16 up to 16 KiB")]
    InCapsule(u32),
    #[error("queue entries {0}: must be from 32 to 65,535")]
    QueueEntries(u16),
    #[error("I/O queues {0}: must be from 1 to 1,024")]
    IoQueues(u16),
}

fn nqn_ok(n: &str) -> bool {
    n.starts_with("nqn.") && n.len() <= NQN_MAX && n.len() > 4 && !n.contains('\0')
}

impl TargetConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.subsystems.is_empty() {
            return Err(ConfigError::NoSubsystem);
        }
        if !self.max_transfer.is_power_of_two() || !(4096..=8 << 20).contains(&self.max_transfer) {
            return Err(ConfigError::MaxTransfer(self.max_transfer));
        }
        if self.in_capsule % 16 != 0 || self.in_capsule > 16 * 1024 {
            return Err(ConfigError::InCapsule(self.in_capsule));
        }
        if self.max_queue_entries < 32 {
            return Err(ConfigError::QueueEntries(self.max_queue_entries));
        }
        if !(1..=1024).contains(&self.max_io_queues) {
            return Err(ConfigError::IoQueues(self.max_io_queues));
        }
        for (i, s) in self.subsystems.iter().enumerate() {
            if s.nqn == DISCOVERY_NQN {
                return Err(ConfigError::DiscoveryNqn(s.nqn.clone()));
            }
            if !nqn_ok(&s.nqn) {
                return Err(ConfigError::BadNqn(s.nqn.clone()));
            }
            if let Some(h) = s.allowed_hosts.iter().find(|h| !nqn_ok(h)) {
                return Err(ConfigError::BadNqn(h.clone()));
            }
            if self.subsystems[..i].iter().any(|o| o.nqn == s.nqn) {
                return Err(ConfigError::DuplicateNqn(s.nqn.clone()));
            }
            if s.namespaces.is_empty() {
                return Err(ConfigError::NoNamespace(s.nqn.clone()));
            }
            for (j, ns) in s.namespaces.iter().enumerate() {
                let block = ns.block_size();
                if !(9..=16).contains(&ns.lbads) {
                    return Err(ConfigError::BlockSize(block));
                }
                let len = ns.backend.len();
                if len == 0 || len % block != 0 {
                    return Err(ConfigError::NamespaceSize {
                        nqn: s.nqn.clone(),
                        nsid: j as u32 + 1,
                        what: ns.backend.describe(),
                        len,
                        block,
                    });
                }
            }
        }
        Ok(())
    }

    /// Identify MDTS: the max transfer in 4 KiB pages, as a power of two.
    pub fn mdts(&self) -> u8 {
        (self.max_transfer / 4096).trailing_zeros() as u8
    }
}
