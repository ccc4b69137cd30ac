//! The built-in scenarios do what their files say: the ring deadlocks
//! without a watchdog and completes with one; a stalled NIC's pauses spread
//! hop by hop, and a watchdog contains them.

use std::collections::HashMap;

use roce_fabric::scenario::{peer_of, port_towards};
use roce_fabric::{builtin, simulate, Ending, NodeId, Report, Scenario, Time};

/// The lossless priority of the built-ins.
const PRIO: u8 = 3;

fn run(name: &str) -> (Scenario, Report) {
    let s = builtin::scenario(name).unwrap();
    let r = simulate(&s, None).unwrap();
    (s, r)
}

fn id(s: &Scenario, name: &str) -> NodeId {
    s.nodes.iter().position(|n| n.name == name).unwrap_or_else(|| panic!("no node {name}"))
}

fn name(s: &Scenario, node: NodeId) -> &str {
    &s.nodes[node].name
}

/// `node`'s port facing `peer`, both by name.
fn port(s: &Scenario, node: &str, peer: &str) -> (NodeId, u32) {
    let n = id(s, node);
    (n, port_towards(s, n, id(s, peer)).unwrap_or_else(|| panic!("{node} has no port to {peer}")))
}

/// Whether the flow `src -> dst` (names) finished.
fn finished(s: &Scenario, r: &Report, src: &str, dst: &str) -> bool {
    let (src, dst) = (id(s, src), id(s, dst));
    r.fct.iter().any(|f| f.src == src && f.dst == dst)
}

/// The first PAUSE received on (node, port), at the lossless priority.
fn first_pause(r: &Report, (node, port): (NodeId, u32)) -> Option<Time> {
    r.pfc
        .iter()
        .find(|p| p.node == node && p.port == port && p.priority == PRIO && p.pause)
        .map(|p| p.time_ps)
}

/// How long (node, port) was paused at the lossless priority, from its
/// PAUSE and RESUME records; a pause still on runs to the end of the run.
fn paused_ps(r: &Report, (node, port): (NodeId, u32)) -> Time {
    let mut since = None;
    let mut total = 0;
    for p in r.pfc.iter().filter(|p| p.node == node && p.port == port && p.priority == PRIO) {
        match (p.pause, since) {
            (true, None) => since = Some(p.time_ps),
            (false, Some(t)) => {
                total += p.time_ps - t;
                since = None;
            }
            _ => {}
        }
    }
    total + since.map_or(0, |t| r.end_ps - t)
}

/// The clockwise ring neighbour of a ring switch.
fn clockwise(sw: &str) -> &'static str {
    match sw {
        "S0" => "S1",
        "S1" => "S2",
        "S2" => "S0",
        _ => panic!("{sw} is not a ring switch"),
    }
}

/// `cycle` is the three clockwise ring egresses at the lossless priority.
fn assert_ring_cycle(s: &Scenario, cycle: &[roce_fabric::QueueRef]) {
    assert_eq!(cycle.len(), 3, "{cycle:?}");
    let mut names: Vec<&str> = cycle.iter().map(|q| name(s, q.node)).collect();
    for q in cycle {
        assert_eq!(q.priority, PRIO);
        let from = name(s, q.node);
        let to = peer_of(s, q.node, q.port).map(|n| name(s, n));
        assert_eq!(to, Some(clockwise(from)), "queue {from}:{} is not a clockwise ring egress", q.port);
    }
    names.sort_unstable();
    assert_eq!(names, ["S0", "S1", "S2"]);
}

#[test]
fn the_ring_deadlocks_without_a_watchdog() {
    let (s, r) = run("deadlock-ring");
    // Measured: Deadlock at the 200 us check, cycle S0:3 -> S1:4 -> S2:4.
    let Some(Ending::Deadlock { at_ps, cycle }) = &r.ending else { panic!("ending {:?}", r.ending) };
    assert_ring_cycle(&s, cycle);
    assert_eq!(*at_ps, r.end_ps);
    assert!(r.fct.is_empty(), "{} flows completed", r.fct.len());
    assert_eq!(r.counters.watchdog_fired, 0);
}

#[test]
fn the_watchdog_breaks_the_ring_deadlock() {
    let (s, r) = run("deadlock-ring-watchdog");
    // Measured: the detector sees the cycle at 200 us, the watchdog fires on
    // the three ring queues at 216.5 us, every flow done at 1.342 ms.
    assert_eq!(r.ending, Some(Ending::Completed));
    assert_eq!(r.fct.len(), s.flows.len());
    assert!(r.counters.watchdog_fired >= 1);
    assert!(r.counters.dropped_watchdog > 0);
    let (first_seen, cycle) = r.deadlocks.first().expect("the detector noticed the deadlock");
    assert_ring_cycle(&s, cycle);
    let first_fired = r.watchdog_log.first().expect("a firing").0;
    assert!(*first_seen <= first_fired, "seen at {first_seen} ps, watchdog at {first_fired} ps");
}

#[test]
fn a_stalled_nic_pauses_spread_hop_by_hop() {
    let (s, r) = run("pfc-storm");
    // Measured (us): tor1->h8 194.7, spine->tor1 447.8, tor0->spine 485.7,
    // h1 509.8, h2 510.0, h3 768.2, h4 770.3; no flow done by 5 ms.
    let path = [port(&s, "tor1", "h8"), port(&s, "spine", "tor1"), port(&s, "tor0", "spine")];
    let mut times = Vec::new();
    for p in path {
        let t = first_pause(&r, p).unwrap_or_else(|| panic!("{}:{} never paused", name(&s, p.0), p.1));
        times.push(t);
    }
    assert!(times.windows(2).all(|w| w[0] < w[1]), "not hop by hop: {times:?}");
    for h in ["h1", "h2", "h3", "h4"] {
        let t = first_pause(&r, port(&s, h, "tor0")).unwrap_or_else(|| panic!("{h} never paused"));
        assert!(t > times[2], "{h} paused at {t} ps, before tor0->spine at {} ps", times[2]);
    }
    assert!(!finished(&s, &r, "h3", "h6") && !finished(&s, &r, "h4", "h7"), "a victim completed");
    assert_eq!(r.ending, Some(Ending::StopTime));
    assert_eq!(r.counters.watchdog_fired, 0);
}

#[test]
fn the_watchdog_contains_the_storm() {
    // Measured with the current sim.rs: the watchdog never fires and the
    // run is identical to pfc-storm's (same pfc records, no flow done).
    // Cause: with `pause_quanta` every refreshed XOFF bumps the port's
    // pause epoch, and the WatchdogCheck armed at the first PAUSE is
    // discarded for a stale epoch; no new check is armed on a refresh
    // (the port was already paused). The refresh period (half of 65535
    // quanta = 167.8 us at 100G) is below the 200 us timeout, so no check
    // ever survives. With the check keyed to an epoch that only pause
    // start/end bumps (tried on a copy): one firing on tor1->h8 at 394.7 us,
    // the victims done at 3.528 and 3.529 ms, h3's and h4's NICs never
    // paused (4.23 ms each without the watchdog). Un-ignore once fixed.
    let (s_storm, storm) = run("pfc-storm");
    let (s, r) = run("pfc-storm-watchdog");
    let to_h8 = port(&s, "tor1", "h8");
    assert!(
        r.watchdog_log.iter().any(|(_, q)| (q.node, q.port, q.priority) == (to_h8.0, to_h8.1, PRIO)),
        "no firing on tor1->h8: {:?}",
        r.watchdog_log
    );
    assert!(finished(&s, &r, "h3", "h6") && finished(&s, &r, "h4", "h7"), "a victim did not complete");
    let mut paused = HashMap::new();
    for h in ["h3", "h4"] {
        let with = paused_ps(&r, port(&s, h, "tor0"));
        let without = paused_ps(&storm, port(&s_storm, h, "tor0"));
        paused.insert(h, (with, without));
        assert!(with * 4 < without, "{h}: paused {with} ps with the watchdog, {without} ps without");
    }
    eprintln!("paused (with, without watchdog), ps: {paused:?}");
}

/// The storm has everything random at once (DCQCN's ECN marks, the
/// engines' identifiers, ECMP salt) and PFC frames: one seed still gives
/// byte-identical fct.txt and pfc.txt, and another seed other files.
#[test]
fn the_storm_is_the_same_storm_for_one_seed() {
    let files = |seed: u64| {
        let mut s = builtin::scenario("pfc-storm-watchdog").unwrap();
        s.seed = seed;
        let r = simulate(&s, None).unwrap();
        let (mut fct, mut pfc) = (Vec::new(), Vec::new());
        roce_fabric::hpcc::write_fct(&mut fct, &s, &r, 1000).unwrap();
        roce_fabric::hpcc::write_pfc(&mut pfc, &s, &r).unwrap();
        assert!(!fct.is_empty() && !pfc.is_empty());
        (fct, pfc)
    };
    let a = files(1);
    assert!(a == files(1), "seed 1 twice: the files differ");
    assert!(a != files(7), "seeds 1 and 7 gave the same files");
}
