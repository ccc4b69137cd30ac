//! A frame's RoCEv2 datagram, held compactly while it crosses the fabric.
//!
//! The hosts send from small reused memory regions, so the payload of a
//! data packet is nearly always one byte repeated. A frame keeps the
//! datagram's first [`HEAD`] and last [`TAIL`] bytes (the transport headers,
//! and pad and ICRC) and, between them, just the repeated byte and how many
//! times it comes: about a tenth of a 1 KiB packet. The bytes handed to the
//! receiving engine are rebuilt exactly; a datagram whose middle is not one
//! repeated byte is kept whole. Holding a fabric's frames in flight this
//! way keeps them in cache: the cold payload bytes were most of what a
//! receive cost.

/// Bytes kept from the start: every RoCEv2 header chain a data packet
/// carries (BTH with RETH and immediate: 32; BTH with AtomicETH: 40) fits.
/// A longer one is kept whole, still exact. Small enough that a frame's
/// record and its compact datagram share 128 bytes (`sim::Slot`).
pub(crate) const HEAD: usize = 40;
/// Bytes kept from the end: pad and ICRC.
pub(crate) const TAIL: usize = 8;
const EDGE: usize = HEAD + TAIL;

/// One datagram, compact or whole.
pub(crate) struct Datagram {
    len: u32,
    /// The whole datagram when `len <= EDGE`; otherwise, when compact, the
    /// head then the tail.
    edge: [u8; EDGE],
    /// When compact (`len > EDGE` and `whole` empty): the byte repeated
    /// between the head and the tail.
    fill: u8,
    /// When compact: the middle carries nothing (zeros standing for payload
    /// its engines elide, `roce_proto::config::Payload`), and is not
    /// written out.
    elided: bool,
    /// The whole datagram when it is neither short nor compact (a buffer
    /// from the simulator's pool; empty otherwise).
    whole: Vec<u8>,
}

impl Datagram {
    /// An empty datagram (a PFC frame carries none).
    pub fn none() -> Datagram {
        Datagram { len: 0, edge: [0; EDGE], fill: 0, elided: false, whole: Vec::new() }
    }

    /// Keeps `bytes`, of which only the first `carried` carry anything (a
    /// `roce_proto::Transmit` of an engine that elides payload: zeros from
    /// there to the ICRC): compact without reading the middle when the
    /// head holds all that is carried, else as [`Datagram::store`].
    pub fn store_carried(bytes: &[u8], carried: usize, pool: &mut Vec<Vec<u8>>) -> Datagram {
        let len = bytes.len();
        if carried > HEAD || len <= EDGE {
            return Datagram::store(bytes, pool);
        }
        debug_assert!(bytes[HEAD..len - TAIL].iter().all(|&b| b == 0), "elided bytes are zeros");
        let mut d = Datagram { len: len as u32, edge: [0; EDGE], fill: 0, elided: true, whole: Vec::new() };
        d.edge[..HEAD].copy_from_slice(&bytes[..HEAD]);
        d.edge[HEAD..].copy_from_slice(&bytes[len - TAIL..]);
        d
    }

    /// Keeps `bytes`, taking a buffer from `pool` only if they must be
    /// kept whole.
    pub fn store(bytes: &[u8], pool: &mut Vec<Vec<u8>>) -> Datagram {
        let len = bytes.len();
        let mut d = Datagram { len: len as u32, edge: [0; EDGE], fill: 0, elided: false, whole: Vec::new() };
        if len <= EDGE {
            d.edge[..len].copy_from_slice(bytes);
        } else if let Some(fill) = one_byte(&bytes[HEAD..len - TAIL]) {
            d.edge[..HEAD].copy_from_slice(&bytes[..HEAD]);
            d.edge[HEAD..].copy_from_slice(&bytes[len - TAIL..]);
            d.fill = fill;
        } else {
            let mut whole = pool.pop().unwrap_or_default();
            whole.clear();
            whole.extend_from_slice(bytes);
            d.whole = whole;
        }
        d
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    fn compact(&self) -> bool {
        self.len() > EDGE && self.whole.is_empty()
    }

    /// Writes the datagram to the start of `out` (at least `len()` bytes).
    pub fn write_to(&self, out: &mut [u8]) {
        self.write(out, true);
    }

    /// [`Datagram::write_to`] for the receiving engine: an elided middle
    /// ([`Datagram::store_carried`]), which that engine does not read, is
    /// left as `out` held.
    pub fn write_carried_to(&self, out: &mut [u8]) {
        self.write(out, !self.elided);
    }

    fn write(&self, out: &mut [u8], middle: bool) {
        let n = self.len();
        if !self.whole.is_empty() {
            out[..n].copy_from_slice(&self.whole);
        } else if n <= EDGE {
            out[..n].copy_from_slice(&self.edge[..n]);
        } else {
            out[..HEAD].copy_from_slice(&self.edge[..HEAD]);
            if middle {
                out[HEAD..n - TAIL].fill(self.fill);
            }
            out[n - TAIL..n].copy_from_slice(&self.edge[HEAD..]);
        }
    }

    /// Inverts bit `bit` (numbered from the first byte's top bit), as a
    /// corrupting link does; a compact datagram hit in its repeated middle
    /// is kept whole from then on.
    pub fn flip_bit(&mut self, bit: usize, pool: &mut Vec<Vec<u8>>) {
        let (at, mask) = (bit / 8, 0x80u8 >> (bit % 8));
        let len = self.len();
        if at >= len {
            return;
        }
        if self.compact() {
            if at < HEAD {
                self.edge[at] ^= mask;
                return;
            }
            if at >= len - TAIL {
                self.edge[HEAD + at - (len - TAIL)] ^= mask;
                return;
            }
            let mut whole = pool.pop().unwrap_or_default();
            whole.clear();
            whole.resize(len, 0);
            self.write_to(&mut whole);
            self.whole = whole;
            self.elided = false;
        }
        if self.whole.is_empty() {
            self.edge[at] ^= mask;
        } else {
            self.whole[at] ^= mask;
        }
    }

    /// A copy (a duplicating link's second copy).
    pub fn copy(&self, pool: &mut Vec<Vec<u8>>) -> Datagram {
        let mut whole = Vec::new();
        if !self.whole.is_empty() {
            whole = pool.pop().unwrap_or_default();
            whole.clear();
            whole.extend_from_slice(&self.whole);
        }
        Datagram { len: self.len, edge: self.edge, fill: self.fill, elided: self.elided, whole }
    }

    /// Gives a whole datagram's buffer back to `pool`.
    pub fn recycle(self, pool: &mut Vec<Vec<u8>>) {
        if self.whole.capacity() > 0 {
            pool.push(self.whole);
        }
    }
}

/// `Some(b)` if every byte of `s` is `b` (and `s` is not empty).
fn one_byte(s: &[u8]) -> Option<u8> {
    let &b = s.first()?;
    let word = u64::from_ne_bytes([b; 8]);
    // 64-byte blocks folded without a branch per word (the compiler
    // vectorises the fold; a payload of one byte is read in full anyway)
    let mut blocks = s.chunks_exact(64);
    let same = blocks.all(|blk| {
        blk.chunks_exact(8).fold(0, |d, c| d | (u64::from_ne_bytes(c.try_into().expect("8 bytes")) ^ word))
            == 0
    }) && blocks.remainder().iter().all(|&x| x == b);
    same.then_some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(bytes: &[u8]) -> Vec<u8> {
        let mut pool = Vec::new();
        let d = Datagram::store(bytes, &mut pool);
        let mut out = vec![0xee; bytes.len() + 3];
        d.write_to(&mut out);
        assert_eq!(d.len(), bytes.len());
        out.truncate(bytes.len());
        out
    }

    fn packet(len: usize, fill: u8) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
        if len > EDGE {
            p[HEAD..len - TAIL].fill(fill);
        }
        p
    }

    #[test]
    fn every_shape_comes_back_byte_for_byte() {
        for len in [0, 1, 20, EDGE - 1, EDGE, EDGE + 1, EDGE + 7, EDGE + 8, 1024 + 36, 4096 + 40] {
            for fill in [0u8, 0xa5] {
                let p = packet(len, fill);
                assert_eq!(round_trip(&p), p, "len {len} fill {fill:#x}");
            }
        }
    }

    #[test]
    fn a_repeated_middle_is_kept_compact_and_anything_else_whole() {
        let mut pool = Vec::new();
        let p = packet(1060, 0);
        let d = Datagram::store(&p, &mut pool);
        assert!(d.compact() && d.whole.is_empty());
        for at in [HEAD, 500, 1060 - TAIL - 1] {
            let mut q = p.clone();
            q[at] = 1;
            let d = Datagram::store(&q, &mut pool);
            assert!(!d.compact(), "byte {at} differs");
            let mut out = vec![0; q.len()];
            d.write_to(&mut out);
            assert_eq!(out, q);
        }
    }

    #[test]
    fn an_elided_middle_is_neither_read_nor_written() {
        let mut pool = Vec::new();
        let p = packet(4096 + 40, 0);
        // carried within the head: compact, the middle not written out
        let d = Datagram::store_carried(&p, HEAD, &mut pool);
        assert!(d.compact() && d.elided);
        let mut out = vec![0xee; p.len()];
        d.write_carried_to(&mut out);
        assert_eq!(out[..HEAD], p[..HEAD]);
        assert_eq!(out[p.len() - TAIL..], p[p.len() - TAIL..]);
        assert!(out[HEAD..p.len() - TAIL].iter().all(|&b| b == 0xee));
        // all of it, for anyone else (the hooks)
        d.write_to(&mut out);
        assert_eq!(out, p);
        // a flipped bit in it makes it whole, zeros in the middle
        let mut f = Datagram::store_carried(&p, HEAD, &mut pool);
        f.flip_bit(8 * 600, &mut pool);
        let mut want = p.clone();
        want[600] ^= 0x80;
        let mut out = vec![0xee; p.len()];
        f.write_to(&mut out);
        assert_eq!(out, want);
        // carried past the head: kept as `store` keeps it, every byte
        let mut q = p.clone();
        q[HEAD + 10] = 7;
        let d = Datagram::store_carried(&q, HEAD + 64, &mut pool);
        assert!(!d.elided);
        let mut out = vec![0xee; q.len()];
        d.write_carried_to(&mut out);
        assert_eq!(out, q);
    }

    #[test]
    fn a_flipped_bit_lands_where_it_would_in_the_bytes() {
        let p = packet(1060, 0x33);
        for bit in [
            0,
            7,
            8 * HEAD - 1,
            8 * HEAD,
            8 * 600 + 3,
            8 * (1060 - TAIL) - 1,
            8 * (1060 - TAIL),
            8 * 1060 - 1,
        ] {
            let mut pool = Vec::new();
            let mut d = Datagram::store(&p, &mut pool);
            d.flip_bit(bit, &mut pool);
            let mut want = p.clone();
            want[bit / 8] ^= 0x80 >> (bit % 8);
            let mut out = vec![0; p.len()];
            d.write_to(&mut out);
            assert_eq!(out, want, "bit {bit}");
            // A copy carries the flip; recycling returns a whole buffer.
            let c = d.copy(&mut pool);
            let mut out2 = vec![0; p.len()];
            c.write_to(&mut out2);
            assert_eq!(out2, want);
            c.recycle(&mut pool);
            d.recycle(&mut pool);
        }
        // Short datagrams flip in place too.
        let mut pool = Vec::new();
        let mut d = Datagram::store(&[0u8; 20], &mut pool);
        d.flip_bit(9, &mut pool);
        let mut out = [0u8; 20];
        d.write_to(&mut out);
        assert_eq!(out[1], 0x40);
    }
}
