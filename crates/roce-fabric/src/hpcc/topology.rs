//! HPCC topology files.
//!
//! Format: line 1 `N_nodes N_switches N_links`; line 2 the `N_switches`
//! switch ids (absent when there are none); then one line per link,
//! `a b rate delay error_rate`, e.g. `0 1 100Gbps 0.001ms 0`. Only the
//! declared number of links is read: the artifact's files may carry other
//! text after them. Rates take ns-3 units (`Gbps`, `Mb/s`...), delays
//! `ps`/`ns`/`us`/`ms`/`s`; the error rate is a probability. Node ids are
//! `0..N_nodes`; a node not listed as a switch is a host.

use std::path::Path;

use super::text::{read_text, Cursor};
use super::{units, HpccError, ParseReason};
use crate::scenario::{NodeId, Time};

/// One link of a topology file.
#[derive(Debug, Clone, PartialEq)]
pub struct TopoLink {
    pub a: NodeId,
    pub b: NodeId,
    pub rate_bps: u64,
    pub delay_ps: Time,
    /// Probability that a packet is lost.
    pub error_rate: f64,
    /// Line of the file (for errors found later).
    pub line: usize,
}

/// A parsed topology file.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// `is_switch[id]` for every node id.
    pub is_switch: Vec<bool>,
    pub links: Vec<TopoLink>,
}

impl Topology {
    pub fn node_count(&self) -> usize {
        self.is_switch.len()
    }

    /// Reads and parses a topology file.
    pub fn read(path: &Path) -> Result<Topology, HpccError> {
        Topology::parse(&read_text(path)?, path)
    }

    /// Parses the text of a topology file; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Topology, HpccError> {
        let mut cur = Cursor::new(text, path);
        let mut head = cur.next("the `N_nodes N_switches N_links` line")?;
        let nodes: usize = head.parse("N_nodes", "a node count")?;
        let n_switches: usize = head.parse("N_switches", "a switch count")?;
        let n_links: usize = head.parse("N_links", "a link count")?;
        if n_switches > nodes {
            return Err(
                head.err(ParseReason::Inconsistent(format!("{n_switches} switches among {nodes} nodes")))
            );
        }
        head.end()?;
        let node_id = |s: &str| s.parse::<usize>().ok().filter(|&id| id < nodes);
        let mut is_switch = vec![false; nodes];
        if n_switches > 0 {
            let mut ids = cur.next("the switch id line")?;
            for _ in 0..n_switches {
                let id = ids.with("switch id", "a node id below N_nodes", node_id)?;
                if std::mem::replace(&mut is_switch[id], true) {
                    return Err(ids.err(ParseReason::Inconsistent(format!("switch {id} listed twice"))));
                }
            }
            ids.end()?;
        }
        let mut links = Vec::with_capacity(n_links);
        for _ in 0..n_links {
            let mut f = cur.next("a link line `a b rate delay error_rate`")?;
            let a = f.with("a", "a node id below N_nodes", node_id)?;
            let b = f.with("b", "a node id below N_nodes", node_id)?;
            let rate_bps = f.with("rate", "a rate such as 100Gbps", units::rate_bps)?;
            let delay_ps = f.with("delay", "a delay such as 0.001ms or 1000ns", units::delay_ps)?;
            let error_rate = f.with("error_rate", "a probability in [0, 1]", |s| {
                s.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p))
            })?;
            if a == b {
                return Err(f.err(ParseReason::Inconsistent(format!("link from node {a} to itself"))));
            }
            if rate_bps == 0 {
                return Err(f.err(ParseReason::Inconsistent("a link of rate 0".into())));
            }
            let line = f.line;
            f.end()?;
            links.push(TopoLink { a, b, rate_bps, delay_ps, error_rate, line });
        }
        Ok(Topology { is_switch, links })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::PS_PER_US;

    fn parse(text: &str) -> Result<Topology, HpccError> {
        Topology::parse(text, Path::new("topo.txt"))
    }

    fn reason(text: &str) -> (usize, ParseReason) {
        match parse(text) {
            Err(HpccError::Parse { line, reason, .. }) => (line, reason),
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn reads_declared_links_only() {
        let t = parse("3 1 2\r\n0\r\n0 1 100Gbps 0.001ms 0\r\n0 2 400Gbps 1000ns 0.01\r\nsrc0 dst0 rate\n")
            .unwrap();
        assert_eq!(t.is_switch, vec![true, false, false]);
        assert_eq!(t.links.len(), 2);
        assert_eq!(t.links[0].rate_bps, 100_000_000_000);
        assert_eq!(t.links[0].delay_ps, PS_PER_US);
        assert_eq!(t.links[1].delay_ps, PS_PER_US);
        assert_eq!(t.links[1].error_rate, 0.01);
        assert_eq!(t.links[1].line, 4);
    }

    #[test]
    fn no_switch_line_when_no_switches() {
        let t = parse("2 0 1\n0 1 10Gbps 1us 0\n").unwrap();
        assert_eq!(t.is_switch, vec![false, false]);
    }

    #[test]
    fn malformed_inputs_name_the_line() {
        assert!(matches!(reason(""), (1, ParseReason::UnexpectedEof(_))));
        assert!(matches!(reason("3 1\n"), (1, ParseReason::MissingField("N_links"))));
        assert!(matches!(reason("3 x 1\n"), (1, ParseReason::BadValue { field: "N_switches", .. })));
        assert!(matches!(reason("3 1 1\n7\n"), (2, ParseReason::BadValue { field: "switch id", .. })));
        assert!(matches!(reason("3 1 2\n0\n0 1 100Gbps 1us 0\n"), (4, ParseReason::UnexpectedEof(_))));
        assert!(matches!(
            reason("3 1 1\n0\n0 1 100Gbit 1us 0\n"),
            (3, ParseReason::BadValue { field: "rate", .. })
        ));
        assert!(matches!(
            reason("3 1 1\n0\n0 1 100Gbps 1 0\n"),
            (3, ParseReason::BadValue { field: "delay", .. })
        ));
        assert!(matches!(
            reason("3 1 1\n0\n0 1 100Gbps 1us 2\n"),
            (3, ParseReason::BadValue { field: "error_rate", .. })
        ));
        assert!(matches!(reason("3 1 1\n0\n1 1 100Gbps 1us 0\n"), (3, ParseReason::Inconsistent(_))));
        assert!(matches!(reason("3 1 1\n0\n0 1 100Gbps 1us 0 9\n"), (3, ParseReason::ExtraField(_))));
        assert!(matches!(reason("3 2 0\n0 0\n"), (2, ParseReason::Inconsistent(_))));
        assert!(matches!(reason("3 4 0\n"), (1, ParseReason::Inconsistent(_))));
    }

    #[test]
    fn error_message_has_file_and_line() {
        let e = parse("3 1 1\n0\n0 1 100Gbit 1us 0\n").unwrap_err();
        assert!(e.to_string().starts_with("topo.txt:3: "), "{e}");
    }
}
