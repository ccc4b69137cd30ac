//! The HPCC artifact's standalone FCT: how long a flow takes alone on an
//! idle fabric, the denominator of the FCT slowdown.
//!
//! `standalone = base_rtt + (size + n_pkts x 48) x 8 / bottleneck` with
//! `n_pkts = ceil(size / payload)`, `base_rtt = 2 x sum(link delays) +
//! sum over hops of (payload x 8 / hop rate)`, along the path a
//! breadth-first search from the destination finds first (never through
//! another host). Everything is integer nanoseconds, truncated at each
//! step as the artifact does (`third.cc`: `CalculateRoute`, `qp_finish`),
//! so the result equals the `standalone_fct_ns` column of its `fct.txt`.
//! Ties between shortest paths with different delays or rates are broken
//! by link order here (by pointer order in the artifact); in the
//! artifact's topologies all shortest paths between two hosts are alike.

use std::collections::{HashMap, VecDeque};

use crate::scenario::{NodeId, NodeKind, Scenario, Time, PS_PER_NS};

/// Header bytes per packet the formula assumes (the artifact's whole
/// header less its INT header).
pub const STANDALONE_HEADER_BYTES: u64 = 48;
/// Nanoseconds per second, for serialisation times in ns.
const NS_PER_S: u128 = 1_000_000_000;

/// What the search found from the destination to one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reach {
    delay_ns: u64,
    tx_ns: u64,
    bottleneck_bps: u64,
}

/// Standalone FCTs of one scenario, with the path search cached per
/// destination (a fat-tree run asks for thousands of flows).
pub struct Standalone<'a> {
    scn: &'a Scenario,
    payload: u64,
    adjacency: Vec<Vec<(NodeId, usize)>>,
    cache: HashMap<NodeId, Vec<Option<Reach>>>,
}

impl<'a> Standalone<'a> {
    /// `payload`: bytes of payload per packet (`PACKET_PAYLOAD_SIZE`).
    pub fn new(scn: &'a Scenario, payload: u64) -> Standalone<'a> {
        let mut adjacency = vec![Vec::new(); scn.nodes.len()];
        for (i, l) in scn.links.iter().enumerate() {
            if l.a < adjacency.len() && l.b < adjacency.len() {
                adjacency[l.a].push((l.b, i));
                adjacency[l.b].push((l.a, i));
            }
        }
        Standalone { scn, payload: payload.max(1), adjacency, cache: HashMap::new() }
    }

    /// The standalone FCT of `size` bytes from `src` to `dst`, in ps (a
    /// whole number of ns); `None` when no path joins them.
    pub fn fct_ps(&mut self, src: NodeId, dst: NodeId, size: u64) -> Option<Time> {
        if !self.cache.contains_key(&dst) {
            let reach = self.search(dst);
            self.cache.insert(dst, reach);
        }
        let r = (*self.cache.get(&dst)?.get(src)?)?;
        if src == dst {
            return None;
        }
        let n_pkts = size.div_ceil(self.payload);
        let total_bytes = u128::from(size) + u128::from(n_pkts) * u128::from(STANDALONE_HEADER_BYTES);
        let transfer_ns = total_bytes * 8 * NS_PER_S / u128::from(r.bottleneck_bps);
        let base_rtt_ns = 2 * u128::from(r.delay_ns) + u128::from(r.tx_ns);
        let ns = u64::try_from(base_rtt_ns + transfer_ns).ok()?;
        ns.checked_mul(PS_PER_NS)
    }

    /// Breadth-first search from `root` over the links in order, through
    /// switches only.
    fn search(&self, root: NodeId) -> Vec<Option<Reach>> {
        let mut reach = vec![None; self.scn.nodes.len()];
        if root >= reach.len() {
            return reach;
        }
        reach[root] = Some(Reach { delay_ns: 0, tx_ns: 0, bottleneck_bps: u64::MAX });
        let mut queue = VecDeque::from([root]);
        while let Some(now) = queue.pop_front() {
            let Some(here) = reach[now] else { continue };
            for &(next, link) in &self.adjacency[now] {
                if reach[next].is_some() {
                    continue;
                }
                let l = &self.scn.links[link];
                let hop_tx = u128::from(self.payload) * NS_PER_S * 8 / u128::from(l.rate_bps.max(1));
                reach[next] = Some(Reach {
                    delay_ns: here.delay_ns + l.delay_ps / PS_PER_NS,
                    tx_ns: here.tx_ns + u64::try_from(hop_tx).unwrap_or(u64::MAX),
                    bottleneck_bps: here.bottleneck_bps.min(l.rate_bps.max(1)),
                });
                if self.scn.nodes[next].kind == NodeKind::Switch {
                    queue.push_back(next);
                }
            }
        }
        reach
    }
}

/// The standalone FCT of one flow (see the module docs), in ps; `None`
/// when no path joins `src` and `dst`. Use [`Standalone`] for many flows.
pub fn standalone_fct_ps(scn: &Scenario, src: NodeId, dst: NodeId, size: u64, payload: u64) -> Option<Time> {
    Standalone::new(scn, payload).fct_ps(src, dst, size)
}
