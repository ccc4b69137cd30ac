//! What the simulator watches while it runs: samples of the monitored
//! ports' queues and the flows' rates, and the PFC deadlock check (the
//! wait-for graph of paused queues, handed to [`crate::deadlock`]).

use super::Sim;
use crate::deadlock::{self, WaitFor};
use crate::hooks::LinkHooks;
use crate::report::{QueueRef, QueueSample, RateSample};
use crate::scenario::{NodeId, PRIORITIES};

impl<H: LinkHooks> Sim<H> {
    pub(super) fn sample(&mut self) {
        for &(node, number) in &self.scn.monitor.ports {
            let Some(&first) = self.first_port.get(node) else { continue };
            let p = first + number as usize - 1;
            let Some(port) = self.ports.get(p).filter(|x| x.node == node) else { continue };
            self.report.queues.push(QueueSample {
                time_ps: self.now,
                node,
                port: number,
                bytes: port.total_bytes(),
                paused: port.paused,
            });
        }
        if self.scn.monitor.flow_rates {
            for (i, st) in self.flows.iter().enumerate() {
                if !st.started || st.done {
                    continue;
                }
                let src = self.scn.flows[i].src;
                let h = self.hosts[src].as_ref().expect("host");
                let rate = h.engine.qp_rate(st.src_qpn).map(|r| r.rate_bps as f64).unwrap_or(0.0);
                self.report.rates.push(RateSample { time_ps: self.now, flow: i, rate_bps: rate });
            }
        }
    }

    /// Looks for a cycle of paused, non-empty switch egress queues in which
    /// each waits for the next: queue (X, port to Y, q) is paused by Y
    /// because Y's ingress from X holds frames of priority q that wait in
    /// Y's egress queue (Y, port to Z, q), itself paused. A cycle seen at
    /// two checks in a row with no frame sent from any of its queues in
    /// between is a deadlock.
    pub(super) fn deadlock_check(&mut self) -> Option<Vec<QueueRef>> {
        if self.paused_queues == 0 {
            // No queue is paused: no cycle, and no need to look at every port.
            return None;
        }
        let cycle = deadlock::find_cycle(&self.wait_for())?;
        let now: Vec<(QueueRef, u64)> = cycle
            .iter()
            .map(|&(p, q)| {
                let port = &self.ports[p];
                (QueueRef { node: port.node, port: port.number, priority: q as u8 }, port.sent[q])
            })
            .collect();
        let confirmed = self.deadlock_suspect.as_ref() == Some(&now);
        if confirmed {
            return Some(now.into_iter().map(|(r, _)| r).collect());
        }
        self.deadlock_suspect = Some(now);
        None
    }

    /// The wait-for graph of the switches' paused queues (see
    /// [`crate::deadlock`]): a vertex is a switch egress queue towards
    /// another switch, paused by that peer Y and holding frames; it waits
    /// for each of Y's egress queues on the same priority that is itself a
    /// vertex and holds frames that came in by the link from it.
    pub(super) fn wait_for(&self) -> WaitFor<(usize, usize)> {
        let is_switch = |node: NodeId| self.hosts.get(node).is_some_and(|h| h.is_none());
        let vertex = |p: usize, q: usize| {
            let port = &self.ports[p];
            port.paused & (1 << q) != 0
                && port.qbytes[q] > 0
                && is_switch(port.node)
                && is_switch(self.ports[port.peer].node)
        };
        let mut graph = WaitFor::default();
        for p in 0..self.ports.len() {
            for q in 0..PRIORITIES {
                if !vertex(p, q) {
                    continue;
                }
                let r = self.ports[p].peer;
                let y = self.ports[r].node;
                let first = self.first_port[y];
                let nports = self.mmu[y].as_ref().expect("switch").nports();
                let ingress = r - first;
                let waits_for = (0..nports)
                    .filter(|&e| {
                        vertex(first + e, q)
                            && self.ports[first + e].queues[q].iter().any(|h| h.in_port as usize == ingress)
                    })
                    .map(|e| (first + e, q))
                    .collect();
                graph.add((p, q), waits_for);
            }
        }
        graph
    }
}
