//! The engine's CPU cost per byte, without a network: `n` ranks in this
//! one thread over the in-memory transport (no delay), one all-reduce per
//! algorithm, against memcpy of the same bytes measured in the same run.
//!
//! `cargo run --release -p roce-coll --example engine_bench [ranks] [MiB]`
//!
//! All ranks share one core here, so `rate` = n x bytes / wall time is the
//! bytes of user buffer the engines get through per second of one core,
//! including the in-memory transport's own copies (one allocation and two
//! copies per message); `ratio` is that over memcpy's rate. The second of
//! two calls is timed (the first faults buffers and slots in). A real rank has its own core and pays only its share.

use std::time::Instant;

use roce_coll::testkit::{Cluster, NetConfig, RankBuffers};
use roce_coll::{Algo, Config, DataType, Layout, OpDesc, OpKind, RedOp};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(4);
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(32);
    let bytes = mib << 20;
    let count = bytes / 4;
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in
    let t = Instant::now();
    for _ in 0..4 {
        dst.copy_from_slice(std::hint::black_box(&src));
    }
    let memcpy = 4.0 * bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!("# {n} ranks in one thread, {mib} MiB f32 sum all-reduce, memcpy {memcpy:.2} GB/s");
    println!("{:<20} {:>10} {:>9} {:>7}", "algorithm", "wall ms", "rate GB/s", "ratio");
    for algo in [Algo::Ring, Algo::Rabenseifner, Algo::Tree, Algo::RecursiveDoubling] {
        let mut cfg = Config::new(0, n);
        cfg.layout = Layout { channels: 2, slots: 4, slot_bytes: 256 << 10 };
        let mut net = NetConfig::new(1);
        net.min_delay_ns = 0;
        net.max_delay_ns = 0;
        let mut cl = Cluster::new(n, &cfg, net).expect("cluster");
        let d = OpDesc::new(OpKind::AllReduce, DataType::F32, count).redop(RedOp::Sum).algo(algo);
        let mut bufs: Vec<RankBuffers> = (0..n).map(|_| RankBuffers::InPlace(vec![0u8; bytes])).collect();
        // a first call faults the buffers and slots in; the second is timed
        let res = cl.run(&vec![d; n], &mut bufs);
        assert!(res.iter().all(|r| matches!(r, Some(Ok(())))), "{res:?}");
        let t = Instant::now();
        let res = cl.run(&vec![d; n], &mut bufs);
        let secs = t.elapsed().as_secs_f64();
        assert!(res.iter().all(|r| matches!(r, Some(Ok(())))), "{res:?}");
        let rate = (n * bytes) as f64 / secs / 1e9;
        println!("{:<20} {:>10.1} {:>9.2} {:>7.2}", algo.name(), secs * 1e3, rate, rate / memcpy);
    }
}
