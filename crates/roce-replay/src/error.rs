//! The replay's typed errors: every way a trace, its metadata or its
//! operation graph can be wrong, each with what and where.

use std::path::PathBuf;

/// What went wrong reading, checking or replaying a trace.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a readable parquet file (bad magic, truncated footer,
    /// corrupt page).
    #[error("{path} is not a readable parquet file: {reason}")]
    NotParquet {
        /// The file.
        path: PathBuf,
        /// What the parquet reader said.
        reason: String,
    },
    /// A column the replay needs is absent.
    #[error("{path}: missing column `{column}` (a trace needs {needed})")]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The absent column.
        column: &'static str,
        /// Every column a trace needs.
        needed: String,
    },
    /// A column has a type the replay cannot use (e.g. a string where a
    /// time is expected).
    #[error("{path}: column `{column}` is {found}, expected {expected}")]
    WrongColumnType {
        /// The file.
        path: PathBuf,
        /// The column.
        column: &'static str,
        /// Its physical/logical type as found.
        found: String,
        /// What the replay accepts.
        expected: &'static str,
    },
    /// A row holds a null, a non-finite time or a negative duration.
    #[error("{path}: row {row}: column `{column}`: {what}")]
    BadValue {
        /// The file.
        path: PathBuf,
        /// Row number (0-based).
        row: usize,
        /// The column.
        column: &'static str,
        /// What is wrong.
        what: String,
    },
    /// An operation type the replay does not know.
    #[error("row {row}: unknown optype `{optype}`")]
    UnknownOpType {
        /// Row number (0-based).
        row: usize,
        /// The value found.
        optype: String,
    },
    /// The trace has no rows.
    #[error("the trace has no operations")]
    Empty,
    /// The metadata file is malformed.
    #[error("metadata {path}: line {line}: {what}")]
    BadMeta {
        /// The file.
        path: PathBuf,
        /// Line number (1-based; 0 for the file as a whole).
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// The trace does not fit its metadata (a dp_rank beyond dp_size, ...).
    #[error("the trace does not fit its metadata: {0}")]
    MetaMismatch(String),
    /// A pipeline send has no matching receive on the peer stage.
    #[error("step {step}: {optype} #{index} of rank {rank} (stage {stage}) has no matching receive on stage {peer_stage}")]
    UnmatchedSend {
        /// The step.
        step: i64,
        /// The sender's global rank.
        rank: u32,
        /// The sender's stage.
        stage: u32,
        /// The peer stage.
        peer_stage: u32,
        /// `forward-send` or `backward-send`.
        optype: &'static str,
        /// Position among the sender's transfers of that type in the step.
        index: usize,
    },
    /// A pipeline receive has no matching send on the peer stage.
    #[error("step {step}: {optype} #{index} of rank {rank} (stage {stage}) has no matching send on stage {peer_stage}")]
    UnmatchedRecv {
        /// The step.
        step: i64,
        /// The receiver's global rank.
        rank: u32,
        /// The receiver's stage.
        stage: u32,
        /// The peer stage.
        peer_stage: u32,
        /// `forward-recv` or `backward-recv`.
        optype: &'static str,
        /// Position among the receiver's transfers of that type in the step.
        index: usize,
    },
    /// The pipeline transfers of a worker do not line up with its compute
    /// operations (more transfers than computes, or a stage with a gap).
    #[error("step {step}: rank {rank}: {what}")]
    Pipeline {
        /// The step.
        step: i64,
        /// The worker's global rank.
        rank: u32,
        /// What does not line up.
        what: String,
    },
    /// A collective lacks one of its participants in some step.
    #[error("step {step}: {optype} #{seq} has {found} of its {expected} participants")]
    MissingParticipant {
        /// The step.
        step: i64,
        /// The collective's type.
        optype: &'static str,
        /// Its sequence number.
        seq: i64,
        /// Participants recorded.
        found: usize,
        /// Participants the parallelism implies.
        expected: usize,
    },
    /// The operation graph of a step has a cycle: no replay order exists.
    #[error("step {step}: the operation graph has a cycle; {stuck} operations never become ready (e.g. {example})")]
    Cycle {
        /// The step.
        step: i64,
        /// Operations never started or finished.
        stuck: usize,
        /// One of them.
        example: String,
    },
    /// Costs handed to a replay do not fit its graph (a cost vector of the
    /// wrong length, a communication model answering for the wrong number
    /// of participants, a negative or non-finite duration).
    #[error("step {step}: {what}")]
    BadCosts {
        /// The step.
        step: i64,
        /// What does not fit.
        what: String,
    },
    /// Writing a trace failed.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}
