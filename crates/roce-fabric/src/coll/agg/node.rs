//! An aggregation node: the slot pool of one switch of the tree (the
//! module above has the protocol).

use std::collections::VecDeque;

use roce_coll::reduce::reduce;
use roce_coll::{data_slot, Completion, Layout, Transport, HEADER_BYTES};

use super::{imm, AggError, Header};

/// One slot of the pool.
#[derive(Clone)]
struct Slot {
    /// The chunk being aggregated (the first child's header).
    head: Option<Header>,
    /// Per child: its contribution arrived.
    have: Vec<bool>,
    arrived: usize,
    /// Sent up, its result awaited from the parent.
    up: bool,
}

/// A message waiting for its staging slot.
#[derive(Debug, Clone, Copy)]
struct Out {
    /// Index into `peers`.
    to: usize,
    slot: usize,
    /// From the pool's slot (a partial or the root's result) or from the
    /// parent's receive slot (a result to pass down).
    from_parent: bool,
}

/// One switch's aggregation node.
pub struct Aggregator {
    /// Endpoints: the children, then the parent (if any).
    peers: Vec<usize>,
    children: usize,
    layout: Layout,
    /// Reduce the values (results checked) or pass headers only (timing).
    pub compute: bool,
    slots: Vec<Slot>,
    /// Per slot: the partial aggregate (header, then payload).
    acc: Vec<Vec<u8>>,
    /// Per peer and slot: the last write there acknowledged.
    staged_free: Vec<Vec<bool>>,
    waiting: VecDeque<Out>,
    scratch: Vec<u8>,
    done: Vec<Completion>,
    /// Chunks aggregated, over all calls.
    pub chunks: u64,
}

impl Aggregator {
    /// The node whose children are endpoints `children` and whose parent is
    /// `parent` (`None`: the root), with a pool of `layout.slots` slots of
    /// `layout.slot_bytes`.
    pub fn new(children: Vec<usize>, parent: Option<usize>, layout: Layout) -> Aggregator {
        let nc = children.len();
        let mut peers = children;
        peers.extend(parent);
        Aggregator {
            staged_free: vec![vec![true; layout.slots]; peers.len()],
            peers,
            children: nc,
            layout,
            compute: true,
            slots: vec![Slot { head: None, have: vec![false; nc], arrived: 0, up: false }; layout.slots],
            acc: vec![Vec::new(); layout.slots],
            waiting: VecDeque::new(),
            scratch: Vec::new(),
            done: Vec::new(),
            chunks: 0,
        }
    }

    fn parent(&self) -> Option<usize> {
        (self.peers.len() > self.children).then_some(self.children)
    }

    /// Takes what arrived and forwards what is complete.
    pub fn progress(&mut self, t: &mut dyn Transport) -> Result<(), AggError> {
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        t.poll(&mut done)?;
        for &d in &done {
            match d {
                Completion::Sent { peer, token, .. } => {
                    let p = self.index(peer)?;
                    self.staged_free[p][token as usize % self.layout.slots] = true;
                }
                Completion::Arrived { peer, imm: i, .. } => {
                    let p = self.index(peer)?;
                    let Some(s) = data_slot(i).filter(|&s| s < self.layout.slots) else {
                        return Err(AggError::Malformed {
                            from: peer,
                            why: format!("immediate {i:#x}: no slot"),
                        });
                    };
                    if p < self.children {
                        self.child_chunk(t, p, s)?;
                    } else {
                        self.parent_result(t, s)?;
                    }
                }
            }
        }
        self.done = done;
        self.flush(t)
    }

    fn index(&self, peer: usize) -> Result<usize, AggError> {
        self.peers.iter().position(|&p| p == peer).ok_or(AggError::Malformed {
            from: peer,
            why: "a write from an endpoint outside this node's group".into(),
        })
    }

    fn read_head(&self, t: &mut dyn Transport, p: usize, s: usize) -> Result<Header, AggError> {
        let mut head = Err(String::new());
        let sb = self.layout.slot_bytes;
        t.read_slot(self.peers[p], 0, s, &mut |b| head = Header::parse(b, sb))?;
        head.map_err(|why| AggError::Malformed { from: self.peers[p], why })
    }

    fn child_chunk(&mut self, t: &mut dyn Transport, p: usize, s: usize) -> Result<(), AggError> {
        let h = self.read_head(t, p, s)?;
        let from = self.peers[p];
        let slot = &mut self.slots[s];
        if slot.have[p] || slot.up {
            return Err(AggError::Malformed { from, why: format!("a second chunk in busy slot {s}") });
        }
        if h.chunk as usize % self.layout.slots != s {
            return Err(AggError::Malformed { from, why: format!("chunk {} in slot {s}", h.chunk) });
        }
        match slot.head {
            None => slot.head = Some(h),
            Some(first) if first == h => {}
            Some(first) => {
                return Err(AggError::Disagree(format!(
                    "slot {s}: {first:?} from one child, {h:?} from another"
                )))
            }
        }
        slot.have[p] = true;
        slot.arrived += 1;
        if slot.arrived < self.children {
            return Ok(());
        }
        // Every child's chunk is in: reduce, in the children's order.
        let len = h.len as usize;
        let acc = &mut self.acc[s];
        acc.resize(HEADER_BYTES + if self.compute { len } else { 0 }, 0);
        h.emit(&mut acc[..HEADER_BYTES]);
        if self.compute {
            for c in 0..self.children {
                let dst = &mut acc[HEADER_BYTES..HEADER_BYTES + len];
                t.read_slot(self.peers[c], 0, s, &mut |b| {
                    let src = &b[HEADER_BYTES..HEADER_BYTES + len];
                    if c == 0 {
                        dst.copy_from_slice(src);
                    } else {
                        reduce(h.dtype, h.redop, dst, src);
                    }
                })?;
            }
        }
        self.chunks += 1;
        let slot = &mut self.slots[s];
        slot.have.fill(false);
        slot.arrived = 0;
        slot.head = None;
        match self.parent() {
            Some(up) => {
                self.slots[s].up = true;
                self.waiting.push_back(Out { to: up, slot: s, from_parent: false });
            }
            None => {
                for c in 0..self.children {
                    self.waiting.push_back(Out { to: c, slot: s, from_parent: false });
                }
            }
        }
        Ok(())
    }

    fn parent_result(&mut self, t: &mut dyn Transport, s: usize) -> Result<(), AggError> {
        let up = self.parent().expect("only a parent's index is past the children");
        let h = self.read_head(t, up, s)?;
        let from = self.peers[up];
        // What went up from this slot (its partial's header) is what comes back.
        let matches = Header::parse(&self.acc[s], self.layout.slot_bytes) == Ok(h);
        if !self.slots[s].up || !matches {
            return Err(AggError::Malformed {
                from,
                why: format!("a result {h:?} for slot {s}, which awaits none"),
            });
        }
        self.slots[s].up = false;
        for c in 0..self.children {
            self.waiting.push_back(Out { to: c, slot: s, from_parent: true });
        }
        Ok(())
    }

    /// Writes every waiting message whose staging slot is free, in order
    /// per peer.
    fn flush(&mut self, t: &mut dyn Transport) -> Result<(), AggError> {
        let mut blocked: Vec<bool> = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            let o = self.waiting[i];
            if !self.staged_free[o.to][o.slot] || blocked.get(o.to) == Some(&true) {
                blocked.resize(self.peers.len(), false);
                blocked[o.to] = true;
                i += 1;
                continue;
            }
            self.waiting.remove(i);
            let src: &[u8] = if o.from_parent {
                let up = self.peers[self.parent().expect("a parent")];
                let n = if self.compute { self.layout.slot_bytes } else { HEADER_BYTES };
                self.scratch.resize(n, 0);
                let scratch = &mut self.scratch;
                t.read_slot(up, 0, o.slot, &mut |b| scratch.copy_from_slice(&b[..n]))?;
                &self.scratch
            } else {
                &self.acc[o.slot]
            };
            let h = Header::parse(src, self.layout.slot_bytes)
                .map_err(|why| AggError::Malformed { from: self.peers[o.to], why })?;
            let copy = if self.compute { HEADER_BYTES + h.len as usize } else { HEADER_BYTES };
            let src = &src[..copy];
            let to = self.peers[o.to];
            t.stage(to, 0, o.slot, &mut |b| b[..copy].copy_from_slice(src))?;
            t.write(
                to,
                0,
                o.slot,
                HEADER_BYTES + h.len as usize,
                imm(h.chunk as usize, o.slot),
                o.slot as u64,
            )?;
            self.staged_free[o.to][o.slot] = false;
        }
        Ok(())
    }
}
