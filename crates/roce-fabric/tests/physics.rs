//! The fabric's physics against the theory table of the model notes
//! (`shared/fabric-sim-baseline/MODEL-NOTES.md`, "Physical limits and
//! theory checks").

mod common;
use common::*;
use roce_fabric::*;

const G100: u64 = 100_000_000_000;

#[test]
fn serialisation_times() {
    // 1048 B at 100G = 83.84 ns; a 60 B ACK = 4.8 ns.
    assert_eq!(serialisation_ps(1048, G100), 83_840);
    assert_eq!(serialisation_ps(60, G100), 4_800);
    // A PFC frame on Ethernet: 64 B + preamble + gap = 84 B = 6.72 ns.
    assert_eq!(Framing::Ethernet.pfc_wire_len(), 84);
    assert_eq!(serialisation_ps(Framing::Ethernet.pfc_wire_len() as u64, G100), 6_720);
    // 400G: a byte every 20 ps; 25G every 320 ps.
    assert_eq!(serialisation_ps(1, 400_000_000_000), 20);
    assert_eq!(serialisation_ps(1, 25_000_000_000), 320);
}

#[test]
fn pause_quanta() {
    // 512 bit times: 10G 51.2 ns ... 800G 0.64 ns.
    let table = [
        (10_000_000_000u64, 51_200u64),
        (25_000_000_000, 20_480),
        (40_000_000_000, 12_800),
        (G100, 5_120),
        (400_000_000_000, 1_280),
        (800_000_000_000, 640),
    ];
    for (rate, ps) in table {
        assert_eq!(pause_quantum_ps(rate), ps, "{rate}");
    }
    // The longest pause, 65535 quanta: 3.36 ms at 10G, 335.5 us at 100G.
    assert_eq!(pause_quantum_ps(10_000_000_000) * 65535, 3_355_392_000);
    assert_eq!(pause_quantum_ps(G100) * 65535, 335_539_200);
}

/// Data and ACK of a one-packet WRITE, as the NIC frames them (PPP: the
/// IP packet + 2 bytes): IP 20 + UDP 8 + BTH 12 + RETH 16 + payload +
/// ICRC 4; an ACK is BTH 12 + AETH 4 + ICRC 4.
fn write_only_wire(payload: u64) -> u64 {
    20 + 8 + 12 + 16 + payload.next_multiple_of(4) + 4 + 2
}
const ACK_WIRE: u64 = 20 + 8 + 12 + 4 + 4 + 2;

#[test]
fn store_and_forward_latency() {
    // host - switch - host, 1 us links: the WRITE crosses two links, each
    // taking its serialisation then the propagation delay (the switch
    // forwards only a whole frame), and the ACK comes back the same way.
    for (rate, delay_ns, payload) in [(G100, 1000, 100), (G100, 1000, 1000), (25_000_000_000, 500, 512)] {
        let mut s = star(2, rate, delay_ns);
        s.nic.cc = "none".into();
        s.flows.push(flow(1, 2, payload, 0));
        let r = simulate(&s, None).unwrap();
        assert_eq!(r.ending, Some(Ending::Completed));
        let d = delay_ns * PS_PER_NS;
        let expect = 2 * (serialisation_ps(write_only_wire(payload), rate) + d)
            + 2 * (serialisation_ps(ACK_WIRE, rate) + d);
        assert_eq!(r.fct[0].fct_ps, expect, "rate {rate} delay {delay_ns} payload {payload}");
    }
}

#[test]
fn a_bottleneck_runs_at_line_rate() {
    // 2:1 incast of 2 MB each into one 100G port with PFC only: the last
    // flow ends when the bottleneck has carried every wire byte, within
    // one base RTT.
    let mut s = star(3, G100, 1000);
    s.nic.cc = "none".into();
    s.switch.ecn_enabled = false;
    s.flows.push(flow(1, 3, 2_000_000, 0));
    s.flows.push(flow(2, 3, 2_000_000, 0));
    let r = simulate(&s, None).unwrap();
    let last = r.fct.iter().map(|f| f.fct_ps).max().unwrap();
    let bytes = r.counters.host_rx_bytes; // includes the ACKs the receiver got: few
    let bound = serialisation_ps(bytes, G100);
    assert!(last >= bound, "{last} < {bound}");
    assert!(last < bound + 10 * PS_PER_US, "{last} vs {bound}");
}

#[test]
fn bytes_are_conserved_mid_run() {
    // Stopped in the middle of an incast with PFC: every byte a host sent
    // was received, dropped, or is still in a queue or on a link.
    for stop_us in [3, 40, 170] {
        let mut s = star(9, G100, 1000);
        s.nic.cc = "none".into();
        s.switch.ecn_enabled = false;
        s.switch.buffer_bytes = 1 << 20; // small: PFC engages
        for i in 2..=9 {
            s.flows.push(flow(i, 1, 1_000_000, 0));
        }
        s.stop_ps = Some(stop_us * PS_PER_US);
        let r = simulate(&s, None).unwrap();
        let c = r.counters;
        assert_eq!(r.ending, Some(Ending::StopTime));
        assert!(r.bytes_in_fabric > 0);
        assert_eq!(
            c.host_tx_bytes,
            c.host_rx_bytes + c.dropped_bytes + r.bytes_in_fabric,
            "{stop_us} us: {c:?}"
        );
        assert_eq!(c.dropped_bytes, 0, "lossless");
    }
}

#[test]
fn a_stalled_nic_keeps_its_switch_paused_by_refreshing() {
    // h1's NIC stops draining at once; h2 sends to it. With 100-quanta
    // pauses (512 ns at 100G) the NIC must refresh its XOFF every half
    // pause, and the switch's port to h1 stays paused throughout.
    let mut s = star(2, G100, 1000);
    s.nic.cc = "none".into();
    s.switch.pause_quanta = Some(100);
    s.flows.push(flow(2, 1, 4_000_000, 0));
    s.events.push(TimedEvent { at_ps: 0, kind: EventKind::NicStall { host: 1 } });
    s.stop_ps = Some(100 * PS_PER_US);
    s.monitor = MonitorConfig { ports: vec![(0, 1)], interval_ps: 100 * PS_PER_NS, flow_rates: false };
    let r = simulate(&s, None).unwrap();
    let first = r.pfc.iter().find(|p| p.pause && p.node == 0).expect("the switch was paused").time_ps;
    let after: Vec<_> = r.queues.iter().filter(|q| q.time_ps > first).collect();
    assert!(after.len() > 500);
    assert!(after.iter().all(|q| q.paused & 8 != 0), "the pause never lapsed");
    let span = 100 * PS_PER_US - first;
    let refreshes = r.counters.pfc_refresh_sent;
    let expected = span / (pause_quantum_ps(G100) * 50);
    assert!(refreshes.abs_diff(expected) <= expected / 50, "{refreshes} refreshes, {expected} expected");
}
