//! The HPCC output files: `fct.txt` and `pfc.txt`, written from a
//! [`Report`] and read back (ours or the artifact's).
//!
//! - `fct.txt`, one line per finished flow in completion order:
//!   `sip dip sport dport size start_ns fct_ns standalone_fct_ns`, the IPs
//!   as 8 hex digits (host id = `(ip >> 8) & 0xffff`), times in ns
//!   (picoseconds / 1000, truncated). The ports are the flow's as the HPCC
//!   simulator numbers them ([`hpcc_sports`], [`FlowSpec::dport`]), not
//!   the UDP ports its packets carried (those go to 4791 from the QP's
//!   source port, and are in [`crate::FctRecord`]): HPCC's analysis
//!   scripts select flows by the dport column.
//! - `pfc.txt`, one line per PFC frame received, in time order:
//!   `time_ns node_id node_type if_index type`, node_type 0 host / 1
//!   switch, if_index the receiving port (ns-3 device index, from 1), type
//!   1 PAUSE / 0 RESUME.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use super::standalone::Standalone;
use super::text::{read_text, Cursor};
use super::{host_ip, ip_node, HpccError, ParseReason};
use crate::report::Report;
#[cfg(doc)]
use crate::scenario::FlowSpec;
use crate::scenario::{NodeId, NodeKind, Scenario, PS_PER_NS};

/// The first source port of each pair of hosts in the HPCC simulator.
pub const HPCC_FIRST_SPORT: u16 = 10_000;

/// One line of an `fct.txt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FctLine {
    pub sip: u32,
    pub dip: u32,
    pub sport: u16,
    pub dport: u16,
    pub size: u64,
    pub start_ns: u64,
    pub fct_ns: u64,
    pub standalone_ns: u64,
}

impl FctLine {
    /// Host id of the source (`(sip >> 8) & 0xffff`).
    pub fn src(&self) -> NodeId {
        ip_node(self.sip)
    }

    pub fn dst(&self) -> NodeId {
        ip_node(self.dip)
    }

    /// fct / standalone, at least 1 (the artifact's convention).
    pub fn slowdown(&self) -> f64 {
        if self.standalone_ns == 0 {
            return 1.0;
        }
        (self.fct_ns as f64 / self.standalone_ns as f64).max(1.0)
    }
}

/// One line of a `pfc.txt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcLine {
    pub time_ns: u64,
    pub node: NodeId,
    pub is_switch: bool,
    pub if_index: u32,
    /// PAUSE (1) or RESUME (0).
    pub pause: bool,
}

/// The source port the HPCC simulator gives each flow of `scn`, by flow
/// index: every (source, destination) pair of hosts counts from
/// [`HPCC_FIRST_SPORT`] in the order its flows start, which is the flow
/// list's order (`scratch/third.cc`: `portNumder[src][dst]++`, a 16-bit
/// counter set to 10000 for every pair, read as each flow is scheduled).
/// The counter is 16 bits there too, so it wraps after 65535.
pub fn hpcc_sports(scn: &Scenario) -> Vec<u16> {
    let mut next: HashMap<(NodeId, NodeId), u16> = HashMap::new();
    scn.flows
        .iter()
        .map(|f| {
            let port = next.entry((f.src, f.dst)).or_insert(HPCC_FIRST_SPORT);
            let this = *port;
            *port = port.wrapping_add(1);
            this
        })
        .collect()
}

/// Writes the flows of `report` in `fct.txt` form; `payload` is the packet
/// payload size of the standalone-FCT formula. A flow with no path (which
/// cannot have finished) gets a standalone FCT of 0. The ports are HPCC's
/// (see the module docs); a record whose flow `scn` does not have keeps
/// the UDP ports it went out with.
pub fn write_fct(w: &mut dyn Write, scn: &Scenario, report: &Report, payload: u64) -> io::Result<()> {
    let mut standalone = Standalone::new(scn, payload);
    let sports = hpcc_sports(scn);
    for r in &report.fct {
        let alone = standalone.fct_ps(r.src, r.dst, r.size).unwrap_or(0);
        let (sport, dport) = match (sports.get(r.flow), scn.flows.get(r.flow)) {
            (Some(&sport), Some(f)) => (sport, f.dport),
            _ => (r.sport, r.dport),
        };
        writeln!(
            w,
            "{:08x} {:08x} {} {} {} {} {} {}",
            host_ip(r.src),
            host_ip(r.dst),
            sport,
            dport,
            r.size,
            r.start_ps / PS_PER_NS,
            r.fct_ps / PS_PER_NS,
            alone / PS_PER_NS
        )?;
    }
    Ok(())
}

/// Writes the PFC frames of `report` in `pfc.txt` form; the node type is
/// the scenario's (the record's for a node the scenario does not have).
pub fn write_pfc(w: &mut dyn Write, scn: &Scenario, report: &Report) -> io::Result<()> {
    for r in &report.pfc {
        let is_switch = scn.nodes.get(r.node).map_or(r.is_switch, |n| n.kind == NodeKind::Switch);
        writeln!(
            w,
            "{} {} {} {} {}",
            r.time_ps / PS_PER_NS,
            r.node,
            u8::from(is_switch),
            r.port,
            u8::from(r.pause)
        )?;
    }
    Ok(())
}

/// Reads an `fct.txt`.
pub fn read_fct(path: &Path) -> Result<Vec<FctLine>, HpccError> {
    parse_fct(&read_text(path)?, path)
}

/// Parses the text of an `fct.txt`; `path` names it in errors.
pub fn parse_fct(text: &str, path: &Path) -> Result<Vec<FctLine>, HpccError> {
    let mut cur = Cursor::new(text, path);
    let mut out = Vec::new();
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    while let Some(mut f) = cur.next_opt() {
        let line = FctLine {
            sip: f.with("sip", "8 hex digits", hex)?,
            dip: f.with("dip", "8 hex digits", hex)?,
            sport: f.parse("sport", "a port")?,
            dport: f.parse("dport", "a port")?,
            size: f.parse("size", "bytes")?,
            start_ns: f.parse("start_ns", "nanoseconds")?,
            fct_ns: f.parse("fct_ns", "nanoseconds")?,
            standalone_ns: f.parse("standalone_ns", "nanoseconds")?,
        };
        f.end()?;
        out.push(line);
    }
    Ok(out)
}

/// Reads a `pfc.txt`.
pub fn read_pfc(path: &Path) -> Result<Vec<PfcLine>, HpccError> {
    parse_pfc(&read_text(path)?, path)
}

/// Parses the text of a `pfc.txt`; `path` names it in errors.
pub fn parse_pfc(text: &str, path: &Path) -> Result<Vec<PfcLine>, HpccError> {
    let mut cur = Cursor::new(text, path);
    let mut out = Vec::new();
    let bit = |s: &str| match s {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    };
    while let Some(mut f) = cur.next_opt() {
        let line = PfcLine {
            time_ns: f.parse("time_ns", "nanoseconds")?,
            node: f.parse("node_id", "a node id")?,
            is_switch: f.with("node_type", "0 (host) or 1 (switch)", bit)?,
            if_index: f.parse("if_index", "a port number")?,
            pause: f.with("type", "1 (pause) or 0 (resume)", bit)?,
        };
        if line.if_index == 0 {
            return Err(f.err(ParseReason::BadValue {
                field: "if_index",
                value: "0".into(),
                expected: "a port number from 1",
            }));
        }
        f.end()?;
        out.push(line);
    }
    Ok(out)
}
