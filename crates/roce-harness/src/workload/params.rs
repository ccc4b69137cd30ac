//! The knobs of the workload generator: how big a plan may get and which
//! features and faults it may use. The seed picks concrete values inside
//! these bounds.

/// A microsecond in the harness's nanoseconds.
pub(super) const US: u64 = 1_000;

/// Bounds for link faults; each link of a faulty run draws each probability
/// uniformly in `[0, max]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    pub max_loss: f64,
    pub max_reorder: f64,
    pub max_duplicate: f64,
    pub max_corrupt: f64,
    /// Fraction of runs with perfect links.
    pub clean_runs: f64,
}

impl Faults {
    pub const NONE: Faults =
        Faults { max_loss: 0.0, max_reorder: 0.0, max_duplicate: 0.0, max_corrupt: 0.0, clean_runs: 1.0 };
}

impl Default for Faults {
    /// Up to 10% loss, 20% reordering, 5% duplication, 5% corruption.
    fn default() -> Self {
        Faults { max_loss: 0.10, max_reorder: 0.20, max_duplicate: 0.05, max_corrupt: 0.05, clean_runs: 0.15 }
    }
}

/// What a generated workload may contain.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Hosts per run (inclusive range).
    pub hosts: (usize, usize),
    /// RC QP pairs per run.
    pub rc_pairs: (usize, usize),
    /// Send WRs per RC stream (one stream per QP of a pair).
    pub ops_per_stream: (usize, usize),
    /// Largest message, in path MTUs.
    pub max_msg_mtus: u32,
    /// UD QPs and up to this many UD sends per UD QP (0: no UD).
    pub ud_msgs: usize,
    /// Shared receive queues on some QPs.
    pub srq: bool,
    /// Receive WRs posted late and in bursts so that senders meet RNR NAKs.
    pub rnr_storms: bool,
    /// Some runs add a QP pair whose last WRs write to a remotely
    /// invalidated region and must fail.
    pub probe: bool,
    /// Hosts may have IPv6 addresses (and some only IPv6).
    pub ipv6: bool,
    /// Some send queues, receive queues and SRQs hold only 1 to 4 WRs, so
    /// that the application meets full queues and posts as WRs retire.
    pub small_queues: bool,
    /// Some QPs get an ACK timeout just above the round trip, so that
    /// reordering causes spurious retransmissions (duplicates to handle).
    pub tight_timeouts: bool,
    pub faults: Faults,
    /// How often seeds draw congestion control, encryption and blackouts.
    pub mix: MixParams,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            hosts: (2, 4),
            rc_pairs: (1, 6),
            ops_per_stream: (0, 24),
            max_msg_mtus: 4,
            ud_msgs: 6,
            srq: true,
            rnr_storms: true,
            probe: true,
            ipv6: true,
            tight_timeouts: true,
            small_queues: true,
            faults: Faults::default(),
            mix: MixParams::default(),
        }
    }
}

/// How often a seed draws each feature of the mix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixParams {
    /// Seeds whose hosts may run congestion control (each host then draws
    /// it with probability 3/4).
    pub cc_runs: f64,
    /// Seeds with encrypted QP pairs (each RC pair then draws it with
    /// probability 1/2).
    pub crypto_runs: f64,
    /// Faulty seeds whose links go dark for a while.
    pub blackout_runs: f64,
    /// Faults end and a heal phase follows (off: faults last the whole
    /// run and the run has until `Config::time_limit` to finish).
    pub heal: bool,
    /// Faulty seeds whose faults end while the workload still posts (the
    /// others' end after its last WR).
    pub early_heal: f64,
    /// Seeds whose hosts run on a switched fabric (one or two switches)
    /// instead of the mesh.
    pub switched_runs: f64,
    /// Seeds whose devices may cap their unacknowledged request bytes
    /// (each host then draws a cap with probability 3/4).
    pub capped_runs: f64,
}

impl MixParams {
    /// The harness before the mix: the workload and its link faults only,
    /// to the end of the run (each seed then runs as it did then).
    pub const NONE: MixParams = MixParams {
        cc_runs: 0.0,
        crypto_runs: 0.0,
        blackout_runs: 0.0,
        heal: false,
        early_heal: 0.0,
        switched_runs: 0.0,
        capped_runs: 0.0,
    };
}

impl Default for MixParams {
    fn default() -> Self {
        MixParams {
            cc_runs: 0.4,
            crypto_runs: 0.3,
            blackout_runs: 0.3,
            heal: true,
            early_heal: 0.5,
            switched_runs: 0.2,
            capped_runs: 0.5,
        }
    }
}
