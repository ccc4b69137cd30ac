use roce_coll::{DataType, OpDesc, OpKind};
use std::path::Path;

use super::workload::from_str;
use super::*;

/// i32 inputs `(7 i + 13 r) % 16` summed (all-reduce) or gathered.
struct Ints;

fn val(r: usize, i: usize) -> i32 {
    ((i * 7 + r * 13) % 16) as i32
}

impl DataCheck for Ints {
    fn fill(&self, d: &OpDesc, n: usize, r: usize, in_place: bool, input: &mut [u8]) {
        assert_eq!(d.dtype, DataType::I32);
        let at = if in_place && d.op == OpKind::AllGather { r * d.count } else { 0 };
        for i in 0..d.count {
            let _ = n;
            input[(at + i) * 4..(at + i) * 4 + 4].copy_from_slice(&val(r, i).to_le_bytes());
        }
    }
    fn wrong(&self, d: &OpDesc, n: usize, _r: usize, _: bool, out: &[u8]) -> u64 {
        let get = |j: usize| i32::from_le_bytes(out[j * 4..j * 4 + 4].try_into().unwrap());
        match d.op {
            OpKind::AllReduce => {
                (0..d.count).filter(|&i| get(i) != (0..n).map(|r| val(r, i)).sum::<i32>()).count() as u64
            }
            OpKind::AllGather => {
                (0..d.count * n).filter(|&j| get(j) != val(j / d.count, j % d.count)).count() as u64
            }
            _ => unreachable!(),
        }
    }
}

fn wl(text: &str) -> Workload {
    from_str(text, Path::new(".")).unwrap()
}

const SMALL: &str = r#"
seed = 7
[topology]
kind = "switch"
hosts = 4
rate = "100G"
delay = "1us"
[[collective]]
op = "all-reduce"
type = "int32"
sizes = ["4KiB", "1MiB"]
algo = "ring"
iterations = 3
slot_bytes = "16KiB"
qps_per_peer = 2
compute = { mean = "10us", sigma = "2us" }
"#;

#[test]
fn a_ring_all_reduce_on_simulated_hosts_is_right_and_takes_line_rate_time() {
    let w = wl(SMALL);
    let res = run(&w, 0, Some(&Ints)).unwrap();
    assert_eq!(res.rows.len(), 2);
    for row in &res.rows {
        let oop = row.out_of_place.as_ref().unwrap();
        assert_eq!(oop.wrong, Some(0));
        assert_eq!(row.in_place.wrong, Some(0));
        assert_eq!(row.in_place.iter_us.len(), 3);
    }
    // 1 MiB on 4 ranks at 100 Gb/s: 2 (n-1)/n S / B = 126 us at the least.
    let t = res.rows[1].in_place.time_us;
    assert!(t > 125.8 && t < 200.0, "{t} us");
    assert!(res.packet_hops > 0 && res.dropped == 0);
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let w = wl(SMALL);
    let a = run(&w, 0, None).unwrap();
    let b = run(&w, 0, None).unwrap();
    assert_eq!(a, b);
    let mut w2 = w.clone();
    w2.seed = 8;
    let c = run(&w2, 0, None).unwrap();
    assert_ne!(a.rows[1].in_place.iter_us, c.rows[1].in_place.iter_us);
}

#[test]
fn an_all_gather_on_a_fat_tree_with_a_straggler() {
    let w = wl(r#"
[topology]
kind = "fat-tree"
k = 4
[[collective]]
op = "all-gather"
type = "int32"
size = "64KiB"
ranks = 6
iterations = 2
in_place_only = true
delay = [{ rank = 5, by = "300us" }]
"#);
    let res = run(&w, 0, Some(&Ints)).unwrap();
    assert!(res.rows[0].out_of_place.is_none());
    assert_eq!(res.rows[0].in_place.wrong, Some(0));
    // rank 5 enters every call last; every iteration waits for it
    assert_eq!(res.last_in[5], 2);
    assert!(res.rows[0].in_place.iter_us.iter().all(|&t| t > 300.0));
}

#[test]
fn bad_workloads_are_refused_with_the_key() {
    let err = |t: &str| from_str(t, Path::new(".")).unwrap_err().to_string();
    assert!(err("[[collective]]\nop = \"all-reduce\"\n").contains("size"));
    assert!(err("[[collective]]\nop = \"sideways\"\nsize = 8\n").contains("collective[0].op"));
    assert!(err("[topology]\nkind = \"torus\"\n[[collective]]\nsize = 8\n").contains("topology.kind"));
    assert!(err("").contains("at least one"));
    assert!(err("[[slow_link]]\nrank = 1\nfraction = 2.0\n[[collective]]\nsize = 8\n").contains("fraction"));
    let w = wl("[topology]\nhosts = 4\n[[collective]]\nsize = 64\nranks = 9\n");
    assert!(matches!(run(&w, 0, None), Err(CollSimError::Ranks { ranks: 9, hosts: 4 })));
    let w = wl("[topology]\nhosts = 4\n[[collective]]\nsize = 64\ndelay = [{ rank = 4, by = \"1us\" }]\n");
    assert!(matches!(run(&w, 0, None), Err(CollSimError::FaultRank { .. })));
}

/// The analytic check on small sizes (scripts/sim-coll-analytic.py has
/// the full table): a ring all-reduce on an ideal fabric (one switch,
/// lossless, no CC) takes 2(n-1)/n S/B + 2(n-1) alpha within 1%, alpha
/// measured on a 1 KiB call, B the link's payload rate (64 KiB slot
/// messages of 64 header bytes in 4096-byte packets of 86 bytes of
/// headers, plus RETH and ImmDt once).
#[test]
fn a_ring_all_reduce_on_an_ideal_fabric_meets_the_analytic_model() {
    let n = 4.0;
    let w = wl(r#"
[topology]
kind = "switch"
hosts = 4
rate = "100G"
delay = "1us"
[fabric]
pfc = true
ecn = false
cc = "none"
mtu = 4096
[[collective]]
algo = "ring"
sizes = ["1KiB", "8MiB"]
iterations = 1
in_place_only = true
check = false
"#);
    let res = run(&w, 0, None).unwrap();
    assert_meets_the_model(&res, n, 2.0 * (n - 1.0), 8.0 * 1048576.0);
}

/// Row 0 of `res` is a 1 KiB call, which gives alpha; row 1, of `bytes`,
/// must take 2(n-1)/n S/B + steps x alpha within 1% (B: [`slot_rate`]).
fn assert_meets_the_model(res: &CollResult, n: f64, steps: f64, bytes: f64) {
    let bw = |s: f64| 2.0 * (n - 1.0) / n * s / slot_rate();
    let t = |i: usize| res.rows[i].in_place.time_us * 1e-6;
    let alpha = (t(0) - bw(1024.0)) / steps;
    assert!(alpha > 1e-6 && alpha < 5e-6, "alpha {alpha}");
    let model = bw(bytes) + steps * alpha;
    let err = (t(1) - model) / model;
    assert!(err.abs() < 0.01, "measured {} us, model {} us", t(1) * 1e6, model * 1e6);
}

#[test]
fn a_nic_that_stops_draining_stretches_the_iteration_it_falls_in() {
    let body = |stall: &str| {
        format!(
            "[topology]\nhosts = 4\n{stall}[[collective]]\nalgo = \"ring\"\nsize = \"256KiB\"\n\
             iterations = 6\nin_place_only = true\ncheck = false\n"
        )
    };
    let healthy = run(&wl(&body("")), 0, None).unwrap();
    let stalled =
        run(&wl(&body("[[nic_stall]]\nrank = 2\nat = \"100us\"\nfor = \"500us\"\n")), 0, None).unwrap();
    let max = |r: &CollResult| r.rows[0].in_place.iter_us.iter().copied().fold(0.0, f64::max);
    assert!(max(&stalled) > max(&healthy) + 400.0, "{} vs {}", max(&stalled), max(&healthy));
    assert!(stalled.pfc_pauses > 0);
}

#[test]
fn a_nic_that_never_drains_again_ends_the_run_in_an_error_naming_a_peer() {
    // Rank 2's NIC stops for longer than any timeout: the ranks sending to
    // it fail (retries exhausted, or their deadline), naming it or a rank
    // behind it; the run ends, never hangs.
    let body = "[topology]\nhosts = 4\n[[nic_stall]]\nrank = 2\nat = \"20us\"\nfor = \"10s\"\n\
                [[collective]]\nalgo = \"ring\"\nsize = \"1MiB\"\niterations = 1\nin_place_only = true\n\
                check = false\n";
    match run(&wl(body), 0, None) {
        Err(CollSimError::Rank { rank, source }) => {
            let msg = source.to_string();
            assert!(rank < 4 && msg.contains("rank"), "rank {rank}: {msg}");
        }
        other => panic!("expected a rank's error, got {:?}", other.map(|r| r.rows.len())),
    }
}

/// An ideal fabric of `n` hosts (one switch, lossless, no CC, MTU 4096)
/// and one in-place, unchecked all-reduce of `algo` over `sizes`.
fn ideal(n: usize, algo: &str, sizes: &str, extra: &str) -> Workload {
    wl(&format!(
        "[topology]\nkind = \"switch\"\nhosts = {n}\nrate = \"100G\"\ndelay = \"1us\"\n\
         [fabric]\npfc = true\necn = false\ncc = \"none\"\nmtu = 4096\n\
         [[collective]]\nalgo = \"{algo}\"\nsizes = [{sizes}]\niterations = 1\nin_place_only = true\n\
         check = false\nslots = 4\nslot_bytes = \"64KiB\"\n{extra}"
    ))
}

/// The payload rate of a 100 Gb/s link carrying 64 KiB slot messages.
fn slot_rate() -> f64 {
    let slot = 65536.0;
    100e9 / 8.0 * (slot - 64.0) / (slot + 86.0 * 16.0 + 20.0)
}

/// Two ranks that send to each other at once: each one's credits must not
/// queue behind its own data (they have a QP of their own), or the peer
/// runs out of slots. With credits on the data QP this ran 11% over the
/// bandwidth bound (4 slots of 64 KiB, 64 MiB; 3% at 16 MiB).
#[test]
fn ranks_that_send_to_each_other_keep_their_links_full() {
    let res = run(&ideal(2, "ring", "\"16MiB\"", ""), 0, None).unwrap();
    let t = res.rows[0].in_place.time_us * 1e-6;
    let bound = 16.0 * 1048576.0 / slot_rate();
    assert!(t > bound && t < bound * 1.01, "{} us, bound {} us", t * 1e6, bound * 1e6);
}

/// Rabenseifner on an ideal fabric within 1% of the analytic model
/// 2(n-1)/n S/B + 2 lg n alpha (alpha from a 1 KiB call). Chunk-pipelined
/// across its steps it ran 29% over.
#[test]
fn rabenseifner_on_an_ideal_fabric_meets_the_analytic_model() {
    let res = run(&ideal(8, "rabenseifner", "\"1KiB\", \"8MiB\"", ""), 0, None).unwrap();
    assert_meets_the_model(&res, 8.0, 2.0 * 3.0, 8.0 * 1048576.0);
}

/// The double binary tree's two trees share edges (on 6 ranks rank 3 is
/// rank 2's child in one tree and its parent in the other), so a rank
/// sends two transfers to one peer, one up and one down. With a QP per
/// tree (2 per peer) they go side by side and the call is within 3% of the
/// tree's bandwidth bound 2 S/B (what its busiest rank sends); one after
/// the other, as with one QP per peer, the second finishes last (20% over).
#[test]
fn the_double_tree_with_a_qp_per_tree_meets_its_bound() {
    let time = |qps: usize| {
        let w = ideal(6, "tree", "\"8MiB\"", &format!("qps_per_peer = {qps}\n"));
        run(&w, 0, None).unwrap().rows[0].in_place.time_us * 1e-6
    };
    let bound = 2.0 * 8.0 * 1048576.0 / slot_rate();
    let (one, two) = (time(1), time(2));
    assert!(two > bound && two < 1.03 * bound, "{} us, bound {} us", two * 1e6, bound * 1e6);
    assert!(one > 1.15 * two, "one QP per peer {} us, two {} us", one * 1e6, two * 1e6);
}

/// A timing-only run (results not checked: headers carried, no data
/// staged, reduced or copied) takes the same simulated time as a checked
/// one, to the picosecond, for every algorithm and both halves.
#[test]
fn a_timing_only_run_takes_the_time_of_a_checked_one() {
    for algo in ["ring", "rabenseifner", "tree"] {
        let body = |check: bool| {
            wl(&format!(
                "[topology]\nhosts = 5\n[[collective]]\nalgo = \"{algo}\"\ntype = \"int32\"\n\
                 sizes = [\"4KiB\", \"300KiB\"]\niterations = 2\ncheck = {check}\n"
            ))
        };
        let (a, b) = (run(&body(true), 0, Some(&Ints)).unwrap(), run(&body(false), 0, Some(&Ints)).unwrap());
        assert_eq!(a.rows.len(), b.rows.len());
        for (x, y) in a.rows.iter().zip(&b.rows) {
            assert_eq!(x.in_place.iter_us, y.in_place.iter_us, "{algo}");
            let (xo, yo) = (x.out_of_place.as_ref(), y.out_of_place.as_ref());
            assert_eq!(xo.map(|h| &h.iter_us), yo.map(|h| &h.iter_us), "{algo}");
            assert_eq!((x.in_place.wrong, y.in_place.wrong), (Some(0), None), "{algo}");
        }
    }
}

/// A rank that enters last holds every step's data at once; posted
/// together, its sends would share its link and the first step's, which
/// all the others wait for, would crawl. With at most two steps in flight
/// the call takes 1.45x its in-step time after the last entry (16 ranks,
/// recursive doubling, 64 KiB); all at once it took 1.88x.
#[test]
fn a_rank_that_enters_last_sends_its_steps_in_order() {
    let time = |extra: &str| {
        let w =
            ideal(16, "recursive-doubling", "\"64KiB\"", &format!("compute = {{ mean = \"1ms\" }}\n{extra}"));
        run(&w, 0, None).unwrap().rows[0].in_place.time_us
    };
    let in_step = time("");
    let late = time("delay = [{ rank = 3, by = \"100us\" }]\n");
    assert!(late < 1.6 * in_step, "{late} us after the last entry, {in_step} us in step");
}

/// A credit QP's send queue can fill (its ACKs may come back later than
/// the data its credits let through: on a fat-tree they take another ECMP
/// path, and a 128-host ring did fail with "send queue full"). `notify`
/// then holds the credit and posts it once completions make room: none is
/// lost, none fails.
#[test]
fn credits_beyond_the_queue_are_held_then_delivered() {
    use super::transport::Hosts;
    use crate::mesh::Mesh;
    use crate::rng::SimRng;
    use roce_coll::{Completion, Layout, Transport};

    let w = ideal(2, "ring", "\"64KiB\"", "");
    let (scn, nodes) = fabric_of(&w).unwrap();
    let engines = nodes
        .iter()
        .map(|&node| (node, crate::sim::host_engine(&scn, node, 100_000_000_000).unwrap()))
        .collect();
    let mesh = Mesh::on_fabric(scn, engines, SimRng::new(1).fork("links"), crate::hooks::NoHooks).unwrap();
    let layout = Layout { channels: 1, slots: 2, slot_bytes: 4096 };
    let mut hosts = Hosts::new(mesh, &nodes, layout, w.fabric.mtu);
    // the credit QP's send queue holds slots + 4 = 6: post 40 at once
    let credits = 40u32;
    for k in 0..credits {
        hosts.view(0).notify(1, 0, k << 16).unwrap();
    }
    let (mut arrived, mut out) = (Vec::new(), Vec::new());
    let mut rounds = 0;
    while arrived.len() < credits as usize {
        rounds += 1;
        assert!(rounds < 100_000, "stuck with {} of {credits} credits in", arrived.len());
        for r in [0, 1] {
            out.clear();
            hosts.view(r).poll(&mut out).unwrap();
            if r == 1 {
                arrived.extend(out.iter().map(|c| match *c {
                    Completion::Arrived { peer: 0, channel: 0, imm } => imm >> 16,
                    other => panic!("{other:?}"),
                }));
            }
        }
        hosts.mesh.step(crate::scenario::Time::MAX, 1_000);
    }
    arrived.sort_unstable();
    assert_eq!(arrived, (0..credits).collect::<Vec<_>>());
}

/// Four hosts write to rank 0's host (storage flows, an incast) while 8
/// ranks run a ring: in the collectives' own class the incast takes rank
/// 0's link and the ring crawls; in a class of its own with equal DWRR
/// weights (ETS) the ring keeps about half; with the collectives in a
/// strict class above, all of it (the background takes what is left).
#[test]
fn background_traffic_shares_the_fabric_by_class() {
    let busbw = |fabric: &str, bg_prio: u8, coll_prio: u8| {
        let w = wl(&format!(
            "[topology]\nkind = \"fat-tree\"\nk = 4\n[fabric]\n{fabric}\n\
             [[background]]\nfrom = [8, 9, 10, 11]\nto = 0\npriority = {bg_prio}\n\
             [[collective]]\nalgo = \"ring\"\nranks = 8\nsize = \"2MiB\"\niterations = 1\nin_place_only = true\n\
             check = false\nslots = 8\npriority = {coll_prio}\n"
        ));
        let res = run(&w, 0, None).unwrap();
        let (flows, bytes, _) = res.background.unwrap();
        assert_eq!(flows, 4);
        (2.0 * 7.0 / 8.0 * 2.0 * 1048576.0 / (res.rows[0].in_place.time_us * 1e3), bytes)
    };
    let healthy = {
        let w = wl("[topology]\nkind = \"fat-tree\"\nk = 4\n[[collective]]\nalgo = \"ring\"\nranks = 8\n\
                    size = \"2MiB\"\niterations = 1\nin_place_only = true\ncheck = false\nslots = 8\n");
        let res = run(&w, 0, None).unwrap();
        assert!(res.background.is_none());
        2.0 * 7.0 / 8.0 * 2.0 * 1048576.0 / (res.rows[0].in_place.time_us * 1e3)
    };
    let (same, b1) = busbw("", 0, 0);
    let (ets, b2) = busbw("weights = [1, 1, 1, 1, 1, 1, 1, 1]", 3, 0);
    let (above, _) = busbw("", 0, 3);
    assert!(same < 0.3 * healthy && b1 > 0, "same class: {same} GB/s of {healthy}");
    assert!(ets > 0.4 * healthy && ets < 0.6 * healthy && b2 > 0, "ETS: {ets} GB/s of {healthy}");
    assert!(above > 0.95 * healthy, "strict above: {above} GB/s of {healthy}");
}

#[test]
fn bad_background_and_weights_are_refused() {
    let err = |text: &str| {
        from_str(&format!("[topology]\nhosts = 4\n{text}[[collective]]\nsize = \"1KiB\"\n"), Path::new("."))
            .unwrap_err()
            .to_string()
    };
    for (text, key) in [
        ("[[background]]\nfrom = [1, 0]\nto = 0\n", "background[0].from"),
        ("[[background]]\nfrom = []\nto = 0\n", "background[0].from"),
        ("[[background]]\nfrom = [1]\nto = 0\npriority = 8\n", "background[0].priority"),
        ("[[background]]\nfrom = [1]\nto = 0\ndepth = 0\n", "background[0].depth"),
        ("[[background]]\nfrom = [1]\nto = 0\nmessage = \"0B\"\n", "background[0].message"),
        ("[fabric]\nweights = [1, 2]\n", "fabric.weights"),
        ("[fabric]\nweights = [0, 0, 0, 0, 0, 0, 0, 0]\n", "fabric.weights"),
    ] {
        let e = err(text);
        assert!(e.contains(key), "{text}: {e}");
    }
    // a host the fabric does not have: named when the run is built
    let w =
        wl("[topology]\nhosts = 4\n[[background]]\nfrom = [7]\nto = 0\n[[collective]]\nsize = \"1KiB\"\n");
    let e = run(&w, 0, None).unwrap_err().to_string();
    assert!(e.contains("host 7") && e.contains("4 hosts"), "{e}");
}

/// A host link at half rate is the run's busiest link, both ways, at
/// about twice the busy share of any other: the slowdown's link.
#[test]
fn the_busiest_links_name_a_slow_link() {
    let w = ideal(4, "ring", "\"4MiB\"", "");
    let mut w2 = w.clone();
    w2.fabric.slow_links.push(super::workload::SlowLink { rank: 2, fraction: 0.5 });
    let res = run(&w2, 0, None).unwrap();
    let b = &res.busiest_links;
    assert_eq!(b.len(), 3);
    for l in &b[..2] {
        assert!(l.0 == "h2" || l.1 == "h2", "{b:?}");
    }
    assert!(b[1].2 > 1.8 * b[2].2, "{b:?}");
    // healthy, no link stands out
    let res = run(&w, 0, None).unwrap();
    assert!(res.busiest_links[0].2 < 1.1 * res.busiest_links[2].2, "{:?}", res.busiest_links);
}
