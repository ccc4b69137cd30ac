//! Shared counters: several QPs (on several hosts) FETCH_ADD distinct
//! amounts to one word. Linearizable, exactly-once execution means the
//! originals they got back, sorted, form the chain init, init + a1,
//! init + a1 + a2, ... and the word ends at the last original plus its
//! amount: a lost, repeated or torn add breaks the chain.

use super::completions::executed;
use super::findings::{FailureKind, Findings};
use super::shadow::Shadow;
use super::Ctx;
use crate::workload::OpKind;

pub fn check_counters(ctx: &Ctx<'_>, shadow: &mut Shadow, f: &mut Findings) {
    let plan = ctx.plan;
    let read = |seg: &crate::workload::Seg| {
        let o = plan.buf_off(seg);
        u64::from_ne_bytes(ctx.actual[seg.mr.host][o..o + 8].try_into().expect("8 bytes"))
    };
    for (c, counter) in plan.counters.iter().enumerate() {
        // (original returned, amount, landing segment)
        let mut ops: Vec<(u64, u64, crate::workload::Seg)> = Vec::new();
        for s in &plan.streams {
            for op in executed(s) {
                if let OpKind::FetchAdd { add, counter: Some(cc), .. } = op.kind {
                    if cc == c {
                        ops.push((read(&op.sges[0]), add, op.sges[0]));
                    }
                }
            }
        }
        ops.sort_by_key(|o| o.0);
        let fin = read(&counter.word);
        let mut expect = counter.init;
        let mut broken = None;
        for (i, &(orig, add, _)) in ops.iter().enumerate() {
            if orig != expect {
                broken = Some(i);
                break;
            }
            expect = expect.wrapping_add(add);
        }
        if broken.is_some() || fin != expect {
            let chain: Vec<String> = ops.iter().map(|o| format!("{:#x}+{:#x}", o.0, o.1)).collect();
            f.fail(
                FailureKind::Atomic,
                format!(
                    "counter {c} (host {}): init {:#x}, final {fin:#x}, {} FETCH_ADDs do not chain (break at #{}): [{}]",
                    counter.word.mr.host,
                    counter.init,
                    ops.len(),
                    broken.map_or("end".to_string(), |b| b.to_string()),
                    chain.join(", ")
                ),
            );
            continue;
        }
        // The chain vouches for the originals; the word for its sum.
        for &(orig, _, seg) in &ops {
            shadow.scatter(plan, &[seg], &orig.to_ne_bytes(), None);
        }
        shadow.write(plan, &counter.word, &expect.to_ne_bytes());
    }
}
