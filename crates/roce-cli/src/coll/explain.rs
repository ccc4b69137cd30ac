//! `--explain`: the cost model's table for the sweep.

use roce_coll::OpKind;

use super::args::CollArgs;
use super::Error;

pub fn table(op: OpKind, n: usize, sizes: &[u64], a: &CollArgs) -> Result<String, Error> {
    let _ = (op, n, sizes, a);
    Err(Error("--explain: the cost model has no table yet".into()))
}
