//! Reduction throughput against memcpy, measured in the same run.
//!
//! `cargo run --release -p roce-coll --example reduce_bench [MiB]`
//!
//! For each kernel, `dst = dst op src` over a buffer of MiB (default 16)
//! is timed as the best of several passes; GB/s counts the bytes of `dst`
//! (one read of each input, one write), the same convention as the memcpy
//! baseline (`dst.copy_from_slice(src)`: one read, one write). The ratio
//! is kernel / memcpy: 1.0 means the reduction runs at copy speed.

use std::hint::black_box;
use std::time::Instant;

use roce_coll::reduce::reduce;
use roce_coll::{DataType, RedOp};

fn best_of(passes: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..passes {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn main() {
    let mib: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let len = mib << 20;
    let src: Vec<u8> = (0..len).map(|i| (i % 7) as u8 * 16).collect();
    let mut dst: Vec<u8> = (0..len).map(|i| (i % 5) as u8 * 16).collect();
    let passes = 15;
    let gbs = |secs: f64| len as f64 / secs / 1e9;
    let copy = gbs(best_of(passes, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    }));
    println!("# buffer {mib} MiB, best of {passes} passes");
    println!("{:<22} {:>9} {:>7}", "kernel", "GB/s", "ratio");
    println!("{:<22} {:>9.2} {:>7.2}", "memcpy", copy, 1.0);
    for (dt, op) in [
        (DataType::F32, RedOp::Sum),
        (DataType::Bf16, RedOp::Sum),
        (DataType::F16, RedOp::Sum),
        (DataType::F64, RedOp::Sum),
        (DataType::I32, RedOp::Sum),
        (DataType::F32, RedOp::Max),
    ] {
        let r = gbs(best_of(passes, || {
            reduce(dt, op, &mut dst, black_box(&src));
            black_box(&mut dst);
        }));
        println!("{:<22} {:>9.2} {:>7.2}", format!("{} {}", dt, op), r, r / copy);
    }
}
