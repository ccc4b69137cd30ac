//! What a client driving its own hosts (the mesh of [`crate::mesh`]) asks
//! of the simulator: its engines on host nodes, who has which address, its
//! wake-ups, and a kick after it posted work.

use std::collections::HashMap;
use std::net::IpAddr;

use roce_proto::Engine;

use super::nic::Host;
use super::{Ev, Sim};
use crate::hooks::LinkHooks;
use crate::scenario::{NodeId, Time};

impl<H: LinkHooks> Sim<H> {
    /// Puts a client's host on `node` (a host node): its engine, and the
    /// port towards each node (`egress[node]`; its own entry unused).
    pub(crate) fn add_client_host(&mut self, node: NodeId, engine: Engine, egress: Vec<u32>) {
        self.hosts.resize_with(self.scn.nodes.len(), || None);
        self.hosts[node] = Some(Host::new(self.first_port[node], egress, engine, None));
    }

    /// Who has which address, for a client's hosts.
    pub(crate) fn set_addresses(&mut self, addrs: HashMap<IpAddr, NodeId>) {
        self.addrs = addrs.into_iter().collect();
    }

    /// The deadlock check of the scenario, every `deadlock_check_ps` (if
    /// set) while anything real is pending.
    pub(crate) fn schedule_deadlock_checks(&mut self) {
        if self.scn.deadlock_check_ps > 0 {
            self.push(self.scn.deadlock_check_ps, Ev::DeadlockCheck);
        }
    }

    /// The scenario's timed events (link down/up, NIC stall/resume), as a
    /// scenario's own run schedules them.
    pub(crate) fn schedule_events(&mut self) {
        let times: Vec<Time> = self.scn.events.iter().map(|e| e.at_ps).collect();
        for (i, at) in times.into_iter().enumerate() {
            self.push(at, Ev::Scripted(i as u32));
        }
    }

    /// The cycle of paused queues the deadlock check found, if it did.
    pub(crate) fn deadlock(&self) -> Option<&crate::report::Ending> {
        self.ending.as_ref().filter(|e| matches!(e, crate::report::Ending::Deadlock { .. }))
    }

    /// Data frames anywhere in the fabric: in a NIC's or a switch's
    /// queues, or on a link.
    pub(crate) fn data_frames(&self) -> usize {
        self.slots.iter().filter_map(|s| s.frame).filter(|f| !f.pfc).count()
    }

    pub(crate) fn host_of(&self, a: IpAddr) -> Option<NodeId> {
        self.addrs.get(&a).copied()
    }

    pub(crate) fn engine(&self, node: NodeId) -> &Engine {
        &self.hosts[node].as_ref().expect("a host").engine
    }

    pub(crate) fn engine_mut(&mut self, node: NodeId) -> &mut Engine {
        &mut self.hosts[node].as_mut().expect("a host").engine
    }

    pub(crate) fn now(&self) -> Time {
        self.now
    }

    pub(crate) fn counters(&self) -> &crate::report::Counters {
        &self.report.counters
    }

    pub(crate) fn pending(&self) -> usize {
        self.heap.len()
    }

    pub(crate) fn schedule_wake(&mut self, at: Time, token: u64) {
        self.push(at.max(self.now), Ev::Wake(token));
    }

    /// Per port: its node, its peer's node and the frames it sent (all
    /// priorities, data and control).
    pub(crate) fn port_busy(&self) -> Vec<(NodeId, NodeId, Time)> {
        self.ports.iter().map(|p| (p.node, self.ports[p.peer].node, p.busy_ps)).collect()
    }

    pub(crate) fn port_frames(&self) -> Vec<(NodeId, NodeId, u64)> {
        self.ports.iter().map(|p| (p.node, self.ports[p.peer].node, p.sent.iter().sum())).collect()
    }

    /// One client host's ports start what they can and its engine's timer
    /// is re-armed (after the client posted work on it alone).
    pub(crate) fn kick_host(&mut self, node: NodeId) {
        if self.hosts.get(node).is_none_or(|h| h.is_none()) {
            return;
        }
        let ports = self.first_port[node]..self.first_port.get(node + 1).copied().unwrap_or(self.ports.len());
        for p in ports {
            self.start_tx(p);
        }
        self.arm_timer(node);
    }

    /// Every host's ports start what they can and its engine's timer is
    /// re-armed (after a client posted work). Every host has a port.
    pub(crate) fn kick(&mut self) {
        for node in 0..self.hosts.len() {
            if self.hosts[node].is_none() {
                continue;
            }
            let ports =
                self.first_port[node]..self.first_port.get(node + 1).copied().unwrap_or(self.ports.len());
            for p in ports {
                self.start_tx(p);
            }
            self.arm_timer(node);
        }
    }
}
