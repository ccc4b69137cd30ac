//! Writing a [`Scenario`] in the file's format.

use super::schema::*;
use super::units::*;
use crate::scenario::*;

/// Writes `s` in this module's format. [`from_str`] reads it back to an
/// equal scenario when `s` is valid, lists its hosts before its switches
/// (otherwise node ids come back renumbered that way; names, links, ports
/// and everything else are kept) and has no parallel links that events
/// take down or up (an event names a link by its ends).
pub fn to_toml(s: &Scenario) -> String {
    let name = |n: NodeId| s.nodes.get(n).map_or_else(|| format!("node{n}"), |x| x.name.clone());
    let of_kind = |k: NodeKind| s.nodes.iter().filter(|n| n.kind == k).map(|n| n.name.clone()).collect();
    let sw = &s.switch;
    let (xoff, xon, base_shift, base_rate, resume_offset, kind) = match sw.pfc {
        PfcThreshold::Static { xoff, xon } => {
            (Some(fmt_size(xoff)), Some(fmt_size(xon)), None, None, None, "static")
        }
        PfcThreshold::Dynamic { base_shift, base_rate_bps, resume_offset } => (
            None,
            None,
            Some(base_shift),
            Some(fmt_rate(base_rate_bps)),
            Some(fmt_size(resume_offset)),
            "dynamic",
        ),
    };
    let (scheduling, dwrr_weights) = match sw.scheduling {
        Scheduling::Strict => ("strict", None),
        Scheduling::Dwrr { weights } => ("dwrr", Some(weights.to_vec())),
    };
    let file = File {
        name: Some(s.name.clone()),
        seed: Some(s.seed),
        framing: Some(s.framing),
        stop: s.stop_ps.map(fmt_time),
        deadlock_check: Some(fmt_time(s.deadlock_check_ps)),
        hosts: of_kind(NodeKind::Host),
        switches: of_kind(NodeKind::Switch),
        host_group: Vec::new(),
        link_defaults: None,
        links: s
            .links
            .iter()
            .map(|l| Link {
                a: name(l.a),
                b: name(l.b),
                rate: Some(fmt_rate(l.rate_bps)),
                delay: Some(fmt_time(l.delay_ps)),
                loss: (l.loss != 0.0).then_some(l.loss),
                faults: (l.faults != LinkFaults::default()).then(|| FaultsT {
                    jitter: (l.faults.jitter_ps != 0).then(|| fmt_time(l.faults.jitter_ps)),
                    reorder: (l.faults.reorder != 0.0).then_some(l.faults.reorder),
                    reorder_delay: (l.faults.reorder_delay_ps != 0)
                        .then(|| fmt_time(l.faults.reorder_delay_ps)),
                    duplicate: (l.faults.duplicate != 0.0).then_some(l.faults.duplicate),
                    corrupt: (l.faults.corrupt != 0.0).then_some(l.faults.corrupt),
                }),
            })
            .collect(),
        flows: s
            .flows
            .iter()
            .map(|f| Flow {
                src: name(f.src),
                dst: name(f.dst),
                size: fmt_size(f.size),
                start: (f.start_ps != 0).then(|| fmt_time(f.start_ps)),
                priority: Some(f.priority),
                op: (f.op != FlowOp::Write).then_some(f.op),
                dport: (f.dport != HPCC_FLOW_DPORT).then_some(f.dport),
            })
            .collect(),
        incast: Vec::new(),
        switch: Some(SwitchT {
            buffer: Some(fmt_size(sw.buffer_bytes)),
            reserve: Some(fmt_size(sw.reserve_bytes)),
            headroom_rtts: Some(sw.headroom_rtts),
            lossless: Some((0..PRIORITIES as u8).filter(|p| sw.lossless_mask & (1 << p) != 0).collect()),
            pfc: Some(sw.pfc_enabled),
            ecn: Some(sw.ecn_enabled),
            scheduling: Some(scheduling.into()),
            dwrr_weights,
            pfc_threshold: Some(PfcT { kind: kind.into(), xoff, xon, base_shift, base_rate, resume_offset }),
            pause_quanta: sw.pause_quanta,
            ack_class: Some(sw.ack_class),
            headroom_extra: (!sw.headroom_extra.is_empty()).then(|| {
                sw.headroom_extra
                    .iter()
                    .map(|r| HeadroomT { rate: fmt_rate(r.rate_bps), bytes: fmt_size(r.extra_bytes) })
                    .collect()
            }),
            ecn_rules: Some(
                sw.ecn
                    .iter()
                    .map(|r| EcnT {
                        rate: fmt_rate(r.rate_bps),
                        kmin: fmt_size(r.kmin),
                        kmax: fmt_size(r.kmax),
                        pmax: r.pmax,
                    })
                    .collect(),
            ),
        }),
        nic: Some(NicT {
            mtu: Some(s.nic.mtu),
            cc: Some(s.nic.cc.clone()),
            dcqcn_set: Some(s.nic.dcqcn_set.clone()),
            dcqcn_params: Some(s.nic.dcqcn_params.clone()),
            ack_priority: Some(match s.nic.ack_priority {
                Some(p) => AckPrio::Prio(p),
                None => AckPrio::Word("flow".into()),
            }),
            chunk: Some(fmt_size(u64::from(s.nic.chunk_bytes))),
            max_unacked_psns: Some(s.nic.max_unacked_psns),
            ack_req_every: Some(s.nic.ack_req_every),
            rx_xoff: Some(fmt_size(s.nic.rx_xoff_bytes)),
        }),
        routes: s
            .routes
            .iter()
            .map(|r| Route { switch: name(r.switch), dst: name(r.dst), via: name(r.via) })
            .collect(),
        events: s
            .events
            .iter()
            .map(|e| {
                let link_ends = |l: usize| s.links.get(l).map(|l| (Some(name(l.a)), Some(name(l.b))));
                let (kind, ends, host) = match e.kind {
                    EventKind::LinkDown { link } => ("link_down", link_ends(link), None),
                    EventKind::LinkUp { link } => ("link_up", link_ends(link), None),
                    EventKind::NicStall { host } => ("nic_stall", None, Some(name(host))),
                    EventKind::NicResume { host } => ("nic_resume", None, Some(name(host))),
                };
                let (a, b) = ends.unwrap_or_default();
                Event { at: fmt_time(e.at_ps), kind: kind.into(), a, b, host }
            })
            .collect(),
        watchdog: s
            .watchdog
            .map(|w| WatchdogT { timeout: fmt_time(w.timeout_ps), restore: fmt_time(w.restore_ps) }),
        monitor: (s.monitor != MonitorConfig::default()).then(|| MonitorT {
            ports: s.monitor.ports.iter().map(|&(n, p)| format!("{}:{p}", name(n))).collect(),
            interval: Some(fmt_time(s.monitor.interval_ps)),
            flow_rates: Some(s.monitor.flow_rates),
        }),
    };
    toml::to_string(&file).expect("a scenario serialises as TOML")
}
