//! Topology generators: the fabrics a training cluster runs on, as
//! [`Scenario`]s (hosts first, nodes `0..hosts`, then the switches), with
//! no flows, ready for [`crate::mesh::Mesh::on_fabric`] or to be written
//! as TOML ([`crate::toml_scenario::to_toml`] if a file is wanted).
//!
//! * [`single_switch`]: `n` hosts behind one switch (the ideal fabric of
//!   the analytic check).
//! * [`fat_tree`]: the k-ary fat-tree of Al-Fares, Loukissas and Vahdat
//!   (SIGCOMM 2008): `k` pods of `k/2` edge and `k/2` aggregation
//!   switches, `(k/2)^2` core switches, `k/2` hosts per edge switch, so
//!   `k^3/4` hosts (k = 8: 128, k = 16: 1,024), every link at one rate:
//!   full bisection bandwidth, paths spread by flow-hash ECMP.
//! * [`leaf_spine`]: a two-tier Clos: leaves of `hosts_per_leaf` hosts,
//!   every leaf linked to every spine, the uplinks' total rate the
//!   downlinks' divided by the oversubscription; with `rails > 1`, hosts
//!   are servers of `rails` NICs and NIC `r` of every server sits on a
//!   leaf of rail `r` (the rail-optimised layout of GPU clusters).
//!
//! Routes are the simulator's shortest paths with ECMP over equal-cost
//! next hops ([`crate::routing`]).

use crate::scenario::{
    Framing, LinkFaults, LinkSpec, MonitorConfig, NicConfig, NodeKind, NodeSpec, Scenario, SwitchConfig, Time,
};

/// Rate (bit/s) and one-way delay (ps) of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkKind {
    pub rate_bps: u64,
    pub delay_ps: Time,
}

/// Why a topology cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopoError {
    #[error("fat-tree: k must be even and in 2..=62, got {0}")]
    FatTreeK(usize),
    #[error("{0}: at least 2 hosts are needed, got {1}")]
    TooFewHosts(&'static str, usize),
    #[error("leaf-spine: {0}")]
    LeafSpine(String),
    #[error("{what}: {nodes} nodes is more than the 65,535 the simulator numbers")]
    TooLarge { what: &'static str, nodes: usize },
}

struct Builder {
    nodes: Vec<NodeSpec>,
    links: Vec<LinkSpec>,
}

impl Builder {
    fn new(hosts: usize) -> Builder {
        Builder {
            nodes: (0..hosts).map(|h| NodeSpec { kind: NodeKind::Host, name: format!("h{h}") }).collect(),
            links: Vec::new(),
        }
    }
    fn switch(&mut self, name: String) -> usize {
        self.nodes.push(NodeSpec { kind: NodeKind::Switch, name });
        self.nodes.len() - 1
    }
    fn link(&mut self, a: usize, b: usize, k: LinkKind) {
        self.links.push(LinkSpec {
            a,
            b,
            rate_bps: k.rate_bps,
            delay_ps: k.delay_ps,
            loss: 0.0,
            faults: LinkFaults::default(),
        });
    }
    fn done(self, name: String, switch: SwitchConfig, what: &'static str) -> Result<Scenario, TopoError> {
        if self.nodes.len() > u16::MAX as usize {
            return Err(TopoError::TooLarge { what, nodes: self.nodes.len() });
        }
        Ok(Scenario {
            name,
            seed: 1,
            nodes: self.nodes,
            links: self.links,
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
        })
    }
}

/// `n` hosts on one switch, each on its own link.
pub fn single_switch(n: usize, link: LinkKind, switch: SwitchConfig) -> Result<Scenario, TopoError> {
    if n < 2 {
        return Err(TopoError::TooFewHosts("single switch", n));
    }
    let mut b = Builder::new(n);
    let sw = b.switch("sw0".into());
    for h in 0..n {
        b.link(h, sw, link);
    }
    b.done(format!("switch-{n}"), switch, "single switch")
}

/// The k-ary fat-tree (`k^3/4` hosts). Host `h` is on edge switch
/// `h / (k/2)`; edge switch `e` of pod `p` links to every aggregation
/// switch of `p`; aggregation switch `a` of every pod links to core
/// switches `a*(k/2) .. (a+1)*(k/2)`.
pub fn fat_tree(k: usize, link: LinkKind, switch: SwitchConfig) -> Result<Scenario, TopoError> {
    if k < 2 || k % 2 != 0 || k > 62 {
        return Err(TopoError::FatTreeK(k));
    }
    let h = k / 2;
    let hosts = k * k * k / 4;
    let mut b = Builder::new(hosts);
    let edge: Vec<Vec<usize>> =
        (0..k).map(|p| (0..h).map(|e| b.switch(format!("edge{p}.{e}"))).collect()).collect();
    let agg: Vec<Vec<usize>> =
        (0..k).map(|p| (0..h).map(|a| b.switch(format!("agg{p}.{a}"))).collect()).collect();
    let core: Vec<usize> = (0..h * h).map(|c| b.switch(format!("core{c}"))).collect();
    for host in 0..hosts {
        let e = host / h;
        b.link(host, edge[e / h][e % h], link);
    }
    for p in 0..k {
        for &e in &edge[p] {
            for &a in &agg[p] {
                b.link(e, a, link);
            }
        }
        for (a, &ag) in agg[p].iter().enumerate() {
            for &c in &core[a * h..(a + 1) * h] {
                b.link(ag, c, link);
            }
        }
    }
    b.done(format!("fat-tree-k{k}"), switch, "fat-tree")
}

/// A two-tier leaf-spine fabric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeafSpine {
    pub hosts: usize,
    pub hosts_per_leaf: usize,
    pub spines: usize,
    /// Downlink rate over uplink rate of a leaf (1.0: non-blocking).
    pub oversubscription: f64,
    /// NICs per server; NIC `r` of every server is on a leaf of rail `r`.
    pub rails: usize,
    pub host_link: LinkKind,
    /// One-way delay of a leaf-spine link.
    pub uplink_delay_ps: Time,
}

/// Builds [`LeafSpine`]: host `h` is NIC `h % rails` of server
/// `h / rails`; rail `r`'s servers fill its leaves `hosts_per_leaf` at a
/// time; each leaf has one link to each spine at
/// `hosts_per_leaf x rate / (oversubscription x spines)`.
pub fn leaf_spine(t: &LeafSpine, switch: SwitchConfig) -> Result<Scenario, TopoError> {
    let bad = |m: String| Err(TopoError::LeafSpine(m));
    if t.hosts < 2 {
        return Err(TopoError::TooFewHosts("leaf-spine", t.hosts));
    }
    if t.hosts_per_leaf == 0 || t.spines == 0 || t.rails == 0 {
        return bad("hosts_per_leaf, spines and rails must be at least 1".into());
    }
    if t.hosts % t.rails != 0 {
        return bad(format!("{} hosts are not whole servers of {} rails", t.hosts, t.rails));
    }
    if !(t.oversubscription.is_finite() && t.oversubscription >= 1.0) {
        return bad(format!("oversubscription must be >= 1, got {}", t.oversubscription));
    }
    let servers = t.hosts / t.rails;
    let leaves_per_rail = servers.div_ceil(t.hosts_per_leaf);
    let up = t.hosts_per_leaf as f64 * t.host_link.rate_bps as f64 / (t.oversubscription * t.spines as f64);
    let uplink = LinkKind { rate_bps: (up as u64).max(1), delay_ps: t.uplink_delay_ps };
    let mut b = Builder::new(t.hosts);
    let leaves: Vec<Vec<usize>> = (0..t.rails)
        .map(|r| (0..leaves_per_rail).map(|l| b.switch(format!("leaf{r}.{l}"))).collect())
        .collect();
    let spines: Vec<usize> = (0..t.spines).map(|s| b.switch(format!("spine{s}"))).collect();
    for host in 0..t.hosts {
        let (server, rail) = (host / t.rails, host % t.rails);
        b.link(host, leaves[rail][server / t.hosts_per_leaf], t.host_link);
    }
    for rail in &leaves {
        for &l in rail {
            for &s in &spines {
                b.link(l, s, uplink);
            }
        }
    }
    let name = format!("leaf-spine-{}x{}-{}s", t.rails * leaves_per_rail, t.hosts_per_leaf, t.spines);
    b.done(name, switch, "leaf-spine")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::PS_PER_US;

    const L: LinkKind = LinkKind { rate_bps: 100_000_000_000, delay_ps: PS_PER_US };

    fn degree(s: &Scenario, n: usize) -> usize {
        s.links.iter().filter(|l| l.a == n || l.b == n).count()
    }

    #[test]
    fn a_fat_tree_has_k_cubed_over_4_hosts_and_full_degree() {
        for (k, hosts) in [(4, 16), (8, 128), (16, 1024)] {
            let s = fat_tree(k, L, SwitchConfig::hpcc()).unwrap();
            let switches = s.nodes.len() - hosts;
            assert_eq!(switches, k * k + k * k / 4, "k={k}");
            assert!(s.nodes[..hosts].iter().all(|n| n.kind == NodeKind::Host));
            assert!((0..hosts).all(|h| degree(&s, h) == 1));
            // every switch has k ports, except the core's k (one per pod)
            assert!((hosts..s.nodes.len()).all(|n| degree(&s, n) == k), "k={k}");
            crate::scenario::validate(&s).unwrap();
        }
        assert_eq!(fat_tree(5, L, SwitchConfig::hpcc()).unwrap_err(), TopoError::FatTreeK(5));
    }

    #[test]
    fn a_leaf_spine_has_its_rails_and_oversubscription() {
        let t = LeafSpine {
            hosts: 32,
            hosts_per_leaf: 4,
            spines: 2,
            oversubscription: 2.0,
            rails: 2,
            host_link: L,
            uplink_delay_ps: PS_PER_US,
        };
        let s = leaf_spine(&t, SwitchConfig::hpcc()).unwrap();
        // 16 servers of 2 NICs: 4 leaves per rail, 8 leaves, 2 spines
        assert_eq!(s.nodes.len(), 32 + 8 + 2);
        let up: Vec<&LinkSpec> = s.links.iter().filter(|l| l.a >= 32).collect();
        assert_eq!(up.len(), 16);
        assert!(up.iter().all(|l| l.rate_bps == 100_000_000_000));
        // hosts 0 and 1 (one server) are on different rails' leaves
        let leaf_of = |h: usize| s.links.iter().find(|l| l.a == h).unwrap().b;
        assert_ne!(leaf_of(0), leaf_of(1));
        assert_eq!(leaf_of(0), leaf_of(2));
        crate::scenario::validate(&s).unwrap();
        let err = leaf_spine(&LeafSpine { rails: 3, ..t }, SwitchConfig::hpcc()).unwrap_err();
        assert!(err.to_string().contains("whole servers"), "{err}");
        assert!(leaf_spine(&LeafSpine { oversubscription: 0.5, ..t }, SwitchConfig::hpcc()).is_err());
    }
}
