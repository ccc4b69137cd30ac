//! One rank's sweep: for every type, reduction and size, an out-of-place
//! and an in-place measurement, each: a checked call (`-c`), the warm-up,
//! a barrier, then `-n` iterations of `-m` calls back to back (nccl-tests'
//! timing: time = elapsed / (iters x agg iters) on each rank, then averaged
//! over ranks, `-a`; `-z 1` adds a timed barrier after each call, `-z 3` an
//! untimed one after each iteration). Each iteration is also timed alone
//! (per call); `-I` reports, per iteration, the maximum over ranks. Results travel to rank 0 through the store, outside the timed
//! loop, and rank 0 prints.

use std::io::Write;
use std::time::Instant;

use roce_coll::launch::Placement;
use roce_coll::{Buffers, Communicator, OpDesc, OpKind};
use serde_json::{json, Value};

use super::args::CollArgs;
use super::data::Shape;
use super::format;
use super::Error;

/// One half of a row, on one rank.
struct Half {
    time_us: f64,
    per_iter_us: Vec<f64>,
    wrong: u64,
}

impl Half {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + 8 * self.per_iter_us.len());
        b.extend_from_slice(&self.time_us.to_le_bytes());
        b.extend_from_slice(&self.wrong.to_le_bytes());
        for t in &self.per_iter_us {
            b.extend_from_slice(&t.to_le_bytes());
        }
        b
    }
    fn decode(b: &[u8]) -> Option<Half> {
        if b.len() < 16 || b.len() % 8 != 0 {
            return None;
        }
        let f = |i: usize| f64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8"));
        Some(Half {
            time_us: f(0),
            wrong: u64::from_le_bytes(b[8..16].try_into().expect("8")),
            per_iter_us: (2..b.len() / 8).map(f).collect(),
        })
    }
}

/// A half's figures over all ranks.
struct Agg {
    time_us: f64,
    wrong: u64,
    iter: Option<format::IterStats>,
}

fn aggregate(comm: &mut Communicator, mine: &Half, a: &CollArgs) -> Result<Agg, Error> {
    let all = comm.exchange(&mine.encode())?;
    let halves: Vec<Half> = all
        .iter()
        .enumerate()
        .map(|(r, b)| Half::decode(b).ok_or_else(|| Error(format!("rank {r} sent a malformed result"))))
        .collect::<Result<_, _>>()?;
    let times: Vec<f64> = halves.iter().map(|h| h.time_us).collect();
    let time_us = match a.average {
        0 => times[0],
        2 => times.iter().copied().fold(f64::INFINITY, f64::min),
        3 => times.iter().copied().fold(0.0, f64::max),
        _ => times.iter().sum::<f64>() / times.len() as f64,
    };
    let wrong = halves.iter().map(|h| h.wrong).sum();
    let iters = halves.iter().map(|h| h.per_iter_us.len()).min().unwrap_or(0);
    let max_per_iter: Vec<f64> = (a.per_iter_skip.min(iters)..iters)
        .map(|i| halves.iter().map(|h| h.per_iter_us[i]).fold(0.0, f64::max))
        .collect();
    Ok(Agg { time_us, wrong, iter: format::IterStats::of(&max_per_iter) })
}

/// Runs one half (out-of-place or in-place) on this rank.
fn measure(
    comm: &mut Communicator,
    desc: OpDesc,
    s: &Shape,
    in_place: bool,
    a: &CollArgs,
) -> Result<Half, Error> {
    let es = s.dt.size();
    let mut send = vec![0u8; if in_place { 0 } else { s.send_elems() * es }];
    let mut recv = vec![0u8; if in_place { 0 } else { s.recv_elems() * es }];
    let mut buf = vec![0u8; if in_place { s.send_elems().max(s.recv_elems()) * es } else { 0 }];
    let delay = a.delay.iter().find(|d| d.rank == comm.rank()).map(|d| d.secs);
    let call = |comm: &mut Communicator, send: &[u8], recv: &mut [u8], buf: &mut [u8]| {
        let bufs = if in_place { Buffers::InPlace(buf) } else { Buffers::OutOfPlace { send, recv } };
        comm.run(desc, bufs)
    };
    let mut wrong = 0;
    if a.check > 0 {
        // Outputs start as 0xff bytes (NaN, -1, 255): never a right answer.
        if in_place {
            buf.fill(0xff);
            s.fill_input(&mut buf, s.inplace_input_at());
        } else {
            recv.fill(0xff);
            s.fill_input(&mut send, 0);
        }
        call(comm, &send, &mut recv, &mut buf)?;
        wrong = if in_place { s.count_wrong(&buf, s.inplace_result_at()) } else { s.count_wrong(&recv, 0) };
    }
    for _ in 0..a.warmup {
        call(comm, &send, &mut recv, &mut buf)?;
    }
    comm.barrier()?;
    let agg = a.agg_iters;
    let mut per_iter_us = Vec::with_capacity(a.iters);
    // -z 3: the barrier after each outer iteration is not the operation's
    // time (nccl-tests: "time excludes barrier").
    let mut excluded = 0.0;
    let start = Instant::now();
    for _ in 0..a.iters {
        if let Some(d) = delay {
            std::thread::sleep(std::time::Duration::from_secs_f64(d));
        }
        let t = Instant::now();
        for _ in 0..agg {
            call(comm, &send, &mut recv, &mut buf)?;
            if a.blocking == 1 {
                comm.barrier()?;
            }
        }
        per_iter_us.push(t.elapsed().as_secs_f64() * 1e6 / agg as f64);
        if a.blocking == 3 {
            let b = Instant::now();
            comm.barrier()?;
            excluded += b.elapsed().as_secs_f64() * 1e6;
        }
    }
    let total = start.elapsed().as_secs_f64() * 1e6 - excluded;
    Ok(Half { time_us: total / (a.iters * agg) as f64, per_iter_us, wrong })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The sweep; returns the number of wrong elements over all ranks.
pub fn run(comm: &mut Communicator, op: OpKind, a: &CollArgs, p: &Placement) -> Result<u64, Error> {
    let (rank, n) = (comm.rank(), comm.world());
    let sig = a.signature(op);
    for (r, theirs) in comm.exchange(sig.as_bytes())?.iter().enumerate() {
        if theirs != sig.as_bytes() {
            return Err(Error(format!(
                "rank {r} runs a different test: `{}`, this rank `{sig}`",
                String::from_utf8_lossy(theirs)
            )));
        }
    }
    if op.rooted() && a.root >= n {
        return Err(Error(format!("-r {}: there are {n} ranks", a.root)));
    }
    let addrs: Vec<String> = comm.transport().local_addrs().iter().map(|a| a.to_string()).collect();
    let line = format!(
        "#  Rank {rank:2} Group {:2} Pid {:6} on {:>10} device {:2} [{}] roce RoCEv2 over UDP",
        0,
        std::process::id(),
        hostname(),
        0,
        addrs.join(",")
    );
    let lines = comm.exchange(line.as_bytes())?;
    let algo = a.algo()?;
    let per_iter = a.per_iter == 1;
    let out = rank == 0;
    let sizes = a.sizes();
    if out {
        let (step, kind) = match a.step_factor {
            Some(f) => (f, "factor"),
            None => (a.step_bytes, "bytes"),
        };
        let mut h = format!(
            "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {step}({kind}) warmup iters: {} iters: {} agg iters: {} \
             validation: {} graph: 0\n",
            a.min_bytes,
            a.max_bytes,
            a.warmup,
            a.iters,
            a.agg_iters,
            a.check.min(1)
        );
        match a.blocking {
            1 => h += "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n",
            2 => h += "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n",
            3 => {
                h += "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n"
            }
            _ => {}
        }
        if per_iter {
            h += "# Per-Iteration Report: wall-clock timing of each call; i_* uses max over process rows";
            if a.per_iter_skip > 0 {
                h += &format!("; summary skips first {} iterations", a.per_iter_skip);
            }
            h += " \n";
        }
        let w = comm.wait_policy();
        h += &format!(
            "# Ranks {n} from {}, algorithm {algo}, {} QPs per peer\n\
             # Waiting ranks spin {} us, then sleep ({}: {} ranks on this host, {} cores)\n#\n# Using devices\n",
            p.source,
            a.qps_per_peer,
            w.spin.as_micros(),
            if w.auto { "auto" } else { "--spin-us" },
            w.ranks_here,
            w.cores
        );
        for l in &lines {
            h += &String::from_utf8_lossy(l);
            h += "\n";
        }
        if a.explain {
            h += &super::explain::table(op, n, &sizes, a)?;
        }
        h += &format::columns(per_iter);
        print!("{h}");
        let _ = std::io::stdout().flush();
    }
    let factor = format::bus_factor(op, n);
    let (mut wrong_total, mut bw_sum, mut bw_n) = (0u64, 0.0, 0usize);
    let mut rows: Vec<Value> = Vec::new();
    for dt in a.dtypes()? {
        for redop in a.redops(op)? {
            for &size in &sizes {
                let es = dt.size();
                let elems = size as usize / es;
                let (count, shown) = match op {
                    OpKind::ReduceScatter | OpKind::AllGather | OpKind::AllToAll => {
                        (elems / n, elems / n * n)
                    }
                    _ => (elems, elems),
                };
                let root = if op.rooted() { a.root } else { 0 };
                let desc = OpDesc::new(op, dt, count).redop(redop).root(root).algo(algo);
                let shape = Shape { op, dt, redop, count, root, rank, n };
                let oop = measure(comm, desc, &shape, false, a)?;
                let oop = aggregate(comm, &oop, a)?;
                let inp = measure(comm, desc, &shape, true, a)?;
                let inp = aggregate(comm, &inp, a)?;
                wrong_total += oop.wrong + inp.wrong;
                let bytes = shown * es;
                let redop_name = if op.reduces() { redop.name() } else { "none" };
                let root_shown = if op.rooted() { a.root as i64 } else { -1 };
                let mut line = format::row_start(bytes, shown, dt.nccl_name(), redop_name, root_shown);
                let mut json_halves = Vec::new();
                for h in [&oop, &inp] {
                    let algbw = bytes as f64 / (h.time_us * 1e-6) / 1e9;
                    let algbw = if h.time_us > 0.0 { algbw } else { 0.0 };
                    let busbw = algbw * factor;
                    bw_sum += busbw;
                    bw_n += 1;
                    line += &format::row_half(h.time_us, algbw, busbw, (a.check > 0).then_some(h.wrong));
                    if per_iter {
                        match h.iter {
                            Some(s) => line += &s.columns(),
                            None => {
                                line += &format!("  {:>7}  {:>7}  {:>7}  {:>7}", "N/A", "N/A", "N/A", "N/A")
                            }
                        }
                    }
                    json_halves.push(json!({
                        "time": h.time_us, "alg_bw": algbw, "bus_bw": busbw,
                        "nwrong": if a.check > 0 { json!(h.wrong) } else { Value::Null },
                        "per_iter": h.iter.map(|s| json!({"min_us": s.min, "max_us": s.max, "p99_us": s.p99, "cv_pct": s.cv_pct})),
                    }));
                }
                if out {
                    println!("{line}");
                    let _ = std::io::stdout().flush();
                    rows.push(json!({
                        "size": bytes, "count": shown, "type": dt.nccl_name(), "redop": redop_name,
                        "root": root_shown, "out_of_place": json_halves[0], "in_place": json_halves[1],
                    }));
                }
            }
        }
    }
    let avg_bw = if bw_n > 0 { bw_sum / bw_n as f64 } else { 0.0 };
    if out {
        print!("{}", format::footer(wrong_total, avg_bw, format::program(op)));
        let _ = std::io::stdout().flush();
        if let Some(path) = &a.json {
            let doc = json!({
                "config": {
                    "program": format::program(op), "ranks": n, "minimum_bytes": a.min_bytes,
                    "maximum_bytes": a.max_bytes, "warmup_iters": a.warmup, "iterations": a.iters,
                    "validation": a.check, "algorithm": algo.name(), "qps_per_peer": a.qps_per_peer,
                    "per_iter_timing": per_iter, "per_iter_skip": a.per_iter_skip,
                },
                "devices": lines.iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect::<Vec<_>>(),
                "results": rows,
                "out_of_bounds": {"count": wrong_total, "okay": wrong_total == 0},
                "average_bus_bandwidth": {"bandwidth": avg_bw},
            });
            std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
                .map_err(|e| Error(format!("writing {}: {e}", path.display())))?;
        }
    }
    Ok(wrong_total)
}
