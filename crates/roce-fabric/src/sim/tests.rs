use super::*;
use crate::scenario::*;

fn one_host() -> Scenario {
    Scenario {
        name: "t".into(),
        seed: 1,
        nodes: vec![
            NodeSpec { kind: NodeKind::Switch, name: "s".into() },
            NodeSpec { kind: NodeKind::Host, name: "h".into() },
        ],
        links: vec![LinkSpec {
            a: 0,
            b: 1,
            rate_bps: 100_000_000_000,
            delay_ps: PS_PER_US,
            loss: 0.0,
            faults: LinkFaults::default(),
        }],
        flows: vec![],
        switch: SwitchConfig { pause_quanta: Some(100), ..SwitchConfig::hpcc() },
        nic: NicConfig::hpcc(),
        framing: Framing::Ethernet,
        routes: vec![],
        // Something due later keeps the sampling going.
        events: vec![TimedEvent { at_ps: 2 * PS_PER_US, kind: EventKind::NicResume { host: 1 } }],
        watchdog: None,
        stop_ps: Some(2 * PS_PER_US),
        deadlock_check_ps: 0,
        monitor: MonitorConfig { ports: vec![(0, 1)], interval_ps: PS_PER_NS, flow_rates: false },
    }
}

/// An XOFF of 100 quanta pauses a 100G port for 100 x 512 bit times =
/// 512 ns, then it resumes by itself (IEEE 802.1Qbb).
#[test]
fn a_pause_runs_out_after_its_quanta() {
    let scn = one_host();
    let mut sim = Sim::new(&scn).unwrap();
    sim.pfc_received(0, 3, 100);
    sim.run(None);
    let r = sim.finish();
    let paused_at = |ns: u64| r.queues.iter().find(|q| q.time_ps == ns * PS_PER_NS).unwrap().paused & 8 != 0;
    assert!(paused_at(0) && paused_at(511));
    assert!(!paused_at(513) && !paused_at(1500));
    // A refresh before it runs out extends it by a full pause.
    let mut sim = Sim::new(&scn).unwrap();
    sim.pfc_received(0, 3, 100);
    sim.now = 300 * PS_PER_NS;
    sim.pfc_received(0, 3, 100);
    sim.run(None);
    let r = sim.finish();
    let paused_at = |ns: u64| r.queues.iter().find(|q| q.time_ps == ns * PS_PER_NS).unwrap().paused & 8 != 0;
    assert!(paused_at(511) && paused_at(811));
    assert!(!paused_at(813));
    // XON ends it at once; only state changes are recorded.
    assert_eq!(r.pfc.len(), 1);
}

/// A hop names nodes and ports in 16 bits: a bigger fabric is refused
/// with a reason, not truncated.
#[test]
fn a_fabric_beyond_16_bit_names_is_refused() {
    let mut scn = one_host();
    let extra = (1 << 16) - scn.nodes.len() + 1;
    scn.nodes.extend((0..extra).map(|i| NodeSpec { kind: NodeKind::Host, name: format!("x{i}") }));
    let Err(e @ FabricError::TooLarge { nodes: 65537, .. }) = Sim::build(Rc::new(scn), NoHooks) else {
        panic!("65537 nodes were accepted");
    };
    let why = e.to_string();
    assert!(why.contains("65537 nodes"), "{why}");
    assert!(Sim::build(Rc::new(one_host()), NoHooks).is_ok());
}
