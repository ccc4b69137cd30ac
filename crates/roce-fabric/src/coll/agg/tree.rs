//! The aggregation tree over the switches, and the aggregation nodes
//! attached to them.
//!
//! As SHARP's Aggregation Manager does, one tree per job, spanning the
//! switches the job's hosts sit behind:
//!
//! * the **root** is the switch nearest to all of them (the least
//!   greatest hop count to a rank's switch; the lowest node number on a
//!   tie): the one switch of a star, a core switch of a fat-tree, a spine
//!   of a leaf-spine;
//! * every other switch's **parent** is its neighbour one hop nearer the
//!   root (the lowest numbered, so the tree is fixed by the topology), so
//!   each tree edge is one link, carrying one stream each way;
//! * a switch with one child and no rank of its own only forwards, so it
//!   leaves the tree (its child joins its parent), and a root with one
//!   child hands the root to it: 8 ranks behind one leaf of a fat-tree
//!   aggregate at that leaf alone.
//!
//! Each switch of the tree gets an **aggregation node** (AN): a host node
//! on a port of its own, linked to the switch at the sum of the switch's
//! port rates with a 1 ns delay, i.e. an aggregation unit in the ASIC that
//! keeps up with every port at once, as SHARP's streaming aggregation
//! does at line rate. Its traffic crosses the switch's forwarding and
//! buffers like any other.

use crate::scenario::{LinkFaults, LinkSpec, NodeId, NodeKind, NodeSpec, Scenario, PS_PER_NS};

/// A member of an aggregation node's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Child {
    /// A rank (a host).
    Rank(usize),
    /// Another aggregation node, by index.
    Node(usize),
}

/// The tree of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggTree {
    /// Per aggregation node: the switch it sits in.
    pub switch: Vec<NodeId>,
    /// Per aggregation node: its parent (`None`: the root).
    pub parent: Vec<Option<usize>>,
    /// Per aggregation node: its children, ranks first, in order.
    pub children: Vec<Vec<Child>>,
    /// Per rank: the aggregation node it sends to.
    pub leaf_of: Vec<usize>,
}

/// Why no tree can be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("rank {rank}: its host (node {node}) is not linked to exactly one switch")]
    NotBehindASwitch { rank: usize, node: NodeId },
    #[error("the switches of ranks {a} and {b} are not connected")]
    Disconnected { a: usize, b: usize },
}

impl AggTree {
    /// The tree over the switches of `scn` for ranks on `rank_nodes`.
    pub fn build(scn: &Scenario, rank_nodes: &[NodeId]) -> Result<AggTree, TreeError> {
        let nn = scn.nodes.len();
        let is_switch = |v: NodeId| scn.nodes[v].kind == NodeKind::Switch;
        let mut adj = vec![Vec::new(); nn];
        for l in &scn.links {
            adj[l.a].push(l.b);
            adj[l.b].push(l.a);
        }
        for a in &mut adj {
            a.sort_unstable();
            a.dedup();
        }
        let mut home = Vec::with_capacity(rank_nodes.len());
        for (rank, &node) in rank_nodes.iter().enumerate() {
            match adj[node][..] {
                [s] if is_switch(s) => home.push(s),
                _ => return Err(TreeError::NotBehindASwitch { rank, node }),
            }
        }
        let bfs = |from: NodeId| {
            let mut dist = vec![usize::MAX; nn];
            let mut order = vec![from];
            dist[from] = 0;
            let mut i = 0;
            while i < order.len() {
                let v = order[i];
                i += 1;
                for &w in &adj[v] {
                    if is_switch(w) && dist[w] == usize::MAX {
                        dist[w] = dist[v] + 1;
                        order.push(w);
                    }
                }
            }
            (dist, order)
        };
        let mut homes = home.clone();
        homes.sort_unstable();
        homes.dedup();
        // The root: the least eccentricity over the ranks' switches.
        let mut root = None;
        for s in (0..nn).filter(|&s| is_switch(s)) {
            let (dist, _) = bfs(s);
            let ecc = homes.iter().map(|&h| dist[h]).max().unwrap_or(0);
            if ecc != usize::MAX && root.is_none_or(|(_, e)| ecc < e) {
                root = Some((s, ecc));
            }
        }
        let Some((root, _)) = root else {
            return Err(TreeError::Disconnected { a: 0, b: rank_nodes.len().saturating_sub(1) });
        };
        let (dist, order) = bfs(root);
        if let Some(r) = home.iter().position(|&h| dist[h] == usize::MAX) {
            return Err(TreeError::Disconnected { a: 0, b: r });
        }
        let up = |v: NodeId| adj[v].iter().copied().find(|&w| is_switch(w) && dist[w] + 1 == dist[v]);
        // Switch parents and the ranks directly behind each switch.
        let mut used = vec![false; nn];
        for &h in &homes {
            let mut v = h;
            while !used[v] {
                used[v] = true;
                match up(v) {
                    Some(p) => v = p,
                    None => break,
                }
            }
        }
        let mut kids: Vec<Vec<Child>> = vec![Vec::new(); nn];
        for (r, &h) in home.iter().enumerate() {
            kids[h].push(Child::Rank(r));
        }
        // Children switches, deepest first; a one-child switch forwards
        // its child to its parent and leaves the tree.
        let mut sw_kids: Vec<Vec<NodeId>> = vec![Vec::new(); nn];
        let mut stays = vec![false; nn];
        for &v in order.iter().rev().filter(|&&v| used[v]) {
            let total = kids[v].len() + sw_kids[v].len();
            let parent = if v == root { None } else { up(v) };
            match parent {
                Some(p) if total == 1 => {
                    // Hand the only child up.
                    let k = kids[v].pop();
                    let s = sw_kids[v].pop();
                    kids[p].extend(k);
                    sw_kids[p].extend(s);
                }
                Some(p) => {
                    stays[v] = true;
                    sw_kids[p].push(v);
                }
                None => stays[v] = true,
            }
        }
        // A root with one switch child hands the root down.
        let mut root = root;
        while kids[root].is_empty() && sw_kids[root].len() == 1 {
            stays[root] = false;
            root = sw_kids[root][0];
        }
        // Number the nodes top-down (root first).
        let mut index = vec![usize::MAX; nn];
        let mut switch = vec![root];
        index[root] = 0;
        let mut i = 0;
        while i < switch.len() {
            let v = switch[i];
            i += 1;
            let mut ks = sw_kids[v].clone();
            ks.sort_unstable();
            for k in ks {
                index[k] = switch.len();
                switch.push(k);
            }
        }
        let mut parent = vec![None; switch.len()];
        let mut children = vec![Vec::new(); switch.len()];
        let mut leaf_of = vec![0; rank_nodes.len()];
        for (a, &v) in switch.iter().enumerate() {
            let mut ranks = kids[v].clone();
            ranks.sort_unstable();
            for c in ranks {
                children[a].push(c);
                if let Child::Rank(r) = c {
                    leaf_of[r] = a;
                }
            }
            let mut ks: Vec<usize> = sw_kids[v].iter().map(|&k| index[k]).collect();
            ks.sort_unstable();
            for k in ks {
                parent[k] = Some(a);
                children[a].push(Child::Node(k));
            }
        }
        Ok(AggTree { switch, parent, children, leaf_of })
    }

    /// Aggregation nodes.
    #[allow(clippy::len_without_is_empty)] // a tree of a job has a root
    pub fn len(&self) -> usize {
        self.switch.len()
    }

    /// Levels from the root to the deepest rank (1: one switch).
    pub fn depth(&self) -> usize {
        let mut d = vec![1usize; self.len()];
        for a in 1..self.len() {
            // Nodes are numbered top-down: a parent comes first.
            d[a] = d[self.parent[a].expect("only the root has no parent")] + 1;
        }
        d.into_iter().max().unwrap_or(0)
    }

    /// Adds each aggregation node to `scn` as a host node on a port of its
    /// switch, and returns their nodes (in tree order).
    pub fn attach(&self, scn: &mut Scenario) -> Vec<NodeId> {
        let mut nodes = Vec::with_capacity(self.len());
        for &sw in &self.switch {
            let rate: u64 =
                scn.links.iter().filter(|l| l.a == sw || l.b == sw).map(|l| l.rate_bps).sum::<u64>().max(1);
            scn.nodes.push(NodeSpec { kind: NodeKind::Host, name: format!("agg-{}", scn.nodes[sw].name) });
            let node = scn.nodes.len() - 1;
            scn.links.push(LinkSpec {
                a: sw,
                b: node,
                rate_bps: rate,
                delay_ps: PS_PER_NS,
                loss: 0.0,
                faults: LinkFaults::default(),
            });
            nodes.push(node);
        }
        nodes
    }
}
