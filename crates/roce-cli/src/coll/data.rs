//! Test data and its check: integer-valued inputs (as nccl-tests uses),
//! small enough that every reduction is exact in every type (bf16 holds
//! integers exactly up to 256, u8 up to 255), and the expected result of
//! every operation computed from them.

use roce_coll::{DataType, OpKind, RedOp};

/// Input element `i` of rank `r` (its global index in the send buffer).
pub fn value(redop: RedOp, r: usize, i: usize) -> f64 {
    match redop {
        // Products stay at most 2^n.
        RedOp::Prod => 1.0 + ((i * 5 + r * 3) % 7 == 0) as u8 as f64,
        // Sums of up to 16 ranks stay below 256.
        _ => ((i * 7 + r * 13) % 16) as f64,
    }
}

/// Stores `v` as element `i` of a buffer of `dt`.
pub fn put(dt: DataType, buf: &mut [u8], i: usize, v: f64) {
    let s = dt.size();
    let b = &mut buf[i * s..(i + 1) * s];
    match dt {
        DataType::F32 => b.copy_from_slice(&(v as f32).to_le_bytes()),
        DataType::F64 => b.copy_from_slice(&v.to_le_bytes()),
        DataType::F16 => b.copy_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        DataType::Bf16 => b.copy_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
        DataType::I32 => b.copy_from_slice(&(v as i32).to_le_bytes()),
        DataType::I64 => b.copy_from_slice(&(v as i64).to_le_bytes()),
        DataType::U8 => b[0] = (v as i64).rem_euclid(256) as u8,
    }
}

/// Element `i` of a buffer of `dt`.
pub fn get(dt: DataType, buf: &[u8], i: usize) -> f64 {
    let s = dt.size();
    let b = &buf[i * s..(i + 1) * s];
    match dt {
        DataType::F32 => f32::from_le_bytes(b.try_into().expect("4")) as f64,
        DataType::F64 => f64::from_le_bytes(b.try_into().expect("8")),
        DataType::F16 => half::f16::from_le_bytes(b.try_into().expect("2")).to_f64(),
        DataType::Bf16 => half::bf16::from_le_bytes(b.try_into().expect("2")).to_f64(),
        DataType::I32 => i32::from_le_bytes(b.try_into().expect("4")) as f64,
        DataType::I64 => i64::from_le_bytes(b.try_into().expect("8")) as f64,
        DataType::U8 => b[0] as f64,
    }
}

/// The reduction of element `i` (global index) over ranks `0..n`, as the
/// type holds it.
pub fn reduced(dt: DataType, redop: RedOp, n: usize, i: usize) -> f64 {
    let vals = (0..n).map(|r| value(redop, r, i));
    let v = match redop {
        RedOp::Sum => vals.sum(),
        RedOp::Prod => vals.product(),
        RedOp::Min => vals.fold(f64::INFINITY, f64::min),
        RedOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
        RedOp::Avg => {
            let s: f64 = vals.sum();
            if dt.is_integer() {
                (s / n as f64).trunc()
            } else {
                s / n as f64
            }
        }
    };
    match dt {
        DataType::U8 => (v as i64).rem_euclid(256) as f64,
        _ => v,
    }
}

/// Whether `got` is `want` for the type: exact, but for `avg` of floats
/// (a division) within a few units of the type's last place.
fn same(dt: DataType, redop: RedOp, got: f64, want: f64) -> bool {
    if redop != RedOp::Avg || dt.is_integer() {
        return got == want;
    }
    let eps = match dt {
        DataType::F16 => 1.0 / 1024.0,
        DataType::Bf16 => 1.0 / 128.0,
        DataType::F32 => f32::EPSILON as f64,
        _ => f64::EPSILON,
    };
    (got - want).abs() <= 2.0 * eps * want.abs().max(1.0)
}

/// What one rank's buffers are for one call (element counts).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub op: OpKind,
    pub dt: DataType,
    pub redop: RedOp,
    /// The call's count (NCCL's convention, `OpDesc::count`).
    pub count: usize,
    pub root: usize,
    pub rank: usize,
    pub n: usize,
}

impl Shape {
    /// Elements of the send buffer.
    pub fn send_elems(&self) -> usize {
        match self.op {
            OpKind::ReduceScatter | OpKind::AllToAll => self.count * self.n,
            OpKind::Barrier => 0,
            _ => self.count,
        }
    }
    /// Elements of the receive buffer.
    pub fn recv_elems(&self) -> usize {
        match self.op {
            OpKind::AllGather | OpKind::AllToAll => self.count * self.n,
            OpKind::Barrier => 0,
            _ => self.count,
        }
    }
    /// Where the input starts in an in-place buffer (elements).
    pub fn inplace_input_at(&self) -> usize {
        match self.op {
            OpKind::AllGather => self.rank * self.count,
            _ => 0,
        }
    }
    /// Where the result starts in an in-place buffer (elements).
    pub fn inplace_result_at(&self) -> usize {
        match self.op {
            OpKind::ReduceScatter => self.rank * self.count,
            _ => 0,
        }
    }

    /// Fills `buf` (from element `at`) with this rank's input.
    pub fn fill_input(&self, buf: &mut [u8], at: usize) {
        for i in 0..self.send_elems() {
            put(self.dt, buf, at + i, value(self.redop, self.rank, i));
        }
    }

    /// The expected result element `j` of this rank's output, `None` where
    /// the operation defines none (reduce on a non-root rank).
    pub fn expected(&self, j: usize) -> Option<f64> {
        let (n, c, r) = (self.n, self.count, self.rank);
        match self.op {
            OpKind::AllReduce => Some(reduced(self.dt, self.redop, n, j)),
            OpKind::Reduce => (r == self.root).then(|| reduced(self.dt, self.redop, n, j)),
            OpKind::ReduceScatter => Some(reduced(self.dt, self.redop, n, r * c + j)),
            OpKind::AllGather => Some(value(self.redop, j / c, j % c)),
            OpKind::Broadcast => Some(value(self.redop, self.root, j)),
            OpKind::AllToAll => Some(value(self.redop, j / c, r * c + j % c)),
            OpKind::Barrier => None,
        }
    }

    /// Elements of the output (from element `at` of `buf`) that differ
    /// from the expected result.
    pub fn count_wrong(&self, buf: &[u8], at: usize) -> u64 {
        let mut wrong = 0;
        for j in 0..self.recv_elems() {
            if let Some(want) = self.expected(j) {
                let want = {
                    // The expected value as the type stores it.
                    let mut tmp = [0u8; 8];
                    put(self.dt, &mut tmp, 0, want);
                    get(self.dt, &tmp, 0)
                };
                if !same(self.dt, self.redop, get(self.dt, buf, at + j), want) {
                    wrong += 1;
                }
            }
        }
        wrong
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_the_values_exactly() {
        for dt in DataType::ALL {
            let mut b = vec![0u8; dt.size() * 4];
            for (i, v) in [0.0, 15.0, 240.0, 128.0].iter().enumerate() {
                put(dt, &mut b, i, *v);
                assert_eq!(get(dt, &b, i), *v, "{dt}");
            }
        }
    }

    /// A buffer holding the expected result has no wrong element; one
    /// changed element is counted.
    #[test]
    fn the_check_counts_what_differs() {
        let s = Shape {
            op: OpKind::AllReduce,
            dt: DataType::Bf16,
            redop: RedOp::Sum,
            count: 100,
            root: 0,
            rank: 1,
            n: 8,
        };
        let mut b = vec![0u8; 200];
        for j in 0..100 {
            put(s.dt, &mut b, j, s.expected(j).unwrap());
        }
        assert_eq!(s.count_wrong(&b, 0), 0);
        put(s.dt, &mut b, 7, 999.0);
        assert_eq!(s.count_wrong(&b, 0), 1);
    }
}
