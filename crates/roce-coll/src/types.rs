//! The vocabulary of a collective call: element types, reduction
//! operators, operations and algorithms, with their names as the CLI and
//! nccl-tests spell them.

use std::fmt;
use std::str::FromStr;

/// A name that did not parse (data type, reduction, operation, algorithm).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {got:?} (expected one of: {expected})")]
pub struct ParseError {
    pub what: &'static str,
    pub got: String,
    pub expected: &'static str,
}

/// Element type of a buffer. The names are nccl-tests' `-d` names
/// (`float`, `double`, `half`, `bfloat16`, `int32`, `int64`, `uint8`);
/// the short Rust names (`f32`, `i32`, ...) parse too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    F32,
    F64,
    F16,
    Bf16,
    I32,
    I64,
    U8,
}

impl DataType {
    /// Every type, in the order nccl-tests' `-d all` runs them.
    pub const ALL: [DataType; 7] = [
        DataType::U8,
        DataType::I32,
        DataType::I64,
        DataType::F16,
        DataType::F32,
        DataType::F64,
        DataType::Bf16,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::U8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::F32 | DataType::I32 => 4,
            DataType::F64 | DataType::I64 => 8,
        }
    }

    /// The name nccl-tests prints in its `type` column.
    pub const fn nccl_name(self) -> &'static str {
        match self {
            DataType::F32 => "float",
            DataType::F64 => "double",
            DataType::F16 => "half",
            DataType::Bf16 => "bfloat16",
            DataType::I32 => "int32",
            DataType::I64 => "int64",
            DataType::U8 => "uint8",
        }
    }

    /// Whether the type is an integer (integer `avg` truncates).
    pub const fn is_integer(self) -> bool {
        matches!(self, DataType::I32 | DataType::I64 | DataType::U8)
    }

    pub(crate) const fn code(self) -> u8 {
        match self {
            DataType::F32 => 1,
            DataType::F64 => 2,
            DataType::F16 => 3,
            DataType::Bf16 => 4,
            DataType::I32 => 5,
            DataType::I64 => 6,
            DataType::U8 => 7,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nccl_name())
    }
}

impl FromStr for DataType {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "float" | "float32" | "f32" => DataType::F32,
            "double" | "float64" | "f64" => DataType::F64,
            "half" | "float16" | "f16" => DataType::F16,
            "bfloat16" | "bf16" => DataType::Bf16,
            "int32" | "int" | "i32" => DataType::I32,
            "int64" | "i64" => DataType::I64,
            "uint8" | "u8" => DataType::U8,
            _ => {
                return Err(ParseError {
                    what: "data type",
                    got: s.to_string(),
                    expected: "float, double, half, bfloat16, int32, int64, uint8",
                })
            }
        })
    }
}

/// Reduction operator (nccl-tests' `-o` names).
///
/// `Avg` is the sum divided by the number of ranks, done once on the
/// final sum: integer types truncate toward zero as NCCL's `SumPostDiv`
/// does. For floating types NCCL pre-multiplies every input by `1/n`
/// (`PreMulSum`); dividing the exact sum once instead keeps the result
/// identical on every rank whatever the reduction order when the sum is
/// exact, which is what the tests check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedOp {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
}

impl RedOp {
    pub const ALL: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg];

    pub const fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::Avg => "avg",
        }
    }

    pub(crate) const fn code(self) -> u8 {
        match self {
            RedOp::Sum => 1,
            RedOp::Prod => 2,
            RedOp::Min => 3,
            RedOp::Max => 4,
            RedOp::Avg => 5,
        }
    }
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RedOp {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "sum" => RedOp::Sum,
            "prod" => RedOp::Prod,
            "min" => RedOp::Min,
            "max" => RedOp::Max,
            "avg" => RedOp::Avg,
            _ => {
                return Err(ParseError {
                    what: "reduction",
                    got: s.to_string(),
                    expected: "sum, prod, min, max, avg",
                })
            }
        })
    }
}

/// The collective operation. Counts follow NCCL's conventions (see
/// [`OpDesc::count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast,
    Reduce,
    AllToAll,
    Barrier,
}

impl OpKind {
    pub const ALL: [OpKind; 7] = [
        OpKind::AllReduce,
        OpKind::ReduceScatter,
        OpKind::AllGather,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::AllToAll,
        OpKind::Barrier,
    ];

    /// The CLI / error-message name (`all-reduce`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce => "all-reduce",
            OpKind::ReduceScatter => "reduce-scatter",
            OpKind::AllGather => "all-gather",
            OpKind::Broadcast => "broadcast",
            OpKind::Reduce => "reduce",
            OpKind::AllToAll => "all-to-all",
            OpKind::Barrier => "barrier",
        }
    }

    /// Whether the operation combines values with a [`RedOp`].
    pub const fn reduces(self) -> bool {
        matches!(self, OpKind::AllReduce | OpKind::ReduceScatter | OpKind::Reduce)
    }

    /// Whether the operation has a root rank.
    pub const fn rooted(self) -> bool {
        matches!(self, OpKind::Broadcast | OpKind::Reduce)
    }

    pub(crate) const fn code(self) -> u8 {
        match self {
            OpKind::AllReduce => 1,
            OpKind::ReduceScatter => 2,
            OpKind::AllGather => 3,
            OpKind::Broadcast => 4,
            OpKind::Reduce => 5,
            OpKind::AllToAll => 6,
            OpKind::Barrier => 7,
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OpKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "all-reduce" | "allreduce" => OpKind::AllReduce,
            "reduce-scatter" | "reducescatter" => OpKind::ReduceScatter,
            "all-gather" | "allgather" => OpKind::AllGather,
            "broadcast" | "bcast" => OpKind::Broadcast,
            "reduce" => OpKind::Reduce,
            "all-to-all" | "alltoall" => OpKind::AllToAll,
            "barrier" => OpKind::Barrier,
            _ => {
                return Err(ParseError {
                    what: "operation",
                    got: s.to_string(),
                    expected:
                        "all-reduce, reduce-scatter, all-gather, broadcast, reduce, all-to-all, barrier",
                })
            }
        })
    }
}

/// The algorithm that runs an operation (`--algo`, like `NCCL_ALGO`).
///
/// Which algorithm applies to which operation: [`Algo::applies_to`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Let the cost model ([`crate::cost::choose`]) pick.
    Auto,
    /// Ring (NCCL's): reduce-scatter then all-gather around the ring for
    /// all-reduce; a pipelined chain for broadcast and reduce.
    Ring,
    /// Rabenseifner: reduce-scatter by recursive halving, all-gather by
    /// recursive doubling (Thakur, Rabenseifner, Gropp 2005). All-reduce.
    Rabenseifner,
    /// Recursive doubling: lg n exchanges of the whole vector. All-reduce,
    /// small messages.
    RecursiveDoubling,
    /// NCCL's double binary tree (Sanders, Speck, Träff 2009): two
    /// complementary binary trees, each carrying half the data.
    /// All-reduce, broadcast, reduce.
    Tree,
    /// Pairwise exchange: in step k rank r sends to r+k and receives from
    /// r-k. All-to-all.
    Pairwise,
    /// Dissemination (Hensgen, Finkel, Manber 1988): ceil(lg n) rounds, in
    /// round k rank r signals r+2^k. Barrier.
    Dissemination,
}

impl Algo {
    /// Every concrete algorithm (not `Auto`).
    pub const CONCRETE: [Algo; 6] = [
        Algo::Ring,
        Algo::Rabenseifner,
        Algo::RecursiveDoubling,
        Algo::Tree,
        Algo::Pairwise,
        Algo::Dissemination,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Algo::Auto => "auto",
            Algo::Ring => "ring",
            Algo::Rabenseifner => "rabenseifner",
            Algo::RecursiveDoubling => "recursive-doubling",
            Algo::Tree => "tree",
            Algo::Pairwise => "pairwise",
            Algo::Dissemination => "dissemination",
        }
    }

    /// Whether this algorithm can run `op`.
    pub const fn applies_to(self, op: OpKind) -> bool {
        match self {
            Algo::Auto => true,
            Algo::Ring => matches!(
                op,
                OpKind::AllReduce
                    | OpKind::ReduceScatter
                    | OpKind::AllGather
                    | OpKind::Broadcast
                    | OpKind::Reduce
            ),
            Algo::Rabenseifner | Algo::RecursiveDoubling => matches!(op, OpKind::AllReduce),
            Algo::Tree => matches!(op, OpKind::AllReduce | OpKind::Broadcast | OpKind::Reduce),
            Algo::Pairwise => matches!(op, OpKind::AllToAll),
            Algo::Dissemination => matches!(op, OpKind::Barrier),
        }
    }

    /// The concrete algorithms that can run `op`.
    pub fn candidates(op: OpKind) -> Vec<Algo> {
        Algo::CONCRETE.iter().copied().filter(|a| a.applies_to(op)).collect()
    }

    pub(crate) const fn code(self) -> u8 {
        match self {
            Algo::Auto => 0,
            Algo::Ring => 1,
            Algo::Rabenseifner => 2,
            Algo::RecursiveDoubling => 3,
            Algo::Tree => 4,
            Algo::Pairwise => 5,
            Algo::Dissemination => 6,
        }
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algo {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "auto" => Algo::Auto,
            "ring" => Algo::Ring,
            "rabenseifner" | "rsag" | "halving-doubling" => Algo::Rabenseifner,
            "recursive-doubling" | "rd" => Algo::RecursiveDoubling,
            "tree" | "double-binary-tree" => Algo::Tree,
            "pairwise" => Algo::Pairwise,
            "dissemination" => Algo::Dissemination,
            _ => {
                return Err(ParseError {
                    what: "algorithm",
                    got: s.to_string(),
                    expected: "auto, ring, rabenseifner, recursive-doubling, tree, pairwise, dissemination",
                })
            }
        })
    }
}

/// One collective call, as every rank must describe it identically.
///
/// `count` follows NCCL:
/// - all-reduce, broadcast, reduce: elements in the buffer;
/// - reduce-scatter: elements each rank receives (the send buffer holds
///   `count * n`);
/// - all-gather: elements each rank sends (the receive buffer holds
///   `count * n`);
/// - all-to-all: elements sent to each peer (both buffers hold `count * n`,
///   block `j` of the send buffer goes to rank `j`);
/// - barrier: ignored (0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpDesc {
    pub op: OpKind,
    pub dtype: DataType,
    pub redop: RedOp,
    pub count: usize,
    /// Root rank for broadcast and reduce; ignored (0) otherwise.
    pub root: usize,
    pub algo: Algo,
}

impl OpDesc {
    pub fn new(op: OpKind, dtype: DataType, count: usize) -> OpDesc {
        OpDesc { op, dtype, redop: RedOp::Sum, count, root: 0, algo: Algo::Auto }
    }
    pub fn redop(mut self, redop: RedOp) -> OpDesc {
        self.redop = redop;
        self
    }
    pub fn root(mut self, root: usize) -> OpDesc {
        self.root = root;
        self
    }
    pub fn algo(mut self, algo: Algo) -> OpDesc {
        self.algo = algo;
        self
    }

    /// Bytes of the send buffer (out-of-place) on a communicator of `n`.
    pub fn send_bytes(&self, n: usize) -> usize {
        let es = self.dtype.size();
        match self.op {
            OpKind::ReduceScatter | OpKind::AllToAll => self.count * n * es,
            OpKind::Barrier => 0,
            _ => self.count * es,
        }
    }

    /// Bytes of the receive buffer (and of the single buffer in place).
    pub fn recv_bytes(&self, n: usize) -> usize {
        let es = self.dtype.size();
        match self.op {
            OpKind::AllGather | OpKind::AllToAll => self.count * n * es,
            OpKind::Barrier => 0,
            _ => self.count * es,
        }
    }

    /// Bytes of the single buffer of an in-place call: the larger of the
    /// two (NCCL: in-place reduce-scatter's result is at
    /// `recvbuff = sendbuff + rank * count`, in-place all-gather's input at
    /// `sendbuff = recvbuff + rank * count`).
    pub fn inplace_bytes(&self, n: usize) -> usize {
        self.send_bytes(n).max(self.recv_bytes(n))
    }
}
