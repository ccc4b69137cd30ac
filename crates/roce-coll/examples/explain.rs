//! The cost model's predictions and pick per size and rank count, the
//! table `--explain` draws from.
//!
//! `cargo run -p roce-coll --example explain [op] [alpha_us] [link_GBps]`

use roce_coll::cost::{choose, predict, Params};
use roce_coll::{Algo, OpKind};

fn main() {
    let mut args = std::env::args().skip(1);
    let op: OpKind = args.next().map(|s| s.parse().expect("operation")).unwrap_or(OpKind::AllReduce);
    let mut p = Params::default();
    if let Some(a) = args.next() {
        p.alpha_ns = a.parse::<f64>().expect("alpha in us") * 1e3;
    }
    if let Some(b) = args.next() {
        p.link_bytes_per_s = b.parse::<f64>().expect("link GB/s") * 1e9;
    }
    let algos = Algo::candidates(op);
    println!(
        "# {op}: predicted time (us); alpha {:.1} us, link {:.2} GB/s, reduce {:.2} GB/s, chunk {} B",
        p.alpha_ns / 1e3,
        p.link_bytes_per_s / 1e9,
        p.reduce_bytes_per_s / 1e9,
        p.chunk_bytes
    );
    print!("{:>4} {:>10}", "n", "bytes");
    for a in &algos {
        print!(" {:>18}", a.name());
    }
    println!("  pick");
    for n in [2, 3, 4, 8, 64, 1024] {
        let mut b = 8usize;
        while b <= 1 << 30 {
            print!("{n:>4} {b:>10}");
            for a in &algos {
                print!(" {:>18.1}", predict(op, *a, b, n, &p).unwrap() / 1e3);
            }
            println!("  {}", choose(op, b, n, &p));
            b *= 16;
        }
    }
}
