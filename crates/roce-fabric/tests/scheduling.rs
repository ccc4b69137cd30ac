//! Egress scheduling among priorities at a congested switch port: strict
//! priority, and deficit weighted round robin by weight.

mod common;
use common::*;
use roce_fabric::*;

const G100: u64 = 100_000_000_000;
const SIZE: u64 = 2_000_000;

/// h1 (priority 1) and h2 (priority 2) each write 2 MB into h3 through
/// one 100G port; both priorities lossless, PFC only.
fn two_classes(scheduling: Scheduling) -> Report {
    let mut s = star(3, G100, 1000);
    s.nic.cc = "none".into();
    s.switch.ecn_enabled = false;
    s.switch.lossless_mask = (1 << 1) | (1 << 2);
    s.switch.scheduling = scheduling;
    s.flows.push(FlowSpec { priority: 1, ..flow(1, 3, SIZE, 0) });
    s.flows.push(FlowSpec { priority: 2, ..flow(2, 3, SIZE, 0) });
    let r = simulate(&s, None).unwrap();
    assert_eq!(r.ending, Some(Ending::Completed));
    assert_eq!(r.counters.dropped_bytes, 0);
    r
}

fn fct_us(r: &Report, flow: usize) -> f64 {
    r.fct.iter().find(|f| f.flow == flow).unwrap().fct_ps as f64 / PS_PER_US as f64
}

/// Time for `bytes` of payload at `share` of 100G (PPP framing: 1070
/// wire bytes per 1024 of payload), in us.
fn at_share(bytes: u64, share: f64) -> f64 {
    bytes as f64 * 1070.0 / 1024.0 * 8.0 / (share * G100 as f64) * 1e6
}

#[test]
fn strict_priority_serves_the_higher_class_first() {
    let r = two_classes(Scheduling::Strict);
    let (low, high) = (fct_us(&r, 0), fct_us(&r, 1));
    // Priority 2 runs at line rate as if alone; priority 1 gets the rest.
    assert!((high / at_share(SIZE, 1.0) - 1.0).abs() < 0.05, "high {high} us");
    assert!((low / at_share(2 * SIZE, 1.0) - 1.0).abs() < 0.05, "low {low} us");
}

#[test]
fn dwrr_shares_by_weight() {
    // Weights 1:3 between priorities 1 and 2 (ACKs at 7, weight 0: strict).
    let mut w = [0u32; PRIORITIES];
    w[1] = 1500;
    w[2] = 4500;
    let r = two_classes(Scheduling::Dwrr { weights: w });
    let (one, two) = (fct_us(&r, 0), fct_us(&r, 1));
    // Priority 2 has 3/4 of the port until it is done; then priority 1
    // has it all.
    assert!((two / at_share(SIZE, 0.75) - 1.0).abs() < 0.05, "priority 2: {two} us");
    assert!((one / at_share(2 * SIZE, 1.0) - 1.0).abs() < 0.05, "priority 1: {one} us");
    // Equal weights: they finish together.
    w[2] = 1500;
    let r = two_classes(Scheduling::Dwrr { weights: w });
    let (one, two) = (fct_us(&r, 0), fct_us(&r, 1));
    assert!((one / two - 1.0).abs() < 0.03, "{one} vs {two}");
}

/// Where switches queue ACKs (`SwitchConfig::ack_class`): h2 and h3 write
/// 4 MB each into h1 (DCQCN off, so the switch's port to h1 holds a
/// standing queue), and h1 writes 16 KB to h2 meanwhile. The small flow's
/// ACKs go back to h1 through that port: at the NIC's ACK priority (7,
/// strict above the data) they pass the queue; queued at their packet's
/// class (the flow's, 3), as the HPCC artifact's switches do, they wait
/// behind it, and the small flow's FCT (which ends at its last ACK) with
/// them.
#[test]
fn acks_queued_with_data_wait_behind_it() {
    let small_fct = |class: AckClass| {
        let mut s = star(3, G100, 1000);
        s.nic.cc = "none".into();
        s.switch.ack_class = class;
        s.flows.push(flow(2, 1, 4_000_000, 0));
        s.flows.push(flow(3, 1, 4_000_000, 0));
        s.flows.push(flow(1, 2, 16_000, 100 * PS_PER_US));
        let r = simulate(&s, None).unwrap();
        assert_eq!(r.ending, Some(Ending::Completed));
        assert_eq!(r.counters.dropped_bytes, 0);
        fct_us(&r, 2)
    };
    let (own, with_data) = (small_fct(AckClass::Nic), small_fct(AckClass::Packet));
    // The queue at the port to h1: PFC holds it near its XOFF point, tens
    // of KB and more, microseconds at 100G.
    eprintln!("small flow FCT: ACKs in their own class {own:.2} us, with the data {with_data:.2} us");
    assert!(with_data > own + 2.0, "ACKs in their own class {own:.2} us, with the data {with_data:.2} us");
}
