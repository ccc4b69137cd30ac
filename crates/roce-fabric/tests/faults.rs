//! The fault-injection harness's link faults on the fabric's links: the
//! transport recovers from loss, duplicates and reordering, and the
//! engines' ICRC check refuses every corrupted frame.

mod common;
use common::*;
use roce_fabric::*;

#[test]
fn flows_complete_over_faulty_links_and_corruption_is_caught() {
    let mut s = star(3, 100_000_000_000, 1000);
    s.nic.cc = "none".into();
    s.switch.ecn_enabled = false;
    for l in &mut s.links {
        l.loss = 0.002;
        l.faults = LinkFaults {
            jitter_ps: 50 * PS_PER_NS,
            reorder: 0.005,
            reorder_delay_ps: 3 * PS_PER_US,
            duplicate: 0.005,
            corrupt: 0.005,
        };
    }
    s.flows.push(flow(1, 3, 1_000_000, 0));
    s.flows.push(flow(2, 3, 1_000_000, 0));
    s.flows.push(flow(3, 1, 500_000, 0));
    let r = simulate(&s, None).unwrap();
    let c = r.counters;
    assert_eq!(r.ending, Some(Ending::Completed), "{c:?}");
    assert_eq!(r.fct.len(), 3);
    assert_eq!(c.flows_failed, 0);
    assert!(c.dropped_link > 0 && c.duplicated > 0 && c.corrupted > 0, "{c:?}");
    // Every corrupted frame that reached a host was refused by its ICRC
    // (a frame corrupted and then lost never arrives).
    assert!(c.engine_rx_errors > 0 && c.engine_rx_errors <= c.corrupted, "{c:?}");
    // The same seed, the same run; another seed, other faults.
    let again = simulate(&s, None).unwrap();
    assert_eq!(again.fct, r.fct);
    assert_eq!(again.counters, r.counters);
    s.seed = 2;
    let other = simulate(&s, None).unwrap();
    assert_ne!(other.counters, r.counters);
}
