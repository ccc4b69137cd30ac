//! The PFC deadlock detector: a cycle in the wait-for graph of paused
//! switch egress queues (a cyclic buffer dependency, Hu et al. HotNets'16).
//!
//! A vertex is a switch egress queue (port towards another switch,
//! priority q) that is paused by its peer and holds frames. Its peer Y
//! paused it because Y's ingress from this link is over its threshold:
//! the frames Y holds from that ingress wait in Y's egress queues. An
//! edge goes to each such queue of Y that is itself a vertex. A cycle
//! means every queue on it waits for the next: none can ever send.

use crate::hooks::LinkHooks;
use crate::sim::Sim;

/// A queue: (global port, priority).
type Queue = (usize, usize);

/// A cycle as (global port, priority) pairs, if one exists.
pub(crate) fn find_cycle<H: LinkHooks>(sim: &Sim<H>) -> Option<Vec<(usize, usize)>> {
    let vertex = |p: usize, q: usize| {
        let port = &sim.ports[p];
        port.paused & (1 << q) != 0
            && port.qbytes[q] > 0
            && sim.is_switch(port.node)
            && sim.is_switch(sim.ports[port.peer].node)
    };
    let successors = |p: usize, q: usize| -> Vec<(usize, usize)> {
        let r = sim.ports[p].peer;
        let y = sim.ports[r].node;
        let first = sim.first_port[y];
        let nports = sim.mmu[y].as_ref().expect("switch").nports();
        (0..nports)
            .filter(|&e| vertex(first + e, q) && sim.holds_from(first + e, q, r - first))
            .map(|e| (first + e, q))
            .collect()
    };
    // Depth-first search with colours over the vertices.
    let mut colour = std::collections::HashMap::new();
    for p in 0..sim.ports.len() {
        for q in 0..crate::scenario::PRIORITIES {
            if !vertex(p, q) || colour.contains_key(&(p, q)) {
                continue;
            }
            let mut stack: Vec<(Queue, Vec<Queue>)> = vec![((p, q), successors(p, q))];
            colour.insert((p, q), 1u8);
            while let Some((v, next)) = stack.last_mut() {
                let v = *v;
                if let Some(w) = next.pop() {
                    match colour.get(&w) {
                        None => {
                            colour.insert(w, 1);
                            let s = successors(w.0, w.1);
                            stack.push((w, s));
                        }
                        Some(1) => {
                            let start = stack.iter().position(|(x, _)| *x == w).expect("on stack");
                            return Some(stack[start..].iter().map(|(x, _)| *x).collect());
                        }
                        _ => {}
                    }
                } else {
                    colour.insert(v, 2);
                    stack.pop();
                }
            }
        }
    }
    None
}
