//! HPCC flow lists (`flow.txt`).
//!
//! Format: line 1 the number of flows; then one line per flow,
//! `src dst pg dport size start_time_s` (e.g. `13 6 3 100 24375
//! 2.000000962`): source and destination node ids, the priority group
//! (802.1p priority, 0..=7), the destination port, the size in bytes and
//! the start time in seconds, read exactly to the picosecond. Only the
//! declared number of flows is read.

use std::path::Path;

use super::text::{read_text, Cursor};
use super::{units, HpccError};
use crate::scenario::{NodeId, Time, PRIORITIES};

/// One line of a flow list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HpccFlow {
    pub src: NodeId,
    pub dst: NodeId,
    /// Priority group: the 802.1p priority of the flow.
    pub pg: u8,
    pub dport: u16,
    pub size: u64,
    pub start_ps: Time,
    /// Line of the file (for errors found later).
    pub line: usize,
}

/// Reads and parses a flow list.
pub fn read_flows(path: &Path) -> Result<Vec<HpccFlow>, HpccError> {
    parse_flows(&read_text(path)?, path)
}

/// Parses the text of a flow list; `path` names it in errors.
pub fn parse_flows(text: &str, path: &Path) -> Result<Vec<HpccFlow>, HpccError> {
    let mut cur = Cursor::new(text, path);
    let mut head = cur.next("the flow count")?;
    let count: usize = head.parse("flow count", "a number of flows")?;
    head.end()?;
    let mut flows = Vec::with_capacity(count.min(1 << 20));
    for _ in 0..count {
        let mut f = cur.next("a flow line `src dst pg dport size start_time_s`")?;
        let src = f.parse("src", "a node id")?;
        let dst = f.parse("dst", "a node id")?;
        let pg = f.with("pg", "a priority 0..=7", |s| {
            s.parse::<u8>().ok().filter(|&p| usize::from(p) < PRIORITIES)
        })?;
        let dport = f.parse("dport", "a port 0..=65535")?;
        let size = f.parse("size", "a size in bytes")?;
        let start_ps = f.with("start_time", "seconds, e.g. 2.000000962", units::seconds_ps)?;
        let line = f.line;
        f.end()?;
        flows.push(HpccFlow { src, dst, pg, dport, size, start_ps, line });
    }
    Ok(flows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpcc::ParseReason;

    fn parse(text: &str) -> Result<Vec<HpccFlow>, HpccError> {
        parse_flows(text, Path::new("flow.txt"))
    }

    #[test]
    fn reads_flows_exactly() {
        let f = parse("2 \n13 6 3 100 24375 2.000000962\n91 176 3 100 4727 2\nextra text\n").unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(
            f[0],
            HpccFlow {
                src: 13,
                dst: 6,
                pg: 3,
                dport: 100,
                size: 24375,
                start_ps: 2_000_000_962_000,
                line: 2
            }
        );
        assert_eq!(f[1].start_ps, 2_000_000_000_000);
    }

    #[test]
    fn malformed_flows_name_the_line() {
        let err = |t: &str| match parse(t) {
            Err(HpccError::Parse { line, reason, .. }) => (line, reason),
            other => panic!("{other:?}"),
        };
        assert!(matches!(err("x\n"), (1, ParseReason::BadValue { field: "flow count", .. })));
        assert!(matches!(err("2\n1 2 3 100 10 2\n"), (3, ParseReason::UnexpectedEof(_))));
        assert!(matches!(err("1\n1 2 8 100 10 2\n"), (2, ParseReason::BadValue { field: "pg", .. })));
        assert!(matches!(err("1\n1 2 3 70000 10 2\n"), (2, ParseReason::BadValue { field: "dport", .. })));
        assert!(matches!(err("1\n1 2 3 100 -5 2\n"), (2, ParseReason::BadValue { field: "size", .. })));
        assert!(matches!(
            err("1\n1 2 3 100 5 2e0\n"),
            (2, ParseReason::BadValue { field: "start_time", .. })
        ));
        assert!(matches!(err("1\n1 2 3 100 5\n"), (2, ParseReason::MissingField("start_time"))));
        assert!(matches!(err("1\n1 2 3 100 5 2 7\n"), (2, ParseReason::ExtraField(_))));
    }
}
