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

#[test]
fn a_link_down_for_a_while_costs_a_retry_and_loses_nothing() {
    let mut s = star(2, 100_000_000_000, 1000);
    s.nic.cc = "none".into();
    s.flows.push(flow(1, 2, 1_000_000, 0));
    let alone = simulate(&s, None).unwrap().fct[0].fct_ps;
    // The sender's link goes down mid-flow and comes back 100 us later.
    s.events.push(TimedEvent { at_ps: 20 * PS_PER_US, kind: EventKind::LinkDown { link: 0 } });
    s.events.push(TimedEvent { at_ps: 120 * PS_PER_US, kind: EventKind::LinkUp { link: 0 } });
    let r = simulate(&s, None).unwrap();
    assert_eq!(r.ending, Some(Ending::Completed));
    let c = r.counters;
    assert!(c.dropped_link > 0, "{c:?}");
    // Everything sent into the dead link was lost; the requester's ACK
    // timer (16.8 ms) brought the flow back.
    assert!(c.retry_timeouts >= 1, "{c:?}");
    assert!(r.fct[0].fct_ps > alone + 16 * PS_PER_MS, "{} vs {alone}", r.fct[0].fct_ps);
    assert_eq!(c.flows_failed, 0);
}
