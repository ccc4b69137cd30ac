//! The PFC deadlock detector: a cycle in the wait-for graph of paused
//! switch egress queues (a cyclic buffer dependency, Hu et al. HotNets'16).
//!
//! A vertex is a switch egress queue (port towards another switch,
//! priority q) that is paused by its peer and holds frames. Its peer Y
//! paused it because Y's ingress from this link is over its threshold:
//! the frames Y holds from that ingress wait in Y's egress queues. An
//! edge goes to each such queue of Y that is itself a vertex. A cycle
//! means every queue on it waits for the next: none can ever send.
//!
//! The simulator builds the graph from its paused queues
//! (`Sim::wait_for`) and hands it here; the detector knows nothing of
//! ports or frames, so the dependency runs one way.

use std::collections::HashMap;
use std::hash::Hash;

/// A wait-for graph: each vertex with the vertices it waits for, in the
/// order added (the search visits them in that order, so one graph gives
/// one answer).
#[derive(Debug, Clone)]
pub(crate) struct WaitFor<V> {
    vertices: Vec<(V, Vec<V>)>,
}

impl<V> Default for WaitFor<V> {
    fn default() -> Self {
        WaitFor { vertices: Vec::new() }
    }
}

impl<V: Copy + Eq + Hash> WaitFor<V> {
    /// Adds vertex `v`, waiting for each of `waits_for` (an edge to a value
    /// never added as a vertex is ignored).
    pub(crate) fn add(&mut self, v: V, waits_for: Vec<V>) {
        self.vertices.push((v, waits_for));
    }
}

/// A cycle of `graph`, if it has one: its vertices in order, each waiting
/// for the next and the last for the first. Depth-first search with
/// colours from each vertex in the order added, successors taken last
/// first; the first back edge found closes the cycle.
pub(crate) fn find_cycle<V: Copy + Eq + Hash>(graph: &WaitFor<V>) -> Option<Vec<V>> {
    const GREY: u8 = 1;
    const BLACK: u8 = 2;
    let index: HashMap<V, usize> = graph.vertices.iter().enumerate().map(|(i, (v, _))| (*v, i)).collect();
    let successors = |i: usize| -> Vec<usize> {
        graph.vertices[i].1.iter().filter_map(|w| index.get(w).copied()).collect()
    };
    let mut colour = vec![0u8; graph.vertices.len()];
    for start in 0..graph.vertices.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, Vec<usize>)> = vec![(start, successors(start))];
        colour[start] = GREY;
        while let Some((v, next)) = stack.last_mut() {
            let v = *v;
            if let Some(w) = next.pop() {
                match colour[w] {
                    0 => {
                        colour[w] = GREY;
                        let s = successors(w);
                        stack.push((w, s));
                    }
                    GREY => {
                        let first = stack.iter().position(|(x, _)| *x == w).expect("on stack");
                        return Some(stack[first..].iter().map(|(x, _)| graph.vertices[*x].0).collect());
                    }
                    _ => {}
                }
            } else {
                colour[v] = BLACK;
                stack.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(u32, &[u32])]) -> WaitFor<u32> {
        let mut g = WaitFor::default();
        for &(v, w) in edges {
            g.add(v, w.to_vec());
        }
        g
    }

    #[test]
    fn a_ring_of_waits_is_a_cycle() {
        let g = graph(&[(1, &[2]), (2, &[3]), (3, &[1])]);
        assert_eq!(find_cycle(&g), Some(vec![1, 2, 3]));
    }

    #[test]
    fn a_chain_or_a_diamond_is_not() {
        assert_eq!(find_cycle(&graph(&[(1, &[2]), (2, &[3]), (3, &[])])), None);
        assert_eq!(find_cycle(&graph(&[(1, &[2, 3]), (2, &[4]), (3, &[4]), (4, &[])])), None);
        assert_eq!(find_cycle(&WaitFor::<u32>::default()), None);
    }

    /// A queue that is not a vertex (not paused, or empty) breaks the
    /// chain: an edge to it leads nowhere.
    #[test]
    fn edges_to_non_vertices_are_ignored() {
        assert_eq!(find_cycle(&graph(&[(1, &[2]), (2, &[9])])), None);
    }

    /// The cycle found is the one reachable first, from the vertex where
    /// the search entered it; vertices leading into it are not part of it.
    #[test]
    fn the_cycle_leaves_out_its_approach() {
        let g = graph(&[(0, &[1]), (1, &[2]), (2, &[3]), (3, &[1]), (5, &[5])]);
        assert_eq!(find_cycle(&g), Some(vec![1, 2, 3]));
        assert_eq!(find_cycle(&graph(&[(5, &[5])])), Some(vec![5]));
    }
}
