//! Integer-valued inputs (so float sums are exact whatever the order, as
//! nccl-tests does) and a plain model of every collective's result.

#![allow(dead_code)]

use half::{bf16, f16};
use roce_coll::testkit::{Cluster, NetConfig, RankBuffers};
use roce_coll::{Algo, Config, DataType, Error, Layout, OpDesc, OpKind, RedOp};

/// Input element `i` of rank `r`, chosen so every reduction is exact in
/// every type for up to 9 ranks (sums <= 36, products <= 2^9).
pub fn value(op: RedOp, r: usize, i: usize) -> i64 {
    match op {
        RedOp::Sum | RedOp::Avg => ((r + 2 * i) % 5) as i64,
        RedOp::Prod => 1 + ((r + i) % 3 == 0) as i64,
        RedOp::Min | RedOp::Max => ((r * 7 + i * 3) % 11) as i64,
    }
}

/// Input of a call that does not reduce.
pub fn plain(r: usize, i: usize) -> i64 {
    ((r * 31 + i * 7) % 97) as i64
}

pub fn enc(dt: DataType, v: i64, out: &mut Vec<u8>) {
    match dt {
        DataType::F32 => out.extend((v as f32).to_ne_bytes()),
        DataType::F64 => out.extend((v as f64).to_ne_bytes()),
        DataType::F16 => out.extend(f16::from_f32(v as f32).to_bits().to_ne_bytes()),
        DataType::Bf16 => out.extend(bf16::from_f32(v as f32).to_bits().to_ne_bytes()),
        DataType::I32 => out.extend((v as i32).to_ne_bytes()),
        DataType::I64 => out.extend(v.to_ne_bytes()),
        DataType::U8 => out.push(v as u8),
    }
}

fn enc_avg(dt: DataType, sum: i64, n: usize, out: &mut Vec<u8>) {
    let q = sum as f32 / n as f32;
    match dt {
        DataType::F32 => out.extend(q.to_ne_bytes()),
        DataType::F64 => out.extend((sum as f64 / n as f64).to_ne_bytes()),
        DataType::F16 => out.extend(f16::from_f32(q).to_bits().to_ne_bytes()),
        DataType::Bf16 => out.extend(bf16::from_f32(q).to_bits().to_ne_bytes()),
        _ => enc(dt, sum / n as i64, out),
    }
}

/// The reduction over ranks of element `i`'s inputs, encoded.
fn reduced(d: &OpDesc, n: usize, i: usize, out: &mut Vec<u8>) {
    let vals = (0..n).map(|r| value(d.redop, r, i));
    let wrap = |v: i64| match d.dtype {
        DataType::U8 => v as u8 as i64,
        DataType::I32 => v as i32 as i64,
        _ => v,
    };
    match d.redop {
        RedOp::Sum => enc(d.dtype, wrap(vals.sum()), out),
        RedOp::Prod => enc(d.dtype, wrap(vals.product()), out),
        RedOp::Min => enc(d.dtype, vals.min().unwrap(), out),
        RedOp::Max => enc(d.dtype, vals.max().unwrap(), out),
        RedOp::Avg => enc_avg(d.dtype, vals.sum(), n, out),
    }
}

/// Rank `r`'s input: the send buffer (out-of-place) or the single buffer
/// (in-place; for all-gather its own block filled, the rest junk).
pub fn input(d: &OpDesc, n: usize, r: usize, inplace: bool) -> RankBuffers {
    let c = d.count;
    let mut send = Vec::new();
    let elems = d.send_bytes(n) / d.dtype.size();
    for i in 0..elems {
        let v = if d.op.reduces() { value(d.redop, r, i) } else { plain(r, i) };
        enc(d.dtype, v, &mut send);
    }
    let junk = |len: usize| (0..len).map(|k| (k * 13 + r + 1) as u8).collect::<Vec<u8>>();
    if !inplace {
        return RankBuffers::OutOfPlace { send, recv: junk(d.recv_bytes(n)) };
    }
    let mut buf = junk(d.inplace_bytes(n));
    match d.op {
        OpKind::AllGather => {
            let cb = c * d.dtype.size();
            buf[r * cb..(r + 1) * cb].copy_from_slice(&send);
        }
        _ => buf[..send.len()].copy_from_slice(&send),
    }
    RankBuffers::InPlace(buf)
}

/// What rank `r`'s result must be, and where in its result buffer; `None`
/// when the call leaves it undefined (reduce on a non-root).
pub fn expected(d: &OpDesc, n: usize, r: usize, inplace: bool) -> Option<(usize, Vec<u8>)> {
    let c = d.count;
    let es = d.dtype.size();
    let mut out = Vec::new();
    match d.op {
        OpKind::AllReduce => (0..c).for_each(|i| reduced(d, n, i, &mut out)),
        OpKind::ReduceScatter => {
            (0..c).for_each(|i| reduced(d, n, r * c + i, &mut out));
            return Some((if inplace { r * c * es } else { 0 }, out));
        }
        OpKind::AllGather => (0..n).for_each(|b| (0..c).for_each(|i| enc(d.dtype, plain(b, i), &mut out))),
        OpKind::Broadcast => (0..c).for_each(|i| enc(d.dtype, plain(d.root, i), &mut out)),
        OpKind::Reduce if r == d.root => (0..c).for_each(|i| reduced(d, n, i, &mut out)),
        OpKind::Reduce => return None,
        OpKind::AllToAll => {
            (0..n).for_each(|j| (0..c).for_each(|i| enc(d.dtype, plain(j, r * c + i), &mut out)))
        }
        OpKind::Barrier => {}
    }
    Some((0, out))
}

pub fn layout(variant: usize) -> Layout {
    [
        Layout { channels: 1, slots: 1, slot_bytes: 128 },
        Layout { channels: 2, slots: 2, slot_bytes: 192 },
        Layout { channels: 3, slots: 4, slot_bytes: 1024 },
        Layout { channels: 1, slots: 3, slot_bytes: 4096 },
    ][variant % 4]
}

/// Runs `d` on `n` ranks over the in-memory net and checks every rank's
/// result against the model. Returns an error message on the first
/// difference.
pub fn check(d: OpDesc, n: usize, inplace: bool, lay: Layout, seed: u64) -> Result<(), String> {
    let mut cfg = Config::new(0, n);
    cfg.layout = lay;
    cfg.timeout_ns = 10_000_000_000;
    let mut cl = Cluster::new(n, &cfg, NetConfig::new(seed)).map_err(|e| e.to_string())?;
    let mut bufs: Vec<RankBuffers> = (0..n).map(|r| input(&d, n, r, inplace)).collect();
    let res = cl.run(&vec![d; n], &mut bufs);
    let ctx = format!(
        "{} {} {} {} count={} n={n} inplace={inplace} root={} {lay:?} seed={seed}",
        d.op, d.algo, d.dtype, d.redop, d.count, d.root
    );
    for (r, res) in res.iter().enumerate() {
        match res {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(format!("{ctx}: rank {r} failed: {e}")),
            None => return Err(format!("{ctx}: rank {r} did not finish")),
        }
        if let Some((at, want)) = expected(&d, n, r, inplace) {
            let got = &bufs[r].result()[at..at + want.len()];
            if got != want.as_slice() {
                let es = d.dtype.size();
                let k = got.chunks(es).zip(want.chunks(es)).position(|(a, b)| a != b).unwrap();
                return Err(format!(
                    "{ctx}: rank {r} element {k}: got {:?}, want {:?}",
                    &got[k * es..(k + 1) * es],
                    &want[k * es..(k + 1) * es]
                ));
            }
        }
    }
    Ok(())
}

pub fn run_err(descs: &[OpDesc], n: usize, net: NetConfig) -> Vec<Option<Result<(), Error>>> {
    let mut cfg = Config::new(0, n);
    cfg.layout = layout(1);
    cfg.timeout_ns = 1_000_000_000;
    let mut cl = Cluster::new(n, &cfg, net).unwrap();
    let mut bufs: Vec<RankBuffers> = (0..n).map(|r| input(&descs[r], n, r, false)).collect();
    cl.run(descs, &mut bufs)
}

pub fn algos(op: OpKind) -> Vec<Algo> {
    let mut v = Algo::candidates(op);
    v.push(Algo::Auto);
    v
}
