//! The event queue: a binary heap ordered by (time, sequence number). The
//! sequence number breaks ties in insertion order, so two events due at the
//! same nanosecond always run in the same order, run after run.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use roce_proto::{DatagramMeta, Instant};

use super::HostId;

/// Something that happens at a point in simulated time.
#[derive(Debug)]
pub enum Event {
    /// A datagram arrives at a host.
    Deliver { host: HostId, meta: DatagramMeta, bytes: Vec<u8> },
    /// A host's engine asked to be woken (`poll_timeout`).
    Timer { host: HostId },
    /// The application asked to be woken with this token.
    Wake { token: u64 },
}

struct Entry {
    time: Instant,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: the heap's maximum is the earliest event.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// Pending events, earliest first, ties in insertion order.
#[derive(Default)]
pub struct EventQueue {
    heap: BinaryHeap<Entry>,
    next_seq: u64,
}

impl EventQueue {
    pub fn push(&mut self, time: Instant, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { time, seq, event });
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.time)
    }

    /// Removes the earliest event if it is due at `time`.
    pub fn pop_due(&mut self, time: Instant) -> Option<Event> {
        if self.peek_time() == Some(time) {
            self.heap.pop().map(|e| e.event)
        } else {
            None
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_ties_in_insertion_order() {
        let mut q = EventQueue::default();
        q.push(Instant(5), Event::Wake { token: 1 });
        q.push(Instant(3), Event::Wake { token: 2 });
        q.push(Instant(5), Event::Wake { token: 3 });
        q.push(Instant(3), Event::Wake { token: 4 });
        let mut order = Vec::new();
        while let Some(t) = q.peek_time() {
            while let Some(Event::Wake { token }) = q.pop_due(t) {
                order.push((t.0, token));
            }
        }
        assert_eq!(order, [(3, 2), (3, 4), (5, 1), (5, 3)]);
    }
}
