//! The event queue: a radix heap (Ahuja, Mehlhorn, Orlin & Tarjan), a
//! monotone priority queue. A discrete-event simulator never schedules
//! into the past, so keys only grow; pushes and pops then cost O(1)
//! amortised instead of a binary heap's O(log n) cache misses.
//!
//! Keys are (time, sequence number), unique, so the order of events at
//! the same time is the order they were scheduled in.

/// Events of type `T` keyed by (time, sequence).
pub struct EventQueue<T: Copy> {
    /// Events at time `last`, in schedule order, from `now_pos` on.
    now: Vec<(u64, T)>,
    now_pos: usize,
    /// `buckets[i]` (i >= 1) holds events whose time's highest bit
    /// differing from `last` is bit `i - 1`, as (time, sequence, item).
    buckets: Vec<Vec<(u64, u64, T)>>,
    /// Bit i set: `buckets[i]` is not empty.
    nonempty: u128,
    /// The earliest time in the buckets, once [`EventQueue::peek_time`]
    /// looked (an earlier push lowers it; the refill that moves on to it
    /// takes it): a client's step peeks before and after each time, and
    /// would otherwise scan the smallest bucket each time.
    next: std::cell::Cell<Option<u64>>,
    last: u64,
    len: usize,
    seq: u64,
}

impl<T: Copy> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            now: Vec::new(),
            now_pos: 0,
            buckets: (0..=64).map(|_| Vec::new()).collect(),
            nonempty: 0,
            next: std::cell::Cell::new(None),
            last: 0,
            len: 0,
            seq: 0,
        }
    }
}

impl<T: Copy> EventQueue<T> {
    /// Schedules `item` at `time`. Times earlier than the last popped one
    /// are raised to it (the past cannot be scheduled).
    #[inline]
    pub fn push(&mut self, time: u64, item: T) {
        self.seq += 1;
        self.len += 1;
        if time <= self.last {
            // Later in sequence than everything already due now.
            self.now.push((self.seq, item));
        } else {
            let b = 64 - (time ^ self.last).leading_zeros() as usize;
            self.buckets[b].push((time, self.seq, item));
            self.nonempty |= 1 << b;
            if self.next.get().is_some_and(|m| time < m) {
                self.next.set(Some(time));
            }
        }
    }

    /// The earliest event and its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(u64, T)> {
        if self.now_pos == self.now.len() {
            if self.len == 0 {
                return None;
            }
            self.refill();
        }
        let (_, item) = self.now[self.now_pos];
        self.now_pos += 1;
        self.len -= 1;
        Some((self.last, item))
    }

    /// The time of the earliest event, without taking it: unlike a pop,
    /// it leaves the queue's notion of now where it was, so events may
    /// still be scheduled before the time it returns. It reads a whole
    /// bucket when the events due now are done (clients' steps, not the
    /// fabric's own loop, use it).
    pub fn peek_time(&self) -> Option<u64> {
        if self.now_pos < self.now.len() {
            return Some(self.last);
        }
        if self.len == 0 {
            return None;
        }
        if let Some(t) = self.next.get() {
            return Some(t);
        }
        let i = self.nonempty.trailing_zeros() as usize;
        let t = self.buckets[i].iter().map(|e| e.0).min();
        self.next.set(t);
        t
    }

    /// Moves on to the next time: the smallest bucket holds it; its
    /// events are spread over the lower buckets (each event moves down a
    /// bucket at most 64 times in all), those at the new time first.
    fn refill(&mut self) {
        self.now.clear();
        self.now_pos = 0;
        let i = self.nonempty.trailing_zeros() as usize;
        let mut items = std::mem::take(&mut self.buckets[i]);
        self.nonempty &= !(1 << i);
        // (the smallest bucket holds the earliest time)
        self.last = match self.next.take() {
            Some(t) => t,
            None => items.iter().map(|e| e.0).min().expect("a non-empty bucket"),
        };
        for &(t, seq, item) in &items {
            if t == self.last {
                self.now.push((seq, item));
            } else {
                let b = 64 - (t ^ self.last).leading_zeros() as usize;
                self.buckets[b].push((t, seq, item));
                self.nonempty |= 1 << b;
            }
        }
        items.clear();
        // Give the bucket its allocation back.
        self.buckets[i] = items;
        if self.now.len() > 1 {
            self.now.sort_unstable_by_key(|e| e.0);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Pops one event, checking it is the model's first and what
    /// `peek_time` announced; its time.
    fn pop_checked(q: &mut EventQueue<u64>, model: &mut BTreeSet<(u64, u64)>) -> Option<u64> {
        let peeked = q.peek_time();
        let got = q.pop();
        assert_eq!(peeked, got.map(|(t, _)| t));
        assert_eq!(got, model.pop_first());
        got.map(|(t, _)| t)
    }

    #[test]
    fn pops_in_time_then_schedule_order() {
        let mut q = EventQueue::default();
        let mut rng = 12345u64;
        let mut model = BTreeSet::new();
        let mut now = 0u64;
        let mut seq = 0u64;
        for round in 0..20_000 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if rng >> 62 != 0 || q.is_empty() {
                let t = now + (rng >> 40) % 1000 * if round % 7 == 0 { 1_000_000 } else { 1 };
                seq += 1;
                q.push(t, seq);
                model.insert((t, seq));
            } else {
                now = pop_checked(&mut q, &mut model).expect("not empty");
            }
            assert_eq!(q.len(), model.len());
        }
    }

    /// Times from the same picosecond to seconds ahead (every bucket), and
    /// some in the past (raised to now), against a sorted set; then the
    /// queue drained.
    #[test]
    fn every_distance_pops_in_order() {
        let mut q = EventQueue::default();
        let mut rng = 99u64;
        let mut model = BTreeSet::new();
        let (mut now, mut seq) = (0u64, 0u64);
        let scales = [0, 1, 700, 1 << 10, 300_000, 1 << 22, 5_000_000, 1 << 32];
        for _ in 0..300_000 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = rng >> 33;
            if r % 5 < 3 || q.is_empty() {
                let ahead = (r >> 8) % 4096 * scales[(r >> 3) as usize % scales.len()] / 1024;
                let t = if r % 11 == 0 { now.saturating_sub(ahead) } else { now + ahead };
                seq += 1;
                q.push(t, seq);
                model.insert((t.max(now), seq));
            } else {
                now = pop_checked(&mut q, &mut model).expect("not empty");
            }
            assert_eq!(q.len(), model.len());
        }
        while pop_checked(&mut q, &mut model).is_some() {}
        assert!(model.is_empty());
    }
}
