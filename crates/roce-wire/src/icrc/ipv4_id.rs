//! The IPv4 Identification field inside the ICRC.
//!
//! Annex A17.3.3 leaves the IPv4 Identification unmasked, so the ICRC of a
//! RoCEv2/IPv4 packet depends on a field that the sending kernel may pick
//! (Linux numbers the segments of a UDP GSO send 0, 1, 2, ...) and that a
//! receiver on an ordinary UDP socket never sees. CRC-32 is affine over
//! GF(2): for two packets of equal length that differ only in the ID,
//!
//! ```text
//! icrc(id) = icrc(0) ^ L_t(id)      L_t(id) = (id(x) * x^32) * x^(8t)  mod P
//! ```
//!
//! where `id(x)` is the field's 16 bits as a polynomial and `t` the number of
//! bytes that follow the field in the CRC's input. `L_t` is linear and
//! injective (P is coprime to x and `id(x) * x^32` has degree < 48 with no
//! factor P), so:
//!
//! * a sender that knows the ID the kernel will write fixes an ICRC computed
//!   for ID 0 with one `L_t` ([`Ipv4IdIcrc::delta`]);
//! * a receiver that cannot see the ID checks the ICRC *for some ID* and
//!   learns which one ([`Ipv4IdIcrc::solve`]): the difference between the
//!   ICRC on the wire and the one computed for ID 0 must lie in the image of
//!   `L_t`, a 16-dimensional subspace of the 32-bit values. That leaves a
//!   corrupted packet a 2^-16 chance (instead of 2^-32) to pass, and none of
//!   the corruption of the ID itself is seen (the IPv4 header checksum,
//!   which the kernel verifies, covers it).
//!
//! Polynomials are held as CRC-32 registers are (reflected: the coefficient
//! of x^0 in bit 31), so register values and ICRCs mix without conversion.

/// The reflected CRC-32 polynomial (x^32 omitted).
const POLY: u32 = 0xedb8_8320;
/// x^0 in the reflected representation.
const ONE: u32 = 0x8000_0000;
/// x^-1 mod P: P = x^32 + G with G(0) = 1, so x * (P - 1) / x = P - 1 = 1.
/// (P - 1) / x is G's other terms moved one power down, plus x^31.
const X_INV: u32 = ((POLY & 0x7fff_ffff) << 1) | 1;

/// Bytes of the ICRC's input from the end of the ID (IPv4 bytes 4..6) to
/// the end of the IPv4 (no options) and UDP headers.
const AFTER_ID_IN_HEADERS: usize = 20 - 6 + 8;

/// `a * b mod P`, both reflected.
const fn mul(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    let mut bit = ONE;
    while bit != 0 {
        if a & bit != 0 {
            p ^= b;
        }
        bit >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `base^(2^k)` for k = 0..32.
const fn squares(base: u32) -> [u32; 32] {
    let mut t = [0u32; 32];
    t[0] = base;
    let mut k = 1;
    while k < 32 {
        t[k] = mul(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
}

/// x^(2^k) and x^-(2^k).
const X_POW2: [u32; 32] = squares(ONE >> 1);
const X_INV_POW2: [u32; 32] = squares(X_INV);

/// `x^n` (or `x^-n`) from the table of squares.
fn pow(table: &[u32; 32], mut n: u64) -> u32 {
    let mut r = ONE;
    let mut k = 0;
    while n != 0 {
        if n & 1 != 0 {
            r = mul(r, table[k % 32]);
        }
        n >>= 1;
        k += 1;
    }
    r
}

/// The byte-wise CRC-32 table: `T[i]` is the register after feeding byte
/// `i` into a zero register (without the initial and final inversion).
const T: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// `T_TOP[b]`: the index whose table entry has top byte `b` (the top bytes
/// of `T` are a permutation of 0..=255, as for every CRC-32).
const T_TOP: [u8; 256] = {
    let mut inv = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        inv[(T[i] >> 24) as usize] = i as u8;
        i += 1;
    }
    inv
};

/// The register after feeding the two bytes of `id` (big-endian, as on the
/// wire) into a zero register: `id(x) * x^32 mod P`.
fn feed(id: u16) -> u32 {
    let [hi, lo] = id.to_be_bytes();
    let r = T[usize::from(hi)];
    (r >> 8) ^ T[((r ^ u32::from(lo)) & 0xff) as usize]
}

/// Inverse of [`feed`]: the ID whose two bytes give register `r`, if any.
fn unfeed(r: u32) -> Option<u16> {
    // r = (T[hi] >> 8) ^ T[k] with k = (T[hi] ^ lo) & 0xff; the top byte
    // of (T[hi] >> 8) is zero, so r's top byte names k.
    let k = T_TOP[(r >> 24) as usize];
    let first = r ^ T[usize::from(k)];
    // first = T[hi] >> 8: its top byte must be zero, its next names hi.
    if first >> 24 != 0 {
        return None;
    }
    let hi = T_TOP[((first >> 16) & 0xff) as usize];
    if T[usize::from(hi)] >> 8 != first {
        return None;
    }
    let lo = k ^ (T[usize::from(hi)] & 0xff) as u8;
    Some(u16::from_be_bytes([hi, lo]))
}

/// Tables of a linear map on `4 * N` bits, a nibble at a time: the map of
/// `v` is the XOR of `t[k][(v >> 4k) & 15]`.
fn nibble_tables<const N: usize>(f: impl Fn(u32) -> u32) -> [[u32; 16]; N] {
    let mut t = [[0u32; 16]; N];
    for (k, row) in t.iter_mut().enumerate() {
        let bits: [u32; 4] = std::array::from_fn(|j| f(1 << (4 * k + j)));
        for (v, e) in row.iter_mut().enumerate() {
            *e = (0..4).filter(|j| v >> j & 1 == 1).fold(0, |acc, j| acc ^ bits[j]);
        }
    }
    t
}

fn apply<const N: usize>(t: &[[u32; 16]; N], v: u32) -> u32 {
    t.iter().enumerate().fold(0, |acc, (k, row)| acc ^ row[((v >> (4 * k)) & 15) as usize])
}

/// How the ICRC of RoCEv2/IPv4 packets of one length (an IPv4 header
/// without options) depends on the IPv4 Identification.
///
/// Making one costs about a microsecond (powers of x and a few dozen
/// modular multiplications into nibble tables); `delta` and `solve` then
/// cost a dozen table lookups. Keep one per packet length in use
/// ([`Ipv4IdCache`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4IdIcrc {
    transport_len: usize,
    /// `delta` as a linear map of the 16-bit ID difference.
    delta: [[u32; 16]; 4],
    /// Multiplication by x^-(8t), the shift of the ID's effect undone.
    unshift: [[u32; 16]; 8],
}

impl Ipv4IdIcrc {
    /// For packets whose transport part (BTH through pad, without the
    /// ICRC) is `transport_len` bytes.
    pub fn new(transport_len: usize) -> Ipv4IdIcrc {
        let bits = 8 * (AFTER_ID_IN_HEADERS + transport_len) as u64;
        let (shift, unshift) = (pow(&X_POW2, bits), pow(&X_INV_POW2, bits));
        Ipv4IdIcrc {
            transport_len,
            delta: nibble_tables(|id| mul(feed(id as u16), shift)),
            unshift: nibble_tables(|v| mul(v, unshift)),
        }
    }

    /// The transport length this was made for.
    pub fn transport_len(&self) -> usize {
        self.transport_len
    }

    /// What to XOR into an ICRC when the ID changes by `id_xor` (old ID
    /// XOR new ID): `icrc(b) = icrc(a) ^ delta(a ^ b)`.
    pub fn delta(&self, id_xor: u16) -> u32 {
        apply(&self.delta, u32::from(id_xor))
    }

    /// The ID for which `wire` is the right ICRC, given `icrc0`, the ICRC
    /// computed with ID 0; `None` if there is none (the packet is corrupt).
    pub fn solve(&self, icrc0: u32, wire: u32) -> Option<u16> {
        unfeed(apply(&self.unshift, icrc0 ^ wire))
    }
}

/// A few [`Ipv4IdIcrc`]s by transport length, so a receiver pays for
/// powers of x once per packet length in use (a transfer has two or
/// three: full segments, its first or last segment, ACKs). Any slot holds
/// any length, the oldest replaced: lengths in use together often agree
/// modulo a power of two (a WRITE's first packet, 4,124 bytes with its
/// RETH, and its middle ones, 4,108; a 16-byte response SEND, 28), and a
/// slot chosen by the length would make them evict each other once per
/// message. No allocation.
#[derive(Debug, Clone, Default)]
pub struct Ipv4IdCache {
    slots: [Option<Ipv4IdIcrc>; 8],
    /// The slot the next new length takes.
    next: usize,
}

impl Ipv4IdCache {
    /// The solver for `transport_len`, made on first use.
    pub fn get(&mut self, transport_len: usize) -> &Ipv4IdIcrc {
        let at = match self
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.transport_len == transport_len))
        {
            Some(i) => i,
            None => {
                let i = self.next;
                self.next = (i + 1) % self.slots.len();
                self.slots[i] = Some(Ipv4IdIcrc::new(transport_len));
                i
            }
        };
        self.slots[at].as_ref().expect("found or filled above")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc::{compute, NetHeader};

    /// An IPv4 + UDP + transport packet (without ICRC) of `transport` bytes.
    fn packet(id: u16, transport: usize, seed: u8) -> Vec<u8> {
        let mut p = vec![0u8; 28 + transport];
        p[0] = 0x45;
        let total = (p.len() + 4) as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[22..24].copy_from_slice(&4791u16.to_be_bytes());
        p[24..26].copy_from_slice(&((transport + 12) as u16).to_be_bytes());
        for (i, b) in p[28..].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
        p
    }

    #[test]
    fn cache_gives_the_solver_of_each_length() {
        let mut c = Ipv4IdCache::default();
        for len in [12, 20, 1036, 12, 4108, 1036 + 8 * 100] {
            assert_eq!(*c.get(len), Ipv4IdIcrc::new(len));
        }
    }

    /// A WRITE's first and middle packets and a 16-byte SEND agree
    /// modulo 8 and 16: used in turn, each is made once.
    #[test]
    fn cache_keeps_lengths_that_agree_modulo_a_power_of_two() {
        let mut c = Ipv4IdCache::default();
        for _ in 0..4 {
            for len in [4124, 4108, 4108, 28] {
                assert_eq!(c.get(len).transport_len(), len);
            }
        }
        let held = |c: &Ipv4IdCache| c.slots.iter().flatten().count();
        assert_eq!((held(&c), c.next), (3, 3), "a length was made twice");
        // Past eight lengths the oldest goes first.
        for len in 100..106 {
            c.get(len);
        }
        assert_eq!(held(&c), 8);
        assert!(c.slots.iter().flatten().all(|s| s.transport_len() != 4124));
        assert!(c.slots.iter().flatten().any(|s| s.transport_len() == 28));
    }

    #[test]
    fn inverse_of_x() {
        assert_eq!(mul(ONE >> 1, X_INV), ONE);
        assert_eq!(mul(X_POW2[20], X_INV_POW2[20]), ONE);
    }

    #[test]
    fn feed_matches_the_table_and_unfeeds() {
        for id in [0u16, 1, 2, 0x00ff, 0x0100, 0xad9c, 0xffff] {
            assert_eq!(unfeed(feed(id)), Some(id));
        }
        for id in 0..=u16::MAX {
            assert_eq!(unfeed(feed(id)), Some(id));
        }
    }

    #[test]
    fn delta_and_solve_against_full_computation() {
        for transport in [12, 16, 28, 60, 1036, 4108, 9000] {
            let lin = Ipv4IdIcrc::new(transport);
            let c0 = compute(&packet(0, transport, 7), NetHeader::Ipv4);
            for id in [1u16, 2, 3, 63, 44308, 0xffff] {
                let c = compute(&packet(id, transport, 7), NetHeader::Ipv4);
                assert_eq!(c0 ^ lin.delta(id), c, "delta, len {transport} id {id}");
                assert_eq!(lin.solve(c0, c), Some(id), "solve, len {transport} id {id}");
                let ca = compute(&packet(id ^ 0x1234, transport, 7), NetHeader::Ipv4);
                assert_eq!(ca ^ lin.delta(0x1234), c, "between two non-zero IDs");
            }
            assert_eq!(lin.solve(c0, c0), Some(0));
        }
    }

    /// Corrupting the packet anywhere else is caught except with the
    /// residual probability 2^-16: count single-bit and byte errors over a
    /// 1 KiB packet (every position) and random 32-bit values.
    #[test]
    fn detection_strength() {
        let transport = 1036;
        let lin = Ipv4IdIcrc::new(transport);
        let good = packet(4242, transport, 3);
        let wire = compute(&good, NetHeader::Ipv4);
        let mut base = good.clone();
        base[4..6].copy_from_slice(&[0, 0]);
        let mut missed = 0;
        let mut tried = 0;
        for i in (0..good.len()).filter(|&i| !(4..6).contains(&i) && ![1, 8, 10, 11, 26, 27, 32].contains(&i))
        {
            for bit in 0..8 {
                let mut p = base.clone();
                p[i] ^= 1 << bit;
                tried += 1;
                missed += usize::from(lin.solve(compute(&p, NetHeader::Ipv4), wire).is_some());
            }
        }
        assert_eq!(missed, 0, "single-bit errors passing, of {tried}");
        // Random ICRC values: about 2^-16 of them name some ID.
        let c0 = compute(&base, NetHeader::Ipv4);
        let mut x: u32 = 0x1234_5678;
        let mut hits = 0;
        for _ in 0..1 << 20 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            hits += usize::from(lin.solve(c0, x).is_some());
        }
        assert!((4..=40).contains(&hits), "{hits} of 2^20 random ICRCs accepted (expect ~16)");
    }
}
