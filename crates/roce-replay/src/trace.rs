//! A recorded training trace: one row per operation, as the straggler
//! traces of "Understanding Stragglers in Large Model Training Using
//! What-if Analysis" (OSDI'25) store them in parquet.
//!
//! Columns (read by name; integer columns may be any parquet integer
//! width, time columns FLOAT or DOUBLE): `dp_rank`, `stage` (pipeline
//! rank), `rank` (global), `step`, `optype` (string, plain or dictionary
//! encoded), `start_ts` and `duration` (seconds: the files carry no unit;
//! their step times of 2-47 s and compute kernels of 0.06-0.9 s only make
//! sense in seconds), `seq_id` (the operation's number among its type on
//! its worker in its step), `mc` (model chunk) and `gmc` (global model
//! chunk of a compute op, -1 otherwise). `mb_id` is optional and unused.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use parquet::basic::{LogicalType, Type as Physical};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::record::Field;
use parquet::schema::parser::parse_message_type;

use crate::error::ReplayError;

/// The type of a recorded operation (the traces' `optype` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// A micro-batch's forward pass on one stage.
    ForwardCompute,
    /// A micro-batch's backward pass on one stage.
    BackwardCompute,
    /// Pipeline: activations to the next stage.
    ForwardSend,
    /// Pipeline: activations from the previous stage.
    ForwardRecv,
    /// Pipeline: gradients to the previous stage.
    BackwardSend,
    /// Pipeline: gradients from the next stage.
    BackwardRecv,
    /// Data parallel: gradient reduce-scatter (distributed optimizer).
    GradsReduceScatter,
    /// Data parallel: parameter all-gather (distributed optimizer).
    ParamsAllGather,
    /// Data parallel: gradient all-reduce kept apart from the bucketed ones.
    SeparateGradsAllReduce,
    /// Tensor parallel: layernorm gradient all-reduce (within the worker's
    /// tensor-parallel group, which the traces record as one worker).
    LayernormGradsAllReduce,
    /// First and last stage: tied embedding gradient all-reduce.
    EmbeddingGradsAllReduce,
    /// Global gradient-norm all-reduce of gradient clipping (all workers).
    OptimizerClipMainGrad,
    /// The optimizer step.
    Optimizer,
    /// Garbage collection.
    Gc,
}

impl OpKind {
    /// Every kind, in a fixed order.
    pub const ALL: [OpKind; 14] = [
        OpKind::ForwardCompute,
        OpKind::BackwardCompute,
        OpKind::ForwardSend,
        OpKind::ForwardRecv,
        OpKind::BackwardSend,
        OpKind::BackwardRecv,
        OpKind::GradsReduceScatter,
        OpKind::ParamsAllGather,
        OpKind::SeparateGradsAllReduce,
        OpKind::LayernormGradsAllReduce,
        OpKind::EmbeddingGradsAllReduce,
        OpKind::OptimizerClipMainGrad,
        OpKind::Optimizer,
        OpKind::Gc,
    ];

    /// The trace's spelling.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::ForwardCompute => "forward-compute",
            OpKind::BackwardCompute => "backward-compute",
            OpKind::ForwardSend => "forward-send",
            OpKind::ForwardRecv => "forward-recv",
            OpKind::BackwardSend => "backward-send",
            OpKind::BackwardRecv => "backward-recv",
            OpKind::GradsReduceScatter => "grads-reduce-scatter",
            OpKind::ParamsAllGather => "params-all-gather",
            OpKind::SeparateGradsAllReduce => "separate-grads-all-reduce",
            OpKind::LayernormGradsAllReduce => "layernorm-grads-all-reduce",
            OpKind::EmbeddingGradsAllReduce => "embedding-grads-all-reduce",
            OpKind::OptimizerClipMainGrad => "optimizer-clip-main-grad",
            OpKind::Optimizer => "optimizer",
            OpKind::Gc => "gc",
        }
    }

    /// The kind of a trace's `optype` value.
    pub fn parse(s: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Pipeline point-to-point transfers.
    pub fn is_p2p(self) -> bool {
        matches!(
            self,
            OpKind::ForwardSend | OpKind::ForwardRecv | OpKind::BackwardSend | OpKind::BackwardRecv
        )
    }

    /// Data-parallel collectives (joined across the data-parallel group).
    pub fn is_dp_collective(self) -> bool {
        matches!(self, OpKind::GradsReduceScatter | OpKind::ParamsAllGather | OpKind::SeparateGradsAllReduce)
    }

    /// Communication in the what-if sense: its typical duration is the
    /// median of its kind (compute kinds take the mean).
    pub fn is_communication(self) -> bool {
        self.is_p2p()
            || self.is_dp_collective()
            || matches!(
                self,
                OpKind::LayernormGradsAllReduce
                    | OpKind::EmbeddingGradsAllReduce
                    | OpKind::OptimizerClipMainGrad
            )
    }

    /// The label of the decomposition by op type: pipeline transfers are
    /// grouped per direction (`forward-pp-comm`, `backward-pp-comm`).
    pub fn decomposition_label(self) -> &'static str {
        match self {
            OpKind::ForwardSend | OpKind::ForwardRecv => "forward-pp-comm",
            OpKind::BackwardSend | OpKind::BackwardRecv => "backward-pp-comm",
            k => k.name(),
        }
    }
}

/// One recorded operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// Data-parallel rank.
    pub dp_rank: u32,
    /// Pipeline stage.
    pub stage: u32,
    /// Global rank of the worker that recorded it.
    pub rank: u32,
    /// Training step.
    pub step: i64,
    /// Operation type.
    pub kind: OpKind,
    /// Start, seconds.
    pub start: f64,
    /// Duration, seconds.
    pub duration: f64,
    /// Number among the worker's operations of this kind in this step.
    pub seq: i64,
    /// Model chunk (-1 where not applicable).
    pub mc: i64,
    /// Global model chunk of a compute op (-1 where not applicable).
    pub gmc: i64,
}

impl Op {
    /// End, seconds.
    pub fn end(&self) -> f64 {
        self.start + self.duration
    }
}

/// The columns a trace needs.
const NEEDED: [&str; 10] =
    ["dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc"];

#[derive(Clone, Copy, PartialEq)]
enum Want {
    Int,
    Float,
    Str,
}

fn want(col: &str) -> Want {
    match col {
        "optype" => Want::Str,
        "start_ts" | "duration" => Want::Float,
        _ => Want::Int,
    }
}

/// Reads a trace from a parquet file, checking its columns' presence and
/// types and every value (no nulls, finite times, durations >= 0, known
/// op types).
pub fn read_trace(path: &Path) -> Result<Vec<Op>, ReplayError> {
    let file = File::open(path).map_err(|source| ReplayError::Io { path: path.into(), source })?;
    let not_parquet = |e: parquet::errors::ParquetError| ReplayError::NotParquet {
        path: path.into(),
        reason: e.to_string(),
    };
    let reader = SerializedFileReader::new(file).map_err(not_parquet)?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    // column index in the file of each needed column
    let mut index = [usize::MAX; NEEDED.len()];
    for (slot, &name) in NEEDED.iter().enumerate() {
        let Some(i) = schema.columns().iter().position(|c| c.name() == name) else {
            return Err(ReplayError::MissingColumn {
                path: path.into(),
                column: name,
                needed: NEEDED.join(", "),
            });
        };
        let c = &schema.columns()[i];
        let logical = c.logical_type_ref().cloned();
        let ok = match want(name) {
            Want::Int => {
                matches!(c.physical_type(), Physical::INT32 | Physical::INT64)
                    && matches!(logical, None | Some(LogicalType::Integer { .. }))
            }
            Want::Float => {
                matches!(c.physical_type(), Physical::FLOAT | Physical::DOUBLE) && logical.is_none()
            }
            Want::Str => {
                c.physical_type() == Physical::BYTE_ARRAY
                    && matches!(logical, None | Some(LogicalType::String) | Some(LogicalType::Enum))
            }
        };
        if !ok {
            return Err(ReplayError::WrongColumnType {
                path: path.into(),
                column: name,
                found: match &logical {
                    Some(l) => format!("{} ({l:?})", c.physical_type()),
                    None => c.physical_type().to_string(),
                },
                expected: match want(name) {
                    Want::Int => "an integer (INT32 or INT64)",
                    Want::Float => "a time in seconds (FLOAT or DOUBLE)",
                    Want::Str => "a string (BYTE_ARRAY, UTF8)",
                },
            });
        }
        index[slot] = i;
    }
    let rows = reader.get_row_iter(None).map_err(not_parquet)?;
    let mut ops = Vec::with_capacity(reader.metadata().file_metadata().num_rows().max(0) as usize);
    for (row_no, row) in rows.enumerate() {
        let row = row.map_err(not_parquet)?;
        let fields: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
        let bad = |column: &'static str, what: String| ReplayError::BadValue {
            path: path.into(),
            row: row_no,
            column,
            what,
        };
        let int = |slot: usize| -> Result<i64, ReplayError> {
            let name = NEEDED[slot];
            match fields.get(index[slot]) {
                Some(Field::Byte(v)) => Ok(i64::from(*v)),
                Some(Field::Short(v)) => Ok(i64::from(*v)),
                Some(Field::Int(v)) => Ok(i64::from(*v)),
                Some(Field::Long(v)) => Ok(*v),
                Some(Field::UByte(v)) => Ok(i64::from(*v)),
                Some(Field::UShort(v)) => Ok(i64::from(*v)),
                Some(Field::UInt(v)) => Ok(i64::from(*v)),
                Some(Field::ULong(v)) => {
                    i64::try_from(*v).map_err(|_| bad(name, format!("{v} out of range")))
                }
                Some(Field::Null) | None => Err(bad(name, "null".into())),
                Some(other) => Err(bad(name, format!("not an integer: {other}"))),
            }
        };
        let float = |slot: usize| -> Result<f64, ReplayError> {
            let name = NEEDED[slot];
            let v = match fields.get(index[slot]) {
                Some(Field::Float(v)) => f64::from(*v),
                Some(Field::Double(v)) => *v,
                Some(Field::Null) | None => return Err(bad(name, "null".into())),
                Some(other) => return Err(bad(name, format!("not a time: {other}"))),
            };
            if v.is_finite() {
                Ok(v)
            } else {
                Err(bad(name, format!("not finite: {v}")))
            }
        };
        let rank_like = |slot: usize| -> Result<u32, ReplayError> {
            let v = int(slot)?;
            u32::try_from(v).map_err(|_| bad(NEEDED[slot], format!("{v} is not a rank (>= 0)")))
        };
        let optype = match fields.get(index[4]) {
            Some(Field::Str(s)) => s.clone(),
            Some(Field::Bytes(b)) => String::from_utf8_lossy(b.data()).into_owned(),
            Some(Field::Null) | None => return Err(bad("optype", "null".into())),
            Some(other) => return Err(bad("optype", format!("not a string: {other}"))),
        };
        let kind = OpKind::parse(&optype).ok_or(ReplayError::UnknownOpType { row: row_no, optype })?;
        let duration = float(6)?;
        if duration < 0.0 {
            return Err(bad("duration", format!("negative: {duration}")));
        }
        ops.push(Op {
            dp_rank: rank_like(0)?,
            stage: rank_like(1)?,
            rank: rank_like(2)?,
            step: int(3)?,
            kind,
            start: float(5)?,
            duration,
            seq: int(7)?,
            mc: int(8)?,
            gmc: int(9)?,
        });
    }
    if ops.is_empty() {
        return Err(ReplayError::Empty);
    }
    Ok(ops)
}

/// Writes operations as a trace in the same format (INT32/INT64 integers,
/// DOUBLE times in seconds, UTF8 `optype`; uncompressed). Hand-made traces
/// of tests and examples use it.
pub fn write_trace(path: &Path, ops: &[Op]) -> Result<(), ReplayError> {
    let fail = |reason: String| ReplayError::Write { path: path.into(), reason };
    let schema = parse_message_type(
        "message trace {
            required int32 dp_rank; required int32 stage; required int32 rank;
            required int64 step; required binary optype (UTF8);
            required double start_ts; required double duration;
            required int32 seq_id; required int32 mc; required int32 mb_id; required int32 gmc;
        }",
    )
    .map_err(|e| fail(e.to_string()))?;
    let file = File::create(path).map_err(|e| fail(e.to_string()))?;
    let mut writer =
        SerializedFileWriter::new(file, Arc::new(schema), Arc::new(WriterProperties::builder().build()))
            .map_err(|e| fail(e.to_string()))?;
    let mut rg = writer.next_row_group().map_err(|e| fail(e.to_string()))?;
    let i32s = |f: &dyn Fn(&Op) -> i64| -> Vec<i32> { ops.iter().map(|o| f(o) as i32).collect() };
    let mut col_no = 0;
    while let Some(mut col) = rg.next_column().map_err(|e| fail(e.to_string()))? {
        let r = match col_no {
            0 => col.typed::<Int32Type>().write_batch(&i32s(&|o| o.dp_rank.into()), None, None),
            1 => col.typed::<Int32Type>().write_batch(&i32s(&|o| o.stage.into()), None, None),
            2 => col.typed::<Int32Type>().write_batch(&i32s(&|o| o.rank.into()), None, None),
            3 => col.typed::<Int64Type>().write_batch(
                &ops.iter().map(|o| o.step).collect::<Vec<_>>(),
                None,
                None,
            ),
            4 => col.typed::<ByteArrayType>().write_batch(
                &ops.iter().map(|o| ByteArray::from(o.kind.name())).collect::<Vec<_>>(),
                None,
                None,
            ),
            5 => col.typed::<DoubleType>().write_batch(
                &ops.iter().map(|o| o.start).collect::<Vec<_>>(),
                None,
                None,
            ),
            6 => col.typed::<DoubleType>().write_batch(
                &ops.iter().map(|o| o.duration).collect::<Vec<_>>(),
                None,
                None,
            ),
            7 => col.typed::<Int32Type>().write_batch(&i32s(&|o| o.seq), None, None),
            8 => col.typed::<Int32Type>().write_batch(&i32s(&|o| o.mc), None, None),
            9 => col.typed::<Int32Type>().write_batch(&i32s(&|_| -1), None, None),
            _ => col.typed::<Int32Type>().write_batch(&i32s(&|o| o.gmc), None, None),
        };
        r.map_err(|e| fail(e.to_string()))?;
        col.close().map_err(|e| fail(e.to_string()))?;
        col_no += 1;
    }
    rg.close().map_err(|e| fail(e.to_string()))?;
    writer.close().map_err(|e| fail(e.to_string()))?;
    Ok(())
}
