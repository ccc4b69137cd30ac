//! Building a [`Scenario`] from the file's shape: names to node ids, host
//! groups and incasts expanded, quantities read with their units, defaults
//! filled in; the result then meets [`validate`].

use std::collections::HashMap;

use super::schema::*;
use super::units::*;
use crate::scenario::*;

pub(super) struct Names {
    ids: HashMap<String, NodeId>,
    nodes: Vec<NodeSpec>,
}

impl Names {
    fn add(&mut self, key: &str, name: &str, kind: NodeKind) -> Result<(), ScenarioError> {
        if name.is_empty() || name.contains(':') || name.contains("->") || name.trim() != name {
            return Err(bad_value(key, name, "a node name is non-empty, without spaces around, ':' or '->'"));
        }
        if self.ids.insert(name.to_string(), self.nodes.len()).is_some() {
            return Err(ScenarioError::DuplicateName(name.to_string()));
        }
        self.nodes.push(NodeSpec { kind, name: name.to_string() });
        Ok(())
    }

    fn get(&self, key: &str, name: &str) -> Result<NodeId, ScenarioError> {
        self.ids
            .get(name)
            .copied()
            .ok_or_else(|| ScenarioError::UnknownNode { key: key.into(), name: name.into() })
    }

    fn get_kind(&self, key: &str, name: &str, kind: NodeKind) -> Result<NodeId, ScenarioError> {
        let id = self.get(key, name)?;
        if self.nodes[id].kind != kind {
            return Err(ScenarioError::WrongKind {
                key: key.into(),
                name: name.into(),
                expected: kind_name(kind),
                found: kind_name(self.nodes[id].kind),
            });
        }
        Ok(id)
    }
}

pub(super) fn build(text: &str, default_name: Option<String>) -> Result<Scenario, ScenarioError> {
    let f: File = toml::from_str(text).map_err(|e| ScenarioError::Syntax(e.to_string()))?;

    // Nodes.
    let mut names = Names { ids: HashMap::new(), nodes: Vec::new() };
    for n in expand_names("hosts", &f.hosts)? {
        names.add("hosts", &n, NodeKind::Host)?;
    }
    let mut group_hosts = Vec::new();
    for (g, hg) in f.host_group.iter().enumerate() {
        let key = format!("host_group[{g}]");
        if hg.count == 0 {
            return Err(invalid(format!("{key}.count"), "a host group has at least one host"));
        }
        let first = hg.first.unwrap_or(1);
        let mut ids = Vec::new();
        for i in 0..hg.count {
            let n = format!("{}{}", hg.prefix, u64::from(first) + u64::from(i));
            names.add(&format!("{key}.prefix"), &n, NodeKind::Host)?;
            ids.push(names.nodes.len() - 1);
        }
        group_hosts.push(ids);
    }
    for n in expand_names("switches", &f.switches)? {
        names.add("switches", &n, NodeKind::Switch)?;
    }

    // Links.
    let defaults = f.link_defaults.unwrap_or_default();
    let link_rate = |key: &str, r: &Option<Qty>| -> Result<u64, ScenarioError> {
        match r.as_ref().or(defaults.rate.as_ref()) {
            Some(q) => rate(key, q),
            None => Err(invalid(key, "no rate, and no [link_defaults] rate")),
        }
    };
    let link_delay = |key: &str, d: &Option<Qty>| -> Result<Time, ScenarioError> {
        match d.as_ref().or(defaults.delay.as_ref()) {
            Some(q) => duration(key, q),
            None => Err(invalid(key, "no delay, and no [link_defaults] delay")),
        }
    };
    let link_loss = |key: &str, l: Option<f64>| loss(key, l.or(defaults.loss).unwrap_or(0.0));
    let mut links = Vec::new();
    for (g, hg) in f.host_group.iter().enumerate() {
        let key = format!("host_group[{g}]");
        let Some(attach) = &hg.attach else {
            if hg.rate.is_some() || hg.delay.is_some() || hg.loss.is_some() {
                return Err(invalid(
                    key,
                    "rate, delay and loss are for the links of attach, which is missing",
                ));
            }
            continue;
        };
        let to = names.get(&format!("{key}.attach"), attach)?;
        let rate_bps = link_rate(&format!("{key}.rate"), &hg.rate)?;
        let delay_ps = link_delay(&format!("{key}.delay"), &hg.delay)?;
        let loss = link_loss(&format!("{key}.loss"), hg.loss)?;
        for &h in &group_hosts[g] {
            links.push(LinkSpec { a: h, b: to, rate_bps, delay_ps, loss, faults: LinkFaults::default() });
        }
    }
    for (i, l) in f.links.iter().enumerate() {
        let key = format!("links[{i}]");
        let a = names.get(&format!("{key}.a"), &l.a)?;
        let b = names.get(&format!("{key}.b"), &l.b)?;
        if a == b {
            return Err(ScenarioError::SelfLink { key, node: l.a.clone() });
        }
        links.push(LinkSpec {
            a,
            b,
            rate_bps: link_rate(&format!("{key}.rate"), &l.rate)?,
            delay_ps: link_delay(&format!("{key}.delay"), &l.delay)?,
            loss: link_loss(&format!("{key}.loss"), l.loss)?,
            faults: link_faults(&key, &l.faults)?,
        });
    }

    // Flows.
    let mut flows = Vec::new();
    for (i, fl) in f.flows.iter().enumerate() {
        let key = format!("flows[{i}]");
        let src = names.get_kind(&format!("{key}.src"), &fl.src, NodeKind::Host)?;
        let dst = names.get_kind(&format!("{key}.dst"), &fl.dst, NodeKind::Host)?;
        if src == dst {
            return Err(invalid(key, format!("a flow from {:?} to itself", fl.src)));
        }
        let size = size(&format!("{key}.size"), &fl.size)?;
        if size == 0 {
            return Err(bad_value(
                &format!("{key}.size"),
                &fl.size.to_string(),
                "a flow carries at least one byte",
            ));
        }
        flows.push(FlowSpec {
            src,
            dst,
            priority: priority(&format!("{key}.priority"), fl.priority.unwrap_or(3))?,
            size,
            start_ps: fl
                .start
                .as_ref()
                .map(|q| duration(&format!("{key}.start"), q))
                .transpose()?
                .unwrap_or(0),
            op: fl.op.unwrap_or_default(),
            dport: fl.dport.unwrap_or(HPCC_FLOW_DPORT),
        });
    }
    for (i, ic) in f.incast.iter().enumerate() {
        let key = format!("incast[{i}]");
        let dst = names.get_kind(&format!("{key}.receiver"), &ic.receiver, NodeKind::Host)?;
        let senders: Vec<NodeId> = match &ic.senders {
            Senders::Count(n) => {
                let all: Vec<NodeId> = (0..names.nodes.len())
                    .filter(|&h| names.nodes[h].kind == NodeKind::Host && h != dst)
                    .collect();
                if *n == 0 || *n as usize > all.len() {
                    return Err(bad_value(
                        &format!("{key}.senders"),
                        &n.to_string(),
                        format!("between 1 and {} hosts other than the receiver", all.len()),
                    ));
                }
                all[..*n as usize].to_vec()
            }
            Senders::Names(list) => {
                let k = format!("{key}.senders");
                let list = expand_names(&k, list)?;
                if list.is_empty() {
                    return Err(invalid(k, "an incast has at least one sender"));
                }
                let mut ids = Vec::new();
                for n in &list {
                    let id = names.get_kind(&k, n, NodeKind::Host)?;
                    if id == dst {
                        return Err(invalid(k, format!("the receiver {n:?} is also a sender")));
                    }
                    ids.push(id);
                }
                ids
            }
        };
        let size = size(&format!("{key}.size"), &ic.size)?;
        if size == 0 {
            return Err(bad_value(
                &format!("{key}.size"),
                &ic.size.to_string(),
                "a flow carries at least one byte",
            ));
        }
        let start = ic.start.as_ref().map(|q| duration(&format!("{key}.start"), q)).transpose()?.unwrap_or(0);
        let stagger =
            ic.stagger.as_ref().map(|q| duration(&format!("{key}.stagger"), q)).transpose()?.unwrap_or(0);
        let prio = priority(&format!("{key}.priority"), ic.priority.unwrap_or(3))?;
        for (k, &src) in senders.iter().enumerate() {
            flows.push(FlowSpec {
                src,
                dst,
                priority: prio,
                size,
                start_ps: start + stagger * k as u64,
                op: ic.op.unwrap_or_default(),
                dport: ic.dport.unwrap_or(HPCC_FLOW_DPORT),
            });
        }
    }

    let switch = match &f.switch {
        None => SwitchConfig::hpcc(),
        Some(s) => switch_config(s)?,
    };
    let nic = match &f.nic {
        None => NicConfig::hpcc(),
        Some(n) => nic_config(n)?,
    };

    // Routes.
    let neighbours =
        |a: NodeId, b: NodeId| links.iter().any(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a));
    let mut routes = Vec::new();
    for (i, r) in f.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        let switch = names.get_kind(&format!("{key}.switch"), &r.switch, NodeKind::Switch)?;
        let dst = names.get_kind(&format!("{key}.dst"), &r.dst, NodeKind::Host)?;
        let via = names.get(&format!("{key}.via"), &r.via)?;
        if !neighbours(switch, via) {
            return Err(invalid(format!("{key}.via"), format!("{:?} has no link to {:?}", r.switch, r.via)));
        }
        routes.push(RouteSpec { switch, dst, via });
    }

    // Events.
    let mut events = Vec::new();
    for (i, e) in f.events.iter().enumerate() {
        let key = format!("events[{i}]");
        let at_ps = duration(&format!("{key}.at"), &e.at)?;
        match e.kind.as_str() {
            "link_down" | "link_up" => {
                let (Some(a), Some(b), None) = (&e.a, &e.b, &e.host) else {
                    return Err(invalid(key, format!("{} takes a and b (the two ends), not host", e.kind)));
                };
                let (ia, ib) = (names.get(&format!("{key}.a"), a)?, names.get(&format!("{key}.b"), b)?);
                let found: Vec<usize> = (0..links.len())
                    .filter(|&l| {
                        (links[l].a == ia && links[l].b == ib) || (links[l].a == ib && links[l].b == ia)
                    })
                    .collect();
                if found.is_empty() {
                    return Err(invalid(key, format!("no link between {a:?} and {b:?}")));
                }
                for link in found {
                    let kind = if e.kind == "link_down" {
                        EventKind::LinkDown { link }
                    } else {
                        EventKind::LinkUp { link }
                    };
                    events.push(TimedEvent { at_ps, kind });
                }
            }
            "nic_stall" | "nic_resume" => {
                let (None, None, Some(h)) = (&e.a, &e.b, &e.host) else {
                    return Err(invalid(key, format!("{} takes host, not a or b", e.kind)));
                };
                let host = names.get_kind(&format!("{key}.host"), h, NodeKind::Host)?;
                let kind = if e.kind == "nic_stall" {
                    EventKind::NicStall { host }
                } else {
                    EventKind::NicResume { host }
                };
                events.push(TimedEvent { at_ps, kind });
            }
            other => {
                return Err(bad_value(
                    &format!("{key}.kind"),
                    other,
                    "expected link_down, link_up, nic_stall or nic_resume",
                ))
            }
        }
    }

    let watchdog = match &f.watchdog {
        None => None,
        Some(w) => {
            let timeout_ps = duration("watchdog.timeout", &w.timeout)?;
            if timeout_ps == 0 {
                return Err(bad_value(
                    "watchdog.timeout",
                    &w.timeout.to_string(),
                    "the timeout must be above zero",
                ));
            }
            Some(WatchdogConfig { timeout_ps, restore_ps: duration("watchdog.restore", &w.restore)? })
        }
    };

    // Monitor.
    let ports_of = |n: NodeId| -> Vec<NodeId> {
        links
            .iter()
            .filter_map(|l| {
                if l.a == n {
                    Some(l.b)
                } else if l.b == n {
                    Some(l.a)
                } else {
                    None
                }
            })
            .collect()
    };
    let monitor = match &f.monitor {
        None => MonitorConfig::default(),
        Some(m) => {
            let mut ports = Vec::new();
            for (i, p) in m.ports.iter().enumerate() {
                let key = format!("monitor.ports[{i}]");
                let port = if let Some((node, peer)) = p.split_once("->") {
                    let n = names.get(&key, node.trim())?;
                    let peer_id = names.get(&key, peer.trim())?;
                    match ports_of(n).iter().position(|&q| q == peer_id) {
                        Some(k) => (n, k as u32 + 1),
                        None => return Err(invalid(key, format!("{node:?} has no link to {peer:?}"))),
                    }
                } else if let Some((node, port)) = p.split_once(':') {
                    let n = names.get(&key, node.trim())?;
                    let deg = ports_of(n).len();
                    match port.trim().parse::<u32>() {
                        Ok(k) if k >= 1 && k as usize <= deg => (n, k),
                        _ => return Err(bad_value(&key, p, format!("{node:?} has ports 1..={deg}"))),
                    }
                } else {
                    return Err(bad_value(&key, p, "expected \"node:port\" or \"node->peer\""));
                };
                ports.push(port);
            }
            let interval_ps = m
                .interval
                .as_ref()
                .map(|q| duration("monitor.interval", q))
                .transpose()?
                .unwrap_or(PS_PER_US);
            MonitorConfig { ports, interval_ps, flow_rates: m.flow_rates.unwrap_or(false) }
        }
    };

    let scn = Scenario {
        name: f.name.or(default_name).unwrap_or_else(|| "scenario".into()),
        seed: f.seed.unwrap_or(1),
        nodes: names.nodes,
        links,
        flows,
        switch,
        nic,
        framing: f.framing.unwrap_or_default(),
        routes,
        events,
        watchdog,
        stop_ps: f.stop.as_ref().map(|q| duration("stop", q)).transpose()?,
        deadlock_check_ps: match &f.deadlock_check {
            Some(q) => duration("deadlock_check", q)?,
            None => 100 * PS_PER_US,
        },
        monitor,
    };
    validate(&scn)?;
    Ok(scn)
}

pub(super) fn switch_config(s: &SwitchT) -> Result<SwitchConfig, ScenarioError> {
    let mut c = SwitchConfig::hpcc();
    if let Some(q) = &s.buffer {
        c.buffer_bytes = size("switch.buffer", q)?;
    }
    if let Some(q) = &s.reserve {
        c.reserve_bytes = size("switch.reserve", q)?;
    }
    if let Some(h) = s.headroom_rtts {
        c.headroom_rtts = h;
    }
    if let Some(l) = &s.lossless {
        c.lossless_mask = 0;
        for (i, &p) in l.iter().enumerate() {
            c.lossless_mask |= 1 << priority(&format!("switch.lossless[{i}]"), p)?;
        }
    }
    if let Some(p) = s.pfc {
        c.pfc_enabled = p;
    }
    if let Some(e) = s.ecn {
        c.ecn_enabled = e;
    }
    if let Some(q) = s.pause_quanta {
        if q == 0 {
            return Err(bad_value("switch.pause_quanta", "0", "an XOFF pauses for 1 to 65535 quanta"));
        }
        c.pause_quanta = Some(q);
    }
    if let Some(a) = s.ack_class {
        c.ack_class = a;
    }
    match (s.scheduling.as_deref(), &s.dwrr_weights) {
        (None | Some("strict"), None) => {
            if s.scheduling.is_some() {
                c.scheduling = Scheduling::Strict;
            }
        }
        (Some("dwrr"), Some(w)) => {
            let weights: [u32; PRIORITIES] = w.as_slice().try_into().map_err(|_| {
                bad_value("switch.dwrr_weights", &format!("{w:?}"), "one weight per priority: 8 of them")
            })?;
            c.scheduling = Scheduling::Dwrr { weights };
        }
        (Some("dwrr"), None) => {
            return Err(invalid("switch.dwrr_weights", "scheduling = \"dwrr\" needs 8 weights"))
        }
        (None | Some("strict"), Some(_)) => {
            return Err(invalid("switch.dwrr_weights", "weights are for scheduling = \"dwrr\""));
        }
        (Some(other), _) => return Err(bad_value("switch.scheduling", other, "expected strict or dwrr")),
    }
    if let Some(p) = &s.pfc_threshold {
        c.pfc = match p.kind.as_str() {
            "static" => {
                if p.base_shift.is_some() || p.base_rate.is_some() || p.resume_offset.is_some() {
                    return Err(invalid(
                        "switch.pfc_threshold",
                        "a static threshold takes xoff and xon only",
                    ));
                }
                let (Some(xoff), Some(xon)) = (&p.xoff, &p.xon) else {
                    return Err(invalid("switch.pfc_threshold", "a static threshold needs xoff and xon"));
                };
                PfcThreshold::Static {
                    xoff: size("switch.pfc_threshold.xoff", xoff)?,
                    xon: size("switch.pfc_threshold.xon", xon)?,
                }
            }
            "dynamic" => {
                if p.xoff.is_some() || p.xon.is_some() {
                    return Err(invalid(
                        "switch.pfc_threshold",
                        "a dynamic threshold takes base_shift, base_rate and resume_offset, not xoff/xon",
                    ));
                }
                PfcThreshold::Dynamic {
                    base_shift: p.base_shift.unwrap_or(3),
                    base_rate_bps: p
                        .base_rate
                        .as_ref()
                        .map(|q| rate("switch.pfc_threshold.base_rate", q))
                        .transpose()?
                        .unwrap_or(100_000_000_000),
                    resume_offset: p
                        .resume_offset
                        .as_ref()
                        .map(|q| size("switch.pfc_threshold.resume_offset", q))
                        .transpose()?
                        .unwrap_or(3 * 1024),
                }
            }
            other => return Err(bad_value("switch.pfc_threshold.kind", other, "expected static or dynamic")),
        };
    }
    if let Some(rules) = &s.ecn_rules {
        c.ecn = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let key = format!("switch.ecn_rules[{i}]");
            c.ecn.push(EcnRule {
                rate_bps: rate(&format!("{key}.rate"), &r.rate)?,
                kmin: size(&format!("{key}.kmin"), &r.kmin)?,
                kmax: size(&format!("{key}.kmax"), &r.kmax)?,
                pmax: r.pmax,
            });
        }
    }
    if let Some(rules) = &s.headroom_extra {
        c.headroom_extra = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let key = format!("switch.headroom_extra[{i}]");
            c.headroom_extra.push(HeadroomRule {
                rate_bps: rate(&format!("{key}.rate"), &r.rate)?,
                extra_bytes: size(&format!("{key}.bytes"), &r.bytes)?,
            });
        }
    }
    Ok(c)
}

pub(super) fn nic_config(n: &NicT) -> Result<NicConfig, ScenarioError> {
    let mut c = NicConfig::hpcc();
    if let Some(m) = n.mtu {
        c.mtu = m;
    }
    if let Some(cc) = &n.cc {
        c.cc = cc.clone();
    }
    if let Some(s) = &n.dcqcn_set {
        c.dcqcn_set = s.clone();
    }
    if let Some(p) = &n.dcqcn_params {
        c.dcqcn_params = p.clone();
    }
    match &n.ack_priority {
        None => {}
        Some(AckPrio::Prio(p)) => c.ack_priority = Some(priority("nic.ack_priority", *p)?),
        Some(AckPrio::Word(w)) if w == "flow" => c.ack_priority = None,
        Some(AckPrio::Word(w)) => return Err(bad_value("nic.ack_priority", w, "expected 0..=7 or \"flow\"")),
    }
    if let Some(q) = &n.chunk {
        let v = size("nic.chunk", q)?;
        c.chunk_bytes =
            u32::try_from(v).map_err(|_| bad_value("nic.chunk", &q.to_string(), "at most 4 GiB - 1"))?;
    }
    if let Some(w) = n.max_unacked_psns {
        c.max_unacked_psns = w;
    }
    if let Some(a) = n.ack_req_every {
        if a == 0 {
            return Err(bad_value("nic.ack_req_every", "0", "at least 1 (an ACK per packet)"));
        }
        c.ack_req_every = a;
    }
    if let Some(q) = &n.rx_xoff {
        c.rx_xoff_bytes = size("nic.rx_xoff", q)?;
    }
    Ok(c)
}

pub(super) fn link_faults(key: &str, f: &Option<FaultsT>) -> Result<LinkFaults, ScenarioError> {
    let Some(f) = f else { return Ok(LinkFaults::default()) };
    let prob = |name: &str, v: Option<f64>| -> Result<f64, ScenarioError> {
        match v {
            None => Ok(0.0),
            Some(p) if (0.0..=1.0).contains(&p) => Ok(p),
            Some(p) => {
                Err(bad_value(&format!("{key}.faults.{name}"), &p.to_string(), "a probability, 0 to 1"))
            }
        }
    };
    let time = |name: &str, q: &Option<Qty>| -> Result<Time, ScenarioError> {
        q.as_ref().map_or(Ok(0), |q| duration(&format!("{key}.faults.{name}"), q))
    };
    Ok(LinkFaults {
        jitter_ps: time("jitter", &f.jitter)?,
        reorder: prob("reorder", f.reorder)?,
        reorder_delay_ps: time("reorder_delay", &f.reorder_delay)?,
        duplicate: prob("duplicate", f.duplicate)?,
        corrupt: prob("corrupt", f.corrupt)?,
    })
}
