//! `--explain`: the cost model's predicted time of every algorithm that
//! runs the operation, at every size of the sweep, and its pick (what
//! `--algo auto` runs). One `# explain` line per size, machine-readable
//! (`scripts/coll-algos.sh` reads them).

use roce_coll::cost::{self, Params};
use roce_coll::{Algo, DataType, OpKind};

use super::args::CollArgs;
use super::Error;

/// Bytes per rank of a call at sweep size `size` (what the model takes:
/// `count * size(type)`).
fn per_rank_bytes(op: OpKind, size: u64, n: usize, dt: DataType) -> usize {
    let elems = size as usize / dt.size();
    match op {
        OpKind::ReduceScatter | OpKind::AllGather | OpKind::AllToAll => elems / n * dt.size(),
        _ => elems * dt.size(),
    }
}

pub fn table(op: OpKind, n: usize, sizes: &[u64], a: &CollArgs) -> Result<String, Error> {
    let p: Params = a.cost_params();
    let dt = *a.dtypes()?.first().unwrap_or(&DataType::F32);
    let algos = Algo::candidates(op);
    let mut s = format!(
        "# Cost model: {op} on {n} ranks, alpha {:.1} us per step, link {:.3} GB/s, reduce {:.2} GB/s, chunk {} B;\n\
         # {} ranks per host on {} cores (0: a core per rank), wake-up {:.1} us;\n\
         # predicted time (us) per algorithm, and the pick of --algo auto:\n#\n# explain {:>10}",
        p.alpha_ns / 1e3,
        p.link_bytes_per_s / 1e9,
        p.reduce_bytes_per_s / 1e9,
        p.chunk_bytes,
        p.ranks_per_host,
        p.host_cores,
        p.wake_ns / 1e3,
        "size(B)"
    );
    for al in &algos {
        s += &format!(" {:>19}", al.name());
    }
    s += "  pick\n";
    for &size in sizes {
        let bytes = per_rank_bytes(op, size, n, dt);
        s += &format!("# explain {size:>10}");
        for al in &algos {
            match cost::predict(op, *al, bytes, n, &p) {
                Some(t) => s += &format!(" {:>19.1}", t / 1e3),
                None => s += &format!(" {:>19}", "-"),
            }
        }
        s += &format!("  pick={}\n", cost::choose(op, bytes, n, &p).name());
    }
    Ok(s)
}
