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
    /// The port of each (from, to) pair: `port[from * hosts + to]`.
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
        let mut port = vec![usize::MAX; n * n];
        for (p, x) in sim.ports.iter().enumerate() {
            port[x.node * n + sim.ports[x.peer].node] = p;
        }
        let mut mesh = Mesh { sim, hosts: n, port };
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

    /// Sets the one-way link `from -> to`.
    pub fn set_link(&mut self, from: NodeId, to: NodeId, l: MeshLink) {
        let p = self.port[from * self.hosts + to];
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

    pub fn hooks(&self) -> &H {
        &self.sim.hooks
    }

    pub fn hooks_mut(&mut self) -> &mut H {
        &mut self.sim.hooks
    }
}

#[cfg(test)]
mod tests;
