//! The reduction kernels: `dst[i] = dst[i] op src[i]` over byte slices.
//!
//! They run on every byte a reduction moves, so each (type, operator) pair
//! is its own monomorphised loop over fixed-size lanes (`chunks_exact` of
//! the element size, `from_ne_bytes`), with no per-element dispatch and no
//! alignment requirement, which LLVM vectorises. bf16 converts through f32
//! with bit operations (widening is a shift; narrowing rounds to nearest
//! even), so it vectorises too; f16 goes through `half`'s slice
//! conversions (F16C when the CPU has it), which are still the slow one.
//! Integer arithmetic wraps (as NCCL's does on overflow).

use crate::types::{DataType, RedOp};

#[inline(always)]
fn zip<const N: usize>(dst: &mut [u8], src: &[u8], f: impl Fn([u8; N], [u8; N]) -> [u8; N]) {
    for (d, s) in dst.chunks_exact_mut(N).zip(src.chunks_exact(N)) {
        let r = f((*d).try_into().unwrap(), s.try_into().unwrap());
        d.copy_from_slice(&r);
    }
}

#[inline(always)]
fn map<const N: usize>(dst: &mut [u8], f: impl Fn([u8; N]) -> [u8; N]) {
    for d in dst.chunks_exact_mut(N) {
        let r = f((*d).try_into().unwrap());
        d.copy_from_slice(&r);
    }
}

/// bf16 -> f32: the bf16 bits are the high half of the f32.
#[inline(always)]
pub(crate) fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 -> bf16, rounding to nearest, ties to even; NaN stays a (quiet) NaN.
#[inline(always)]
pub(crate) fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    let nan = ((b >> 16) as u16) | 0x0040;
    if x.is_nan() {
        nan
    } else {
        rounded
    }
}

macro_rules! num_ops {
    ($dst:expr, $src:expr, $op:expr, $t:ty, $n:literal, $add:expr, $mul:expr) => {{
        let rd = |b: [u8; $n]| <$t>::from_ne_bytes(b);
        match $op {
            RedOp::Sum | RedOp::Avg => zip::<$n>($dst, $src, |a, b| ($add)(rd(a), rd(b)).to_ne_bytes()),
            RedOp::Prod => zip::<$n>($dst, $src, |a, b| ($mul)(rd(a), rd(b)).to_ne_bytes()),
            RedOp::Min => zip::<$n>($dst, $src, |a, b| {
                let (x, y) = (rd(a), rd(b));
                (if y < x { y } else { x }).to_ne_bytes()
            }),
            RedOp::Max => zip::<$n>($dst, $src, |a, b| {
                let (x, y) = (rd(a), rd(b));
                (if y > x { y } else { x }).to_ne_bytes()
            }),
        }
    }};
}

/// f16 in blocks of 64 through `half`'s slice conversions, which use the
/// F16C instructions when the CPU has them (detected at run time) and our
/// bit-level conversions are the fallback's equal (tested).
#[inline(always)]
fn f16_blocks(dst: &mut [u8], src: &[u8], f: impl Fn(f32, f32) -> f32) {
    use half::slice::HalfFloatSliceExt;
    const B: usize = 64;
    let (mut h, mut a, mut b) = ([half::f16::ZERO; B], [0f32; B], [0f32; B]);
    for (d, s) in dst.chunks_mut(2 * B).zip(src.chunks(2 * B)) {
        let k = d.len() / 2;
        for (x, c) in h.iter_mut().zip(d.chunks_exact(2)) {
            *x = half::f16::from_bits(u16::from_ne_bytes([c[0], c[1]]));
        }
        h[..k].convert_to_f32_slice(&mut a[..k]);
        for (x, c) in h.iter_mut().zip(s.chunks_exact(2)) {
            *x = half::f16::from_bits(u16::from_ne_bytes([c[0], c[1]]));
        }
        h[..k].convert_to_f32_slice(&mut b[..k]);
        for (x, y) in a.iter_mut().zip(b.iter()) {
            *x = f(*x, *y);
        }
        h[..k].convert_from_f32_slice(&a[..k]);
        for (c, x) in d.chunks_exact_mut(2).zip(h[..k].iter()) {
            c.copy_from_slice(&x.to_bits().to_ne_bytes());
        }
    }
}

macro_rules! half_ops {
    ($dst:expr, $src:expr, $op:expr, $to:expr, $from:expr) => {{
        let rd = |b: [u8; 2]| ($to)(u16::from_ne_bytes(b));
        let wr = |x: f32| ($from)(x).to_ne_bytes();
        match $op {
            RedOp::Sum | RedOp::Avg => zip::<2>($dst, $src, |a, b| wr(rd(a) + rd(b))),
            RedOp::Prod => zip::<2>($dst, $src, |a, b| wr(rd(a) * rd(b))),
            RedOp::Min => zip::<2>($dst, $src, |a, b| {
                let (x, y) = (rd(a), rd(b));
                wr(if y < x { y } else { x })
            }),
            RedOp::Max => zip::<2>($dst, $src, |a, b| {
                let (x, y) = (rd(a), rd(b));
                wr(if y > x { y } else { x })
            }),
        }
    }};
}

/// IEEE binary16 -> f32, exact (after F. Giesen's `half_to_float_fast`),
/// for the `avg` division; the reduction loop uses [`f16_blocks`].
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let shifted_exp = 0x7c00u32 << 13;
    let o = (h & 0x7fff) << 13;
    let exp = shifted_exp & o;
    let normal = o + ((127 - 15) << 23);
    let infnan = normal + ((128 - 16) << 23);
    // zero / subnormal: renormalise through a float subtraction
    let magic = f32::from_bits(113 << 23);
    let sub = (f32::from_bits(normal + (1 << 23)) - magic).to_bits();
    let bits = if exp == shifted_exp {
        infnan
    } else if exp == 0 {
        sub
    } else {
        normal
    };
    f32::from_bits(bits | ((h & 0x8000) << 16))
}

/// f32 -> IEEE binary16, round to nearest even; overflow to infinity, NaN
/// to the quiet NaN 0x7e00 (after F. Giesen's `float_to_half_fast3_rtne`).
#[inline(always)]
pub(crate) fn f32_to_f16(f: f32) -> u16 {
    const INF32: u32 = 255 << 23;
    const MAX16: u32 = (127 + 16) << 23;
    const DENORM_MAGIC: u32 = ((127 - 15) + (23 - 10) + 1) << 23;
    let b = f.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = b & 0x7fff_ffff;
    let over = if a > INF32 { 0x7e00 } else { 0x7c00 };
    let den = (f32::from_bits(a) + f32::from_bits(DENORM_MAGIC)).to_bits().wrapping_sub(DENORM_MAGIC) as u16;
    let mant_odd = (a >> 13) & 1;
    let norm = (a.wrapping_add((15u32.wrapping_sub(127)) << 23).wrapping_add(0xfff).wrapping_add(mant_odd)
        >> 13) as u16;
    let o = if a >= MAX16 {
        over
    } else if a < (113 << 23) {
        den
    } else {
        norm
    };
    o | sign
}

/// `dst = dst op src`, element-wise. `Avg` accumulates a sum (the division
/// is [`finish_avg`], once, on the final sum). Both slices must have the
/// same length, a multiple of the element size.
pub fn reduce(dtype: DataType, op: RedOp, dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    debug_assert_eq!(dst.len() % dtype.size(), 0);
    match dtype {
        DataType::F32 => num_ops!(dst, src, op, f32, 4, |a: f32, b: f32| a + b, |a: f32, b: f32| a * b),
        DataType::F64 => num_ops!(dst, src, op, f64, 8, |a: f64, b: f64| a + b, |a: f64, b: f64| a * b),
        DataType::I32 => {
            num_ops!(dst, src, op, i32, 4, |a: i32, b: i32| a.wrapping_add(b), |a: i32, b: i32| a
                .wrapping_mul(b))
        }
        DataType::I64 => {
            num_ops!(dst, src, op, i64, 8, |a: i64, b: i64| a.wrapping_add(b), |a: i64, b: i64| a
                .wrapping_mul(b))
        }
        DataType::U8 => {
            num_ops!(dst, src, op, u8, 1, |a: u8, b: u8| a.wrapping_add(b), |a: u8, b: u8| a.wrapping_mul(b))
        }
        DataType::Bf16 => half_ops!(dst, src, op, bf16_to_f32, f32_to_bf16),
        DataType::F16 => match op {
            RedOp::Sum | RedOp::Avg => f16_blocks(dst, src, |a, b| a + b),
            RedOp::Prod => f16_blocks(dst, src, |a, b| a * b),
            RedOp::Min => f16_blocks(dst, src, |a, b| if b < a { b } else { a }),
            RedOp::Max => f16_blocks(dst, src, |a, b| if b > a { b } else { a }),
        },
    }
}

/// The `Avg` division: every element of `buf` (a final sum over `n` ranks)
/// divided by `n`. Integers truncate toward zero (NCCL's `SumPostDiv`);
/// floats divide once, rounding once.
pub fn finish_avg(dtype: DataType, n: usize, buf: &mut [u8]) {
    match dtype {
        DataType::F32 => {
            let d = n as f32;
            map::<4>(buf, |a| (f32::from_ne_bytes(a) / d).to_ne_bytes())
        }
        DataType::F64 => {
            let d = n as f64;
            map::<8>(buf, |a| (f64::from_ne_bytes(a) / d).to_ne_bytes())
        }
        DataType::I32 => {
            let d = n as i32;
            map::<4>(buf, |a| i32::from_ne_bytes(a).wrapping_div(d).to_ne_bytes())
        }
        DataType::I64 => {
            let d = n as i64;
            map::<8>(buf, |a| i64::from_ne_bytes(a).wrapping_div(d).to_ne_bytes())
        }
        DataType::U8 => {
            let d = n as u8;
            map::<1>(buf, |a| [a[0] / d])
        }
        DataType::Bf16 => {
            let d = n as f32;
            map::<2>(buf, |a| f32_to_bf16(bf16_to_f32(u16::from_ne_bytes(a)) / d).to_ne_bytes())
        }
        DataType::F16 => {
            let d = n as f32;
            map::<2>(buf, |a| f32_to_f16(f16_to_f32(u16::from_ne_bytes(a)) / d).to_ne_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn bf16_rounding_matches_half() {
        let mut x = 0x0001_2345u32;
        for _ in 0..200_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let f = f32::from_bits(x);
            let ours = f32_to_bf16(f);
            let theirs = half::bf16::from_f32(f).to_bits();
            if f.is_nan() {
                assert!(bf16_to_f32(ours).is_nan());
            } else {
                assert_eq!(ours, theirs, "{f:e} ({x:#x})");
            }
        }
    }

    #[test]
    fn f16_conversions_match_half() {
        for h in 0..=u16::MAX {
            let ours = f16_to_f32(h);
            let theirs = f16::from_bits(h).to_f32();
            assert!(ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()), "{h:#x}");
        }
        let mut x = 0x0bad_cafeu32;
        let specials =
            [0.0f32, -0.0, 65504.0, 65519.99, 65520.0, 1e-8, 5.96e-8, 2.98e-8, 6.1e-5, f32::INFINITY];
        for i in 0..400_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let f = if i < specials.len() { specials[i] } else { f32::from_bits(x) };
            let (ours, theirs) = (f32_to_f16(f), f16::from_f32(f).to_bits());
            if f.is_nan() {
                assert!(f16::from_bits(ours).is_nan());
            } else {
                assert_eq!(ours, theirs, "{f:e} ({x:#x})");
            }
        }
    }

    #[test]
    fn every_type_and_op_reduces() {
        for dt in DataType::ALL {
            let es = dt.size();
            let enc = |v: i64| -> Vec<u8> {
                match dt {
                    DataType::F32 => (v as f32).to_ne_bytes().to_vec(),
                    DataType::F64 => (v as f64).to_ne_bytes().to_vec(),
                    DataType::F16 => f16::from_f32(v as f32).to_bits().to_ne_bytes().to_vec(),
                    DataType::Bf16 => half::bf16::from_f32(v as f32).to_bits().to_ne_bytes().to_vec(),
                    DataType::I32 => (v as i32).to_ne_bytes().to_vec(),
                    DataType::I64 => v.to_ne_bytes().to_vec(),
                    DataType::U8 => vec![v as u8],
                }
            };
            let a: Vec<i64> = vec![3, 7, 2, 9, 4];
            let b: Vec<i64> = vec![5, 1, 2, 6, 8];
            for (op, f) in [
                (RedOp::Sum, (|x: i64, y: i64| x + y) as fn(i64, i64) -> i64),
                (RedOp::Prod, |x, y| x * y),
                (RedOp::Min, |x: i64, y: i64| x.min(y)),
                (RedOp::Max, |x: i64, y: i64| x.max(y)),
            ] {
                let mut d: Vec<u8> = a.iter().flat_map(|&v| enc(v)).collect();
                let s: Vec<u8> = b.iter().flat_map(|&v| enc(v)).collect();
                reduce(dt, op, &mut d, &s);
                let want: Vec<u8> = a.iter().zip(&b).flat_map(|(&x, &y)| enc(f(x, y))).collect();
                assert_eq!(d, want, "{dt} {op}");
                assert_eq!(d.len(), 5 * es);
            }
            let mut d: Vec<u8> = [7i64, 8, 9].iter().flat_map(|&v| enc(v)).collect();
            finish_avg(dt, 2, &mut d);
            let want: Vec<u8> = if dt.is_integer() {
                [3i64, 4, 4].iter().flat_map(|&v| enc(v)).collect()
            } else {
                let mut w = Vec::new();
                for v in [3.5f64, 4.0, 4.5] {
                    w.extend(match dt {
                        DataType::F32 => (v as f32).to_ne_bytes().to_vec(),
                        DataType::F64 => v.to_ne_bytes().to_vec(),
                        DataType::F16 => f16::from_f64(v).to_bits().to_ne_bytes().to_vec(),
                        _ => half::bf16::from_f64(v).to_bits().to_ne_bytes().to_vec(),
                    });
                }
                w
            };
            assert_eq!(d, want, "{dt} avg");
        }
    }

    #[test]
    fn signed_avg_truncates_toward_zero() {
        let mut d = (-7i32).to_ne_bytes().to_vec();
        finish_avg(DataType::I32, 2, &mut d);
        assert_eq!(i32::from_ne_bytes(d.try_into().unwrap()), -3);
    }
}
