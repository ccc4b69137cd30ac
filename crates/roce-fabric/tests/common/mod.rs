//! Scenario builders shared by the tests.
#![allow(dead_code)]

use roce_fabric::*;

/// One switch (node 0) and `hosts` hosts (nodes 1..=hosts), every link
/// `rate` bit/s and `delay_ns`; HPCC's switch and NIC settings.
pub fn star(hosts: usize, rate: u64, delay_ns: u64) -> Scenario {
    let mut nodes = vec![NodeSpec { kind: NodeKind::Switch, name: "s0".into() }];
    let mut links = Vec::new();
    for i in 1..=hosts {
        nodes.push(NodeSpec { kind: NodeKind::Host, name: format!("h{i}") });
        links.push(LinkSpec {
            a: 0,
            b: i,
            rate_bps: rate,
            delay_ps: delay_ns * PS_PER_NS,
            loss: 0.0,
            faults: LinkFaults::default(),
        });
    }
    Scenario {
        name: "star".into(),
        seed: 1,
        nodes,
        links,
        flows: Vec::new(),
        switch: SwitchConfig::hpcc(),
        nic: NicConfig::hpcc(),
        framing: Framing::Ppp,
        routes: Vec::new(),
        events: Vec::new(),
        watchdog: None,
        stop_ps: None,
        deadlock_check_ps: 0,
        monitor: MonitorConfig::default(),
    }
}

pub fn flow(src: NodeId, dst: NodeId, size: u64, start_ps: Time) -> FlowSpec {
    FlowSpec { src, dst, priority: 3, size, start_ps, op: FlowOp::Write, dport: HPCC_FLOW_DPORT }
}
