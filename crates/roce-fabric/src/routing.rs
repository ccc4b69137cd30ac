//! Forwarding tables: for every switch and destination host, the ports on
//! a shortest path (equal-cost next hops), chosen per flow by a hash of its
//! addresses and ports (flow-hash ECMP: one flow, one path, no reordering).
//! Static routes of the scenario replace a destination's next hops at a
//! switch. Hosts never forward.

use crate::scenario::{NodeId, NodeKind, Scenario};

/// A node's ports: for each, the peer node and the link index.
#[derive(Debug, Clone)]
pub struct Adjacency {
    /// `ports[node]` = [(peer, link)], in port order (port k+1 at index k).
    pub ports: Vec<Vec<(NodeId, usize)>>,
}

impl Adjacency {
    pub fn new(scn: &Scenario) -> Adjacency {
        let mut ports = vec![Vec::new(); scn.nodes.len()];
        for (i, l) in scn.links.iter().enumerate() {
            ports[l.a].push((l.b, i));
            ports[l.b].push((l.a, i));
        }
        Adjacency { ports }
    }
}

/// `Routes::row` of a node that is not a switch.
const NO_ROW: u32 = u32::MAX;

/// A table entry of a destination the switch cannot reach.
const UNREACHABLE: u32 = u32::MAX;
/// A table entry with this bit names an equal-cost group (its index in
/// `Routes::groups`); without it, the one next-hop port.
const GROUP: u32 = 1 << 31;

/// Next-hop port indices (0-based) per (switch, destination host).
#[derive(Debug, Clone)]
pub struct Routes {
    /// Each node's row in `table` (`NO_ROW` for hosts, which never forward).
    row: Vec<u32>,
    /// One row per switch, one entry per destination node, flat: a lookup
    /// is one index computation and one 4-byte read (a fat-tree's table
    /// stays in cache).
    table: Vec<u32>,
    nodes: usize,
    /// Equal-cost groups, (start, len) in `hops`: each distinct set of
    /// ports once (a switch sends most destinations up the same group).
    groups: Vec<(u32, u32)>,
    hops: Vec<u16>,
    /// Mixed into every switch's hash (switches are configured with hash
    /// seeds): from the scenario's seed, so seeds also vary the paths.
    salt: u32,
}

/// A static route the fabric cannot install.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("static route at node {switch} via node {via}: no such link")]
    NoLink { switch: NodeId, via: NodeId },
    #[error("static route at node {0}: not a switch")]
    NotASwitch(NodeId),
    #[error("static route to node {0}: no such node")]
    NoSuchNode(NodeId),
}

impl Routes {
    /// Shortest paths by breadth-first search from every host, through
    /// switches only, then the scenario's static routes.
    pub fn build(scn: &Scenario, adj: &Adjacency) -> Result<Routes, RouteError> {
        let n = scn.nodes.len();
        let mut hops = Vec::new();
        let mut groups: Vec<(u32, u32)> = Vec::new();
        let mut group_of: std::collections::HashMap<Vec<u16>, u32> = std::collections::HashMap::new();
        let mut scratch: Vec<u16> = Vec::new();
        let switches: Vec<NodeId> = (0..n).filter(|&i| scn.nodes[i].kind == NodeKind::Switch).collect();
        let mut row = vec![NO_ROW; n];
        for (r, &s) in switches.iter().enumerate() {
            row[s] = r as u32;
        }
        let mut table = vec![UNREACHABLE; switches.len() * n];
        let at = |s: NodeId, dst: NodeId| row[s] as usize * n + dst;
        let mut dist = vec![u32::MAX; n];
        let mut queue = std::collections::VecDeque::new();
        for h in scn.hosts() {
            dist.iter_mut().for_each(|d| *d = u32::MAX);
            dist[h] = 0;
            queue.clear();
            queue.push_back(h);
            while let Some(u) = queue.pop_front() {
                if u != h && scn.nodes[u].kind == NodeKind::Host {
                    continue;
                }
                for &(v, _) in &adj.ports[u] {
                    if dist[v] == u32::MAX {
                        dist[v] = dist[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            for &s in &switches {
                if dist[s] == u32::MAX {
                    continue;
                }
                scratch.clear();
                for (k, &(peer, _)) in adj.ports[s].iter().enumerate() {
                    if dist[peer] + 1 == dist[s] && (peer == h || scn.nodes[peer].kind == NodeKind::Switch) {
                        scratch.push(k as u16);
                    }
                }
                table[at(s, h)] = match scratch.len() {
                    0 => UNREACHABLE,
                    1 => scratch[0] as u32,
                    _ => {
                        let g = *group_of.entry(scratch.clone()).or_insert_with(|| {
                            groups.push((hops.len() as u32, scratch.len() as u32));
                            hops.extend_from_slice(&scratch);
                            (groups.len() - 1) as u32
                        });
                        GROUP | g
                    }
                };
            }
        }
        for r in &scn.routes {
            let Some(k) = adj.ports.get(r.switch).and_then(|p| p.iter().position(|&(peer, _)| peer == r.via))
            else {
                return Err(RouteError::NoLink { switch: r.switch, via: r.via });
            };
            if scn.nodes.get(r.switch).map(|x| x.kind) != Some(NodeKind::Switch) {
                return Err(RouteError::NotASwitch(r.switch));
            }
            if r.dst >= n {
                return Err(RouteError::NoSuchNode(r.dst));
            }
            table[at(r.switch, r.dst)] = k as u32;
        }
        let salt = (scn.seed ^ (scn.seed >> 32)) as u32;
        Ok(Routes { row, table, nodes: n, groups, hops, salt })
    }

    /// The port (0-based) switch `s` forwards a frame for host `dst` out
    /// of, the flow hash choosing among equal-cost ports; `None` if
    /// unreachable.
    #[inline]
    pub fn next_hop(&self, s: NodeId, dst: NodeId, hash: u32) -> Option<usize> {
        let r = *self.row.get(s)?;
        if r == NO_ROW || dst >= self.nodes {
            return None;
        }
        let e = self.table[r as usize * self.nodes + dst];
        if e == UNREACHABLE {
            None
        } else if e & GROUP == 0 {
            Some(e as usize)
        } else {
            let (start, len) = self.groups[(e & !GROUP) as usize];
            let i = (hash_mix(hash, s as u32 ^ self.salt) % len) as usize;
            Some(self.hops[start as usize + i] as usize)
        }
    }
}

/// Mixes a flow hash with a switch's id so that consecutive tiers do not
/// make correlated choices (a murmur3-style finaliser).
#[inline]
pub fn hash_mix(h: u32, salt: u32) -> u32 {
    let mut x = h ^ salt.wrapping_mul(0x9e37_79b9);
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^ (x >> 16)
}

/// The flow hash of a packet: source and destination address and UDP
/// ports (the 5-tuple, protocol being UDP).
#[inline]
pub fn flow_hash(src: u32, dst: u32, sport: u16, dport: u16) -> u32 {
    let mut h = hash_mix(src, 1);
    h = hash_mix(h ^ dst, 2);
    hash_mix(h ^ ((sport as u32) << 16 | dport as u32), 3)
}
