//! A PFC and ECN plan for a fabric (`roce fabric plan`): from a topology
//! (its links' rates and cable delays), the MTU, the switches' buffer and
//! the lossless priorities, the settings a RoCE deployment needs — per
//! switch port and lossless priority the PFC headroom ([`headroom`], IEEE
//! 802.1Qbb's terms), the dynamic XOFF threshold's alpha with the XOFF and
//! XON it gives, ECN Kmin/Kmax/Pmax per port rate and the NICs' DCQCN
//! parameters ([`rules`], each rule with its published source) — written
//! as a scenario's `[switch]` and `[nic]` sections, and then checked by
//! simulation ([`check`]: a worst-case incast and a workload, which must
//! drop nothing).
//!
//! How a plan becomes the simulator's settings: the headroom of a port of
//! rate R on a cable of one-way delay d is `headroom_rtts x R x d` (the
//! cable both ways: `headroom_rtts` = 2) plus the rule of
//! `headroom_extra` for R (the other terms, which do not depend on the
//! cable), both times `headroom_scale` (1 for a plan; less to see one
//! fail). [`crate::SwitchConfig::headroom_bytes`] is the one formula the
//! plan prints and the simulator's buffer uses.
//!
//! The shared pool the thresholds divide is the buffer less every port's
//! headroom for each lossless priority and the reserves. (The simulator's
//! buffer sets aside one headroom per port however many priorities are
//! lossless; with one lossless priority the two agree.)

pub mod check;
mod explain;
pub mod headroom;
pub mod rules;

use std::collections::BTreeMap;

use crate::scenario::{
    validate, EcnRule, Framing, HeadroomRule, NicConfig, NodeId, NodeKind, PfcThreshold, Scenario,
    ScenarioError, SwitchConfig, Time, PRIORITIES,
};
use crate::toml_scenario;
use headroom::{largest_frame, HeadroomTerms};

/// What a plan is made for, besides the topology.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInput {
    /// IB path MTU of the NICs (256, 512, 1024, 2048 or 4096).
    pub mtu: u32,
    /// Each switch's buffer, bytes.
    pub buffer_bytes: u64,
    /// Lossless (PFC) priorities, a bit mask.
    pub lossless_mask: u8,
    /// Every port's headroom times this (1: the plan; below 1 to see a
    /// plan fail its check).
    pub headroom_scale: f64,
    pub framing: Framing,
    /// The NICs' DCQCN parameter set (`hpcc`, `nvidia` or `paper`; the
    /// steps are scaled to the NIC rate in each).
    pub dcqcn_set: String,
}

/// Why no plan can be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the topology has no switch: there is no port to plan")]
    NoSwitch,
    #[error("the topology has no host")]
    NoHost,
    #[error("MTU {0}: expected an IB path MTU (256, 512, 1024, 2048 or 4096)")]
    BadMtu(u32),
    #[error("headroom scale {0}: expected a finite number above 0")]
    BadScale(f64),
    #[error("no lossless priority: PFC has nothing to protect")]
    NoLossless,
    #[error("DCQCN set {0:?}: expected hpcc, nvidia or paper")]
    DcqcnSet(String),
    #[error(
        "switch {switch}: its ports' headroom and reserves take {needed} bytes, its buffer has {buffer}: \
         no shared buffer is left"
    )]
    BufferTooSmall { switch: String, buffer: u64, needed: u64 },
    #[error("the topology: {0}")]
    Topology(#[from] ScenarioError),
}

/// Switch ports that share a plan: same peer kind, rate and cable.
#[derive(Debug, Clone, PartialEq)]
pub struct PortClass {
    pub facing_host: bool,
    pub rate_bps: u64,
    pub delay_ps: Time,
    /// Ports of this class in the whole fabric.
    pub ports: usize,
    pub terms: HeadroomTerms,
    /// Per lossless priority, as the simulator sizes it (scaled).
    pub headroom_bytes: u64,
    /// The dynamic threshold's alpha for the port.
    pub alpha: f64,
}

/// An ingress class's thresholds in one group of switches.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub class: usize,
    /// Ports of the class on one switch.
    pub ports: usize,
    /// XOFF (shared bytes of one ingress queue) with only that queue
    /// congested, and with every lossless queue of the switch congested.
    pub xoff_one: u64,
    pub xoff_all: u64,
    /// XON: `resume_offset` below each.
    pub xon_one: u64,
    pub xon_all: u64,
}

/// Switches with the same ports (a fat-tree's ToRs, aggregation, core).
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchGroup {
    /// The first switch's name and how many there are.
    pub example: String,
    pub count: usize,
    pub ports: usize,
    /// Headroom of all ports and lossless priorities, and the reserves.
    pub headroom_total: u64,
    pub reserve_total: u64,
    /// What is left to share: buffer - headroom - reserves.
    pub pool: u64,
    pub thresholds: Vec<Threshold>,
}

/// Why a Kmax is below the published rule's.
#[derive(Debug, Clone, PartialEq)]
pub struct KmaxLowered {
    pub group: String,
    pub ingress_rate_bps: u64,
    /// Ingress ports it takes to overload the egress.
    pub k: u64,
    /// The largest Kmax that marks before they pause.
    pub bound: u64,
}

/// ECN of one port rate.
#[derive(Debug, Clone, PartialEq)]
pub struct EcnPlan {
    pub rule: EcnRule,
    /// The published rule's, before the ECN-before-PFC check.
    pub published: EcnRule,
    pub lowered: Option<KmaxLowered>,
}

/// The plan of a fabric.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub name: String,
    pub input: PlanInput,
    pub hosts: usize,
    pub switches: usize,
    /// The NICs' rate (the slowest host link).
    pub nic_rate_bps: u64,
    pub largest_frame: u64,
    pub classes: Vec<PortClass>,
    pub groups: Vec<SwitchGroup>,
    pub ecn: Vec<EcnPlan>,
    /// The settings, as the scenario's sections.
    pub switch: SwitchConfig,
    pub nic: NicConfig,
}

/// A switch port: (facing a host, rate, delay).
type PortKey = (bool, u64, Time);

/// Every switch's ports, in port order.
fn switch_ports(scn: &Scenario) -> BTreeMap<NodeId, Vec<PortKey>> {
    let mut ports: BTreeMap<NodeId, Vec<PortKey>> = BTreeMap::new();
    for l in &scn.links {
        for (me, peer) in [(l.a, l.b), (l.b, l.a)] {
            if scn.nodes[me].kind == NodeKind::Switch {
                let facing_host = scn.nodes[peer].kind == NodeKind::Host;
                ports.entry(me).or_default().push((facing_host, l.rate_bps, l.delay_ps));
            }
        }
    }
    ports
}

/// Plans `topology` (its nodes and links; flows and settings are not
/// read) for `input`.
pub fn plan(topology: &Scenario, input: &PlanInput) -> Result<Plan, PlanError> {
    if !crate::hpcc::IB_MTUS.contains(&input.mtu) {
        return Err(PlanError::BadMtu(input.mtu));
    }
    if !(input.headroom_scale.is_finite() && input.headroom_scale > 0.0) {
        return Err(PlanError::BadScale(input.headroom_scale));
    }
    if input.lossless_mask == 0 {
        return Err(PlanError::NoLossless);
    }
    if roce_proto::cc::DcqcnParams::named(&input.dcqcn_set).is_err() {
        return Err(PlanError::DcqcnSet(input.dcqcn_set.clone()));
    }
    validate(topology)?;
    let hosts: Vec<NodeId> = topology.hosts().collect();
    let nic_rate_bps = topology
        .links
        .iter()
        .filter(|l| topology.nodes[l.a].kind == NodeKind::Host || topology.nodes[l.b].kind == NodeKind::Host)
        .map(|l| l.rate_bps)
        .min()
        .ok_or(PlanError::NoHost)?;
    let ports = switch_ports(topology);
    if ports.is_empty() {
        return Err(PlanError::NoSwitch);
    }
    let frame = largest_frame(input.mtu, input.framing);
    let lossless = u64::from(input.lossless_mask.count_ones());

    // Port classes.
    // Host-facing ports first, then by rate and cable.
    let mut keys: Vec<PortKey> = ports.values().flatten().copied().collect();
    keys.sort_unstable_by_key(|&(host, rate, delay)| (!host, rate, delay));
    keys.dedup();
    let mut switch = SwitchConfig::hpcc();
    switch.buffer_bytes = input.buffer_bytes;
    switch.lossless_mask = input.lossless_mask;
    switch.headroom_rtts = 2.0 * input.headroom_scale;
    let mut rates: Vec<u64> = keys.iter().map(|k| k.1).collect();
    rates.sort_unstable();
    rates.dedup();
    switch.headroom_extra = rates
        .iter()
        .map(|&rate| {
            let beyond = HeadroomTerms::new(rate, 0, frame, input.framing).beyond_cable();
            HeadroomRule { rate_bps: rate, extra_bytes: (beyond as f64 * input.headroom_scale).ceil() as u64 }
        })
        .collect();
    switch.pfc = PfcThreshold::Dynamic {
        base_shift: rules::BASE_SHIFT,
        base_rate_bps: nic_rate_bps,
        resume_offset: rules::XON_FRAMES * frame,
    };
    let class_of = |k: &PortKey| keys.iter().position(|x| x == k).unwrap_or(0);
    let mut classes: Vec<PortClass> = keys
        .iter()
        .map(|&(facing_host, rate_bps, delay_ps)| PortClass {
            facing_host,
            rate_bps,
            delay_ps,
            ports: 0,
            terms: HeadroomTerms::new(rate_bps, delay_ps, frame, input.framing),
            headroom_bytes: switch.headroom_bytes(rate_bps, delay_ps, frame),
            alpha: rules::alpha(nic_rate_bps, rate_bps),
        })
        .collect();
    for k in ports.values().flatten() {
        classes[class_of(k)].ports += 1;
    }

    // Switch groups, their pools and thresholds.
    let mut by_shape: BTreeMap<Vec<usize>, (NodeId, usize)> = BTreeMap::new();
    for (&node, list) in &ports {
        let mut shape: Vec<usize> = list.iter().map(&class_of).collect();
        shape.sort_unstable();
        by_shape.entry(shape).or_insert((node, 0)).1 += 1;
    }
    let mut groups = Vec::new();
    for (shape, (first, count)) in &by_shape {
        let name = topology.nodes[*first].name.clone();
        let headroom_total: u64 = shape.iter().map(|&c| classes[c].headroom_bytes * lossless).sum();
        let reserve_total = switch.reserve_bytes * shape.len() as u64;
        let needed = headroom_total + reserve_total;
        if needed >= input.buffer_bytes {
            return Err(PlanError::BufferTooSmall { switch: name, buffer: input.buffer_bytes, needed });
        }
        let pool = input.buffer_bytes - needed;
        let alpha_sum: f64 = shape.iter().map(|&c| classes[c].alpha * lossless as f64).sum();
        let mut thresholds: Vec<Threshold> = Vec::new();
        for &c in shape {
            if let Some(t) = thresholds.iter_mut().find(|t| t.class == c) {
                t.ports += 1;
                continue;
            }
            let a = classes[c].alpha;
            let xoff_one = rules::xoff_at(a, 1, pool);
            let xoff_all = (a * pool as f64 / (1.0 + alpha_sum)) as u64;
            let offset = rules::XON_FRAMES * frame;
            thresholds.push(Threshold {
                class: c,
                ports: 1,
                xoff_one,
                xoff_all,
                xon_one: xoff_one.saturating_sub(offset),
                xon_all: xoff_all.saturating_sub(offset),
            });
        }
        groups.push(SwitchGroup {
            example: name,
            count: *count,
            ports: shape.len(),
            headroom_total,
            reserve_total,
            pool,
            thresholds,
        });
    }

    // ECN per rate, then ECN before PFC.
    let mut ecn: Vec<EcnPlan> = rates
        .iter()
        .map(|&r| EcnPlan { rule: rules::ecn_rule(r), published: rules::ecn_rule(r), lowered: None })
        .collect();
    for g in &groups {
        for e in &mut ecn {
            let egress_here = g.thresholds.iter().any(|t| classes[t.class].rate_bps == e.rule.rate_bps);
            if !egress_here {
                continue;
            }
            for t in &g.thresholds {
                let c = &classes[t.class];
                let same_rate = c.rate_bps == e.rule.rate_bps;
                let available = t.ports as u64 - u64::from(same_rate);
                let Some((bound, k)) =
                    rules::kmax_bound(e.rule.rate_bps, c.rate_bps, c.alpha, available, g.pool)
                else {
                    continue;
                };
                if bound <= e.rule.kmax {
                    let kmax = (bound as f64 * rules::KMAX_MARGIN) as u64;
                    e.rule.kmax = kmax;
                    e.rule.kmin = e.rule.kmin.min(kmax / 4);
                    e.lowered = Some(KmaxLowered {
                        group: g.example.clone(),
                        ingress_rate_bps: c.rate_bps,
                        k,
                        bound,
                    });
                }
            }
        }
    }
    switch.ecn = ecn.iter().map(|e| e.rule).collect();

    let mut nic = NicConfig::hpcc();
    nic.mtu = input.mtu;
    nic.cc = "dcqcn".into();
    nic.dcqcn_set = input.dcqcn_set.to_lowercase();
    nic.dcqcn_params = rules::dcqcn_params(nic_rate_bps);
    Ok(Plan {
        name: topology.name.clone(),
        input: input.clone(),
        hosts: hosts.len(),
        switches: ports.len(),
        nic_rate_bps,
        largest_frame: frame,
        classes,
        groups,
        ecn,
        switch,
        nic,
    })
}

impl Plan {
    /// `scn` with the plan's switch, NIC and framing settings.
    pub fn apply(&self, scn: &Scenario) -> Scenario {
        let mut s = scn.clone();
        s.switch = self.switch.clone();
        s.nic = self.nic.clone();
        s.framing = self.input.framing;
        s
    }

    /// The plan as a scenario's `[switch]` and `[nic]` sections (the TOML
    /// format of [`crate::toml_scenario`]).
    pub fn toml_sections(&self) -> String {
        let scn = Scenario {
            name: self.name.clone(),
            seed: 1,
            nodes: Vec::new(),
            links: Vec::new(),
            flows: Vec::new(),
            switch: self.switch.clone(),
            nic: self.nic.clone(),
            framing: self.input.framing,
            routes: Vec::new(),
            events: Vec::new(),
            watchdog: None,
            stop_ps: None,
            deadlock_check_ps: 0,
            monitor: Default::default(),
        };
        let whole: toml::Table = toml::from_str(&toml_scenario::to_toml(&scn)).unwrap_or_default();
        let mut sections = toml::Table::new();
        for key in ["switch", "nic"] {
            if let Some(v) = whole.get(key) {
                sections.insert(key.into(), v.clone());
            }
        }
        toml::to_string(&sections).unwrap_or_default()
    }

    /// The lossless priorities, in order.
    pub fn lossless(&self) -> Vec<u8> {
        (0..PRIORITIES as u8).filter(|p| self.input.lossless_mask & (1 << p) != 0).collect()
    }
}

#[cfg(test)]
mod tests;
