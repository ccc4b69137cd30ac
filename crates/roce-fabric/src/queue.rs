//! The event queue: a radix heap (Ahuja, Mehlhorn, Orlin & Tarjan), a
//! monotone priority queue. A discrete-event simulator never schedules
//! into the past, so keys only grow; pushes and pops then cost O(1)
//! amortised instead of a binary heap's O(log n) cache misses.
//!
//! Keys are (time, sequence number), unique, so the order of events at
//! the same time is the order they were scheduled in.

/// Events of type `T` keyed by (time, sequence).
pub struct EventQueue<T> {
    /// Events at time `last`, in schedule order.
    now: std::collections::VecDeque<(u64, T)>,
    /// `buckets[i]` (i >= 1) holds events whose time's highest bit
    /// differing from `last` is bit `i - 1`, as (sequence, item).
    buckets: Vec<Vec<(u64, u64, T)>>,
    /// Bit i set: `buckets[i]` is not empty.
    nonempty: u128,
    last: u64,
    len: usize,
    seq: u64,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            now: std::collections::VecDeque::new(),
            buckets: (0..=64).map(|_| Vec::new()).collect(),
            nonempty: 0,
            last: 0,
            len: 0,
            seq: 0,
        }
    }
}

impl<T> EventQueue<T> {
    /// Schedules `item` at `time`. Times earlier than the last popped one
    /// are raised to it (the past cannot be scheduled).
    pub fn push(&mut self, time: u64, item: T) {
        self.seq += 1;
        self.len += 1;
        let time = time.max(self.last);
        if time == self.last {
            self.now.push_back((self.seq, item));
        } else {
            let b = 64 - (time ^ self.last).leading_zeros() as usize;
            self.buckets[b].push((time, self.seq, item));
            self.nonempty |= 1 << b;
        }
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(u64, T)> {
        if self.len == 0 {
            return None;
        }
        if self.now.is_empty() {
            let i = self.nonempty.trailing_zeros() as usize;
            let mut items = std::mem::take(&mut self.buckets[i]);
            self.nonempty &= !(1 << i);
            self.last = items.iter().map(|e| e.0).min().expect("non-empty");
            let mut now: Vec<(u64, T)> = Vec::new();
            for (t, seq, item) in items.drain(..) {
                if t == self.last {
                    now.push((seq, item));
                } else {
                    let b = 64 - (t ^ self.last).leading_zeros() as usize;
                    self.buckets[b].push((t, seq, item));
                    self.nonempty |= 1 << b;
                }
            }
            // Give the bucket its allocation back.
            self.buckets[i] = items;
            now.sort_unstable_by_key(|e| e.0);
            self.now.extend(now);
        }
        let (_, item) = self.now.pop_front().expect("events at `last`");
        self.len -= 1;
        Some((self.last, item))
    }
    #[cfg(test)]
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

    #[test]
    fn pops_in_time_then_schedule_order() {
        let mut q = EventQueue::default();
        let mut rng = 12345u64;
        let mut model = std::collections::BTreeMap::new();
        let mut now = 0u64;
        let mut seq = 0u64;
        for round in 0..20_000 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if rng >> 62 != 0 || q.is_empty() {
                let t = now + (rng >> 40) % 1000 * if round % 7 == 0 { 1_000_000 } else { 1 };
                seq += 1;
                q.push(t, seq);
                model.insert((t, seq), ());
            } else {
                let (t, s) = q.pop().unwrap();
                let (&(mt, ms), _) = model.iter().next().unwrap();
                assert_eq!((t, s), (mt, ms));
                model.remove(&(mt, ms));
                now = t;
            }
            assert_eq!(q.len(), model.len());
        }
    }
}
