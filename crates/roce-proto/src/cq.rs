//! Completion queues. A CQ holds at most `depth` completions; one more is an
//! overflow, which puts the CQ in error and raises `IBV_EVENT_CQ_ERR` (IBTA
//! vol. 1 §11.4.2.1, C11-12): the completion is lost and the CQ unusable.

use std::collections::VecDeque;

use crate::verbs::Wc;

#[derive(Debug)]
pub(crate) struct Cq {
    pub depth: usize,
    pub entries: VecDeque<Wc>,
    pub overflowed: bool,
    /// Number of QPs using this CQ (destroy is refused while non-zero).
    pub users: usize,
}

impl Cq {
    pub fn new(depth: usize) -> Cq {
        Cq { depth, entries: VecDeque::new(), overflowed: false, users: 0 }
    }

    /// Adds a completion; returns false (and enters the error state) if full.
    pub fn push(&mut self, wc: Wc) -> bool {
        if self.overflowed {
            return false;
        }
        if self.entries.len() >= self.depth {
            self.overflowed = true;
            return false;
        }
        self.entries.push_back(wc);
        true
    }
}
