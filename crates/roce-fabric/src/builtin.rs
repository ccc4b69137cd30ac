//! Built-in scenarios, each the TOML file of the same name under
//! `crates/roce-fabric/scenarios/` (embedded at build time; the files are
//! also examples of the format of [`crate::toml_scenario`]). Each file's
//! head comment says what the scenario shows and what a run should find.

use crate::scenario::Scenario;
use crate::toml_scenario;

/// The built-in scenarios' names, in a sensible order for a listing.
pub const NAMES: &[&str] =
    &["incast", "deadlock-ring", "deadlock-ring-watchdog", "pfc-storm", "pfc-storm-watchdog"];

/// The TOML text of a built-in scenario.
pub fn source(name: &str) -> Option<&'static str> {
    Some(match name {
        "incast" => include_str!("../scenarios/incast.toml"),
        "deadlock-ring" => include_str!("../scenarios/deadlock-ring.toml"),
        "deadlock-ring-watchdog" => include_str!("../scenarios/deadlock-ring-watchdog.toml"),
        "pfc-storm" => include_str!("../scenarios/pfc-storm.toml"),
        "pfc-storm-watchdog" => include_str!("../scenarios/pfc-storm-watchdog.toml"),
        _ => return None,
    })
}

/// The built-in scenario `name`, or `None` if there is no such scenario.
/// The embedded files are checked by this module's tests, so a known name
/// always gives a valid scenario.
pub fn scenario(name: &str) -> Option<Scenario> {
    let text = source(name)?;
    match toml_scenario::from_str(text) {
        Ok(s) => Some(s),
        // Unreachable while the tests pass; a broken embedded file is a
        // build defect, not a user error.
        Err(e) => panic!("built-in scenario {name} is invalid: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::*;
    use crate::scenario::{port_towards, validate};

    fn id(s: &Scenario, name: &str) -> NodeId {
        s.nodes.iter().position(|n| n.name == name).unwrap_or_else(|| panic!("no node {name}"))
    }

    #[test]
    fn every_builtin_parses_and_validates() {
        for name in NAMES {
            let s = scenario(name).unwrap();
            assert_eq!(s.name, *name);
            validate(&s).unwrap();
            assert!(!s.flows.is_empty(), "{name}");
            assert!(!s.monitor.ports.is_empty(), "{name}");
        }
        assert!(scenario("nope").is_none());
        assert!(source("nope").is_none());
    }

    #[test]
    fn incast_is_seven_to_one() {
        let s = scenario("incast").unwrap();
        assert_eq!(s.hosts().count(), 8);
        assert_eq!(s.nodes.len(), 9);
        assert_eq!(s.flows.len(), 7);
        let h8 = id(&s, "h8");
        assert!(s.flows.iter().all(|f| f.dst == h8 && f.size == 1_000_000 && f.priority == 3));
        assert!(s.links.iter().all(|l| l.rate_bps == 100_000_000_000 && l.delay_ps == PS_PER_US));
        assert_eq!(s.switch, SwitchConfig::hpcc());
        assert_eq!(s.nic, NicConfig::hpcc());
        assert_eq!(s.framing, Framing::Ethernet);
        let sw = id(&s, "sw");
        assert_eq!(s.monitor.ports, vec![(sw, 8)]);
        assert!(s.monitor.flow_rates);
        assert_eq!(s.deadlock_check_ps, 100 * PS_PER_US);
        assert_eq!(s.seed, 1);
    }

    #[test]
    fn ring_routes_go_two_hops_clockwise() {
        let s = scenario("deadlock-ring").unwrap();
        let next = |sw: &str| match sw {
            "S0" => "S1",
            "S1" => "S2",
            _ => "S0",
        };
        // Every route sends towards the clockwise neighbour.
        for r in &s.routes {
            assert_eq!(s.nodes[r.via].name, next(&s.nodes[r.switch].name));
        }
        // Each ring egress S(i) -> S(i+1) is wanted by three flows.
        let home = |h: NodeId| {
            let l = s.links.iter().find(|l| l.a == h || l.b == h).unwrap();
            if l.a == h {
                l.b
            } else {
                l.a
            }
        };
        let mut load = std::collections::HashMap::new();
        for f in &s.flows {
            let (mut at, dst_sw) = (home(f.src), home(f.dst));
            while at != dst_sw {
                let via = s
                    .routes
                    .iter()
                    .find(|r| r.switch == at && r.dst == f.dst)
                    .map(|r| r.via)
                    .unwrap_or_else(|| id(&s, next(&s.nodes[at].name)));
                assert_eq!(s.nodes[via].name, next(&s.nodes[at].name), "flow {f:?} goes anticlockwise");
                *load.entry(at).or_insert(0) += 1;
                at = via;
            }
        }
        assert_eq!(load.len(), 3);
        assert!(load.values().all(|&n| n == 3), "{load:?}");
        assert!(matches!(s.switch.pfc, PfcThreshold::Static { xoff: 40_000, xon: 20_000 }));
        assert!(s.switch.pfc_enabled && !s.switch.ecn_enabled);
        assert_eq!(s.nic.cc, "none");
        assert_eq!(s.watchdog, None);
        assert_eq!(s.stop_ps, Some(50 * PS_PER_MS));
        let (s0, s1) = (id(&s, "S0"), id(&s, "S1"));
        assert_eq!(s.monitor.ports[0], (s0, port_towards(&s, s0, s1).unwrap()));
        assert_eq!(s.monitor.ports[0].1, 3);
    }

    #[test]
    fn watchdog_variants_differ_only_in_watchdog() {
        for (base, wd) in [("deadlock-ring", "deadlock-ring-watchdog"), ("pfc-storm", "pfc-storm-watchdog")] {
            let a = scenario(base).unwrap();
            let mut b = scenario(wd).unwrap();
            assert_eq!(
                b.watchdog,
                Some(WatchdogConfig { timeout_ps: 200 * PS_PER_US, restore_ps: 400 * PS_PER_US })
            );
            assert_eq!(a.watchdog, None);
            b.watchdog = None;
            b.name = a.name.clone();
            b.stop_ps = a.stop_ps;
            assert_eq!(a, b, "{wd}");
        }
    }

    #[test]
    fn storm_stalls_the_receiver_and_monitors_the_path() {
        let s = scenario("pfc-storm").unwrap();
        let h8 = id(&s, "h8");
        assert_eq!(
            s.events,
            vec![TimedEvent { at_ps: 100 * PS_PER_US, kind: EventKind::NicStall { host: h8 } }]
        );
        assert_eq!(s.flows.iter().filter(|f| f.dst == h8).count(), 3);
        assert_eq!(s.flows.iter().filter(|f| f.dst != h8).count(), 2);
        let names: Vec<String> =
            s.monitor.ports.iter().map(|&(n, p)| format!("{}:{p}", s.nodes[n].name)).collect();
        // tor1's ports: h5..h8 then the spine; the spine's: tor0, tor1.
        assert_eq!(names, ["tor1:4", "spine:2", "tor0:5", "h1:1", "h3:1"]);
        assert_eq!(s.switch.buffer_bytes, 4 << 20);
        assert_eq!(
            s.switch.ecn,
            vec![EcnRule { rate_bps: 100_000_000_000, kmin: 40_000, kmax: 160_000, pmax: 0.2 }]
        );
    }
}
