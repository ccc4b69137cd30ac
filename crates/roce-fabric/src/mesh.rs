//! Hosts a client drives, on the fabric: a full mesh of one-way links, one
//! per ordered pair of hosts, each with its own delay, line rate and faults
//! (the fault-injection harness's network, `roce-harness`).
//!
//! The client hands over the engines (with their verbs objects made) and
//! then alternates with the fabric: [`Mesh::step`] runs every event of the
//! next time (deliveries, engine timers, the client's wake-ups), the client
//! acts (posts work requests, polls completion queues), and
//! [`Mesh::kick`] lets every NIC take what its engine now has to send and
//! re-arms the engines' timers. A host's NIC puts each datagram on the
//! link towards the host that has its destination address; a datagram no
//! host would receive is counted and shown to the hooks as unroutable.
//! The client's [`LinkHooks`] judge each datagram before the link's faults
//! and see every copy.
//!
//! Links without a rate are infinitely fast: every datagram an engine has
//! leaves at once, as in an ideal network.
//!
//! [`Mesh::on_fabric`] puts the client's hosts on a scenario's topology
//! instead (switches with their shared buffer, PFC and ECN marking, the
//! scenario's routes and deadlock check). There the hooks judge and see
//! each datagram on its first hop only, the link from its host to the
//! switch (`to` still names the destination host, and a copy's `arrive`
//! is when it reaches the switch); what a switch does with it later
//! (queueing, ECN marks, a drop when a buffer overflows) shows in
//! [`Mesh::counters`]. Faults are set per link end with
//! [`Mesh::set_faults`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;

use roce_proto::Engine;

use crate::faults::Faults;
use crate::hooks::LinkHooks;
use crate::report::Counters;
use crate::rng::SimRng;
use crate::scenario::{
    Framing, LinkFaults, LinkSpec, MonitorConfig, NicConfig, NodeId, NodeKind, NodeSpec, Scenario,
    SwitchConfig, Time, PS_PER_NS, PS_PER_S,
};
use crate::sim::{FabricError, Sim, StepEnd};

/// One direction of a mesh link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeshLink {
    /// Propagation delay, ps (at least 1 ns is used).
    pub delay: Time,
    /// Line rate (`None`: infinitely fast).
    pub rate_bps: Option<u64>,
    /// Faults, in ps.
    pub faults: Faults,
}

/// Hosts on a full mesh of links, driven by a client.
pub struct Mesh<H: LinkHooks> {
    sim: Sim<H>,
    hosts: usize,
    /// Nodes of the fabric (on a mesh, the hosts).
    nodes: usize,
    /// The port of each (from, to) pair of neighbours, `usize::MAX` for
    /// others: `port[from * nodes + to]`.
    port: Vec<usize>,
}

impl<H: LinkHooks> Mesh<H> {
    /// A mesh of `engines` (host `i` is `engines[i]`, at its GIDs; two at
    /// least, no address on two), each one-way link set by `link(from,
    /// to)`; faults draw from `rng`.
    pub fn new(
        engines: Vec<Engine>,
        link: impl Fn(NodeId, NodeId) -> MeshLink,
        rng: SimRng,
        hooks: H,
    ) -> Result<Mesh<H>, FabricError> {
        let n = engines.len();
        if n < 2 {
            return Err(FabricError::MeshTooSmall(n));
        }
        let mut addrs = HashMap::new();
        for (h, e) in engines.iter().enumerate() {
            for &a in &e.config().gids {
                if addrs.insert(a, h).is_some() {
                    return Err(FabricError::AddressTwice(a));
                }
            }
        }
        let nodes = (0..n).map(|h| NodeSpec { kind: NodeKind::Host, name: format!("h{h}") }).collect();
        let mut links = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                // Rates and delays are set per direction below.
                links.push(LinkSpec {
                    a,
                    b,
                    rate_bps: 100_000_000_000,
                    delay_ps: PS_PER_NS,
                    loss: 0.0,
                    faults: LinkFaults::default(),
                });
            }
        }
        let scn = Scenario {
            name: "mesh".into(),
            seed: 0,
            nodes,
            links,
            flows: Vec::new(),
            switch: SwitchConfig { pfc_enabled: false, ecn_enabled: false, ..SwitchConfig::hpcc() },
            nic: NicConfig { ack_priority: None, ..NicConfig::hpcc() },
            framing: Framing::Ethernet,
            routes: Vec::new(),
            events: Vec::new(),
            watchdog: None,
            stop_ps: None,
            deadlock_check_ps: 0,
            monitor: MonitorConfig::default(),
        };
        let mut sim = Sim::build(Rc::new(scn), hooks)?;
        sim.rng_links = rng;
        let port = port_table(&sim, n);
        let mut mesh = Mesh { sim, hosts: n, nodes: n, port };
        for from in 0..n {
            for to in (0..n).filter(|&to| to != from) {
                mesh.set_link(from, to, link(from, to));
            }
        }
        for (h, engine) in engines.into_iter().enumerate() {
            let egress = (0..n).map(|to| mesh.port[h * n + to] as u32).collect();
            mesh.sim.add_client_host(h, engine, egress);
        }
        mesh.sim.set_addresses(addrs);
        Ok(mesh)
    }

    /// The client's `hosts` (each a host node of `scn` with one link, its
    /// engine at its GIDs; two at least, no address on two) on the
    /// topology of `scn`: its switches (shared buffer, PFC, ECN marking,
    /// as `scn.switch` and `scn.nic` set them), links (rates, delays,
    /// faults), routes and timed events (link down/up, NIC stall/resume),
    /// and its deadlock check every
    /// `scn.deadlock_check_ps` (see [`Mesh::deadlock`]). The scenario is
    /// validated as a file's would be ([`crate::scenario::validate`]) and
    /// has no flows of its own. Faults draw from `rng`.
    pub fn on_fabric(
        scn: Scenario,
        hosts: Vec<(NodeId, Engine)>,
        rng: SimRng,
        hooks: H,
    ) -> Result<Mesh<H>, FabricError> {
        crate::scenario::validate(&scn)?;
        if !scn.flows.is_empty() {
            return Err(FabricError::ClientFlows(scn.flows.len()));
        }
        if hosts.len() < 2 {
            return Err(FabricError::MeshTooSmall(hosts.len()));
        }
        let nodes = scn.nodes.len();
        let mut links = vec![0usize; nodes];
        for l in &scn.links {
            links[l.a] += 1;
            links[l.b] += 1;
        }
        let mut addrs = HashMap::new();
        let mut placed = vec![false; nodes];
        for (node, e) in &hosts {
            let node = *node;
            let why = if node >= nodes {
                Some("no such node")
            } else if scn.nodes[node].kind != NodeKind::Host {
                Some("not a host node")
            } else if placed[node] {
                Some("two hosts on it")
            } else if links[node] != 1 {
                Some("a client host has exactly one link")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(FabricError::ClientHost { node, why });
            }
            placed[node] = true;
            for &a in &e.config().gids {
                if addrs.insert(a, node).is_some() {
                    return Err(FabricError::AddressTwice(a));
                }
            }
        }
        let mut sim = Sim::build(Rc::new(scn), hooks)?;
        sim.rng_links = rng;
        let port = port_table(&sim, nodes);
        let n = hosts.len();
        for (node, engine) in hosts {
            // One port: every datagram leaves by it.
            sim.add_client_host(node, engine, Vec::new());
        }
        sim.set_addresses(addrs);
        sim.schedule_deadlock_checks();
        sim.schedule_events();
        Ok(Mesh { sim, hosts: n, nodes, port })
    }

    /// Sets the faults of the one-way link `from -> to` (neighbours), its
    /// rate and delay unchanged.
    pub fn set_faults(&mut self, from: NodeId, to: NodeId, faults: Faults) -> Result<(), FabricError> {
        let p = self.port_of(from, to).ok_or(FabricError::NoLink { from, to })?;
        self.sim.ports[p].set_faults(faults);
        Ok(())
    }

    /// The cycle of paused queues the fabric's deadlock check found (an
    /// [`crate::report::Ending::Deadlock`]), if it did; the checks then
    /// stop.
    pub fn deadlock(&self) -> Option<&crate::report::Ending> {
        self.sim.deadlock()
    }

    /// Data frames anywhere in the fabric (queued in a NIC or a switch,
    /// or on a link): 0 once the network is quiet.
    pub fn frames_in_fabric(&self) -> usize {
        self.sim.data_frames()
    }

    fn port_of(&self, from: NodeId, to: NodeId) -> Option<usize> {
        if from >= self.nodes || to >= self.nodes {
            return None;
        }
        Some(self.port[from * self.nodes + to]).filter(|&p| p != usize::MAX)
    }

    /// Sets the one-way link `from -> to` of a mesh.
    ///
    /// # Panics
    /// If `from` and `to` are not neighbours (on a mesh, any two hosts).
    pub fn set_link(&mut self, from: NodeId, to: NodeId, l: MeshLink) {
        let p = self.port_of(from, to).unwrap_or_else(|| panic!("no link from {from} to {to}"));
        let port = &mut self.sim.ports[p];
        port.set_delay(l.delay.max(PS_PER_NS));
        match l.rate_bps {
            None => port.set_rate(u64::MAX, Some(0)),
            Some(bps) => {
                let bps = bps.max(1);
                let exact = (8 * PS_PER_S) % bps == 0;
                port.set_rate(bps, exact.then(|| 8 * PS_PER_S / bps));
            }
        }
        port.set_faults(l.faults);
    }

    /// The client's hosts.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    pub fn engine(&self, h: NodeId) -> &Engine {
        self.sim.engine(h)
    }

    pub fn engine_mut(&mut self, h: NodeId) -> &mut Engine {
        self.sim.engine_mut(h)
    }

    /// The host with address `a`.
    pub fn host_of(&self, a: IpAddr) -> Option<NodeId> {
        self.sim.host_of(a)
    }

    /// Simulated time, ps: the time of the last event run.
    pub fn now(&self) -> Time {
        self.sim.now()
    }

    /// Events run so far.
    pub fn events(&self) -> u64 {
        self.sim.counters().events
    }

    /// Events queued.
    pub fn pending(&self) -> usize {
        self.sim.pending()
    }

    pub fn counters(&self) -> &Counters {
        self.sim.counters()
    }

    /// Wakes the client at `at` (not before now) with `token`: it is in
    /// [`Mesh::wakes`] after the step that runs that time.
    pub fn schedule_wake(&mut self, at: Time, token: u64) {
        self.sim.schedule_wake(at, token);
    }

    /// Runs every event of the next time, if that is before `until` and
    /// fewer than `max_events` events have run so far.
    pub fn step(&mut self, until: Time, max_events: u64) -> StepEnd {
        self.sim.step(until, max_events)
    }

    /// The client's wake-up tokens due at the last step's time, in the
    /// order they were scheduled.
    pub fn wakes(&self) -> &[u64] {
        &self.sim.wakes
    }

    /// Every NIC takes what its engine has to send (as far as its links
    /// are free), and every engine's timer is re-armed: after the client
    /// posted work.
    pub fn kick(&mut self) {
        self.sim.kick();
    }

    /// [`Mesh::kick`] for one host: its NIC takes what its engine now has
    /// to send and its timer is re-armed (after the client posted work on
    /// that host only; cheaper than a kick of every host on a large
    /// fabric).
    pub fn kick_host(&mut self, h: NodeId) {
        self.sim.kick_host(h);
    }

    /// Per one-way link: (from node, to node, frames sent so far).
    pub fn link_frames(&self) -> Vec<(NodeId, NodeId, u64)> {
        self.sim.port_frames()
    }

    /// Per one-way link: (from node, to node, time it spent sending
    /// frames so far).
    pub fn link_busy(&self) -> Vec<(NodeId, NodeId, Time)> {
        self.sim.port_busy()
    }

    /// The client's hosts whose engine took input (a datagram or a timer
    /// fired) during the last [`Mesh::step`], each once: the only ones
    /// whose completion queues can have new entries.
    pub fn touched(&self) -> &[NodeId] {
        &self.sim.touched
    }

    pub fn hooks(&self) -> &H {
        &self.sim.hooks
    }

    pub fn hooks_mut(&mut self) -> &mut H {
        &mut self.sim.hooks
    }
}

/// A client's switched fabric for [`Mesh::on_fabric`]: switches in a line
/// (node ids after the hosts), `split[k]` hosts on switch `k` (hosts are
/// nodes `0..split.iter().sum()`, in order), each host on its own link of
/// `host_link` (rate in bit/s, one-way delay in ps), neighbouring switches
/// joined by one link of `trunk`, the switches as `switch` sets them.
/// Acknowledgements travel at their QP's priority (no separate ACK
/// priority) and no deadlock check runs unless the caller sets one.
pub fn switched_scenario(
    split: &[usize],
    host_link: (u64, Time),
    trunk: (u64, Time),
    switch: SwitchConfig,
) -> Scenario {
    let hosts: usize = split.iter().sum();
    let mut nodes: Vec<NodeSpec> =
        (0..hosts).map(|h| NodeSpec { kind: NodeKind::Host, name: format!("h{h}") }).collect();
    nodes.extend((0..split.len()).map(|k| NodeSpec { kind: NodeKind::Switch, name: format!("sw{k}") }));
    let link = |a, b, (rate_bps, delay_ps): (u64, Time)| LinkSpec {
        a,
        b,
        rate_bps,
        delay_ps,
        loss: 0.0,
        faults: LinkFaults::default(),
    };
    let mut links = Vec::new();
    let mut h = 0;
    for (k, &n) in split.iter().enumerate() {
        for _ in 0..n {
            links.push(link(h, hosts + k, host_link));
            h += 1;
        }
        if k > 0 {
            links.push(link(hosts + k - 1, hosts + k, trunk));
        }
    }
    Scenario {
        name: "switched".into(),
        seed: 0,
        nodes,
        links,
        flows: Vec::new(),
        switch,
        nic: NicConfig { ack_priority: None, ..NicConfig::hpcc() },
        framing: Framing::Ethernet,
        routes: Vec::new(),
        events: Vec::new(),
        watchdog: None,
        stop_ps: None,
        deadlock_check_ps: 0,
        monitor: MonitorConfig::default(),
    }
}

/// The port of each (from, to) pair of neighbours among `nodes`.
fn port_table<H: LinkHooks>(sim: &Sim<H>, nodes: usize) -> Vec<usize> {
    let mut port = vec![usize::MAX; nodes * nodes];
    for (p, x) in sim.ports.iter().enumerate() {
        port[x.node * nodes + sim.ports[x.peer].node] = p;
    }
    port
}

#[cfg(test)]
mod tests;
