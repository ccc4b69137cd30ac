//! Authenticated encryption of a connected QP's packets (optional, per QP),
//! in the spirit of the PSP and IPsec offloads RoCE NICs ship. RoCEv2 itself
//! has no confidentiality and no integrity against anyone who can compute
//! the ICRC (everyone): see `docs/security.md`.
//!
//! # Wire format ("RPP", RoCE payload protection, version 1)
//!
//! A protected packet keeps its BTH and extension headers in clear (switches
//! and the receiver's dispatch need them) and carries, between the headers
//! and the ICRC:
//!
//! ```text
//! | BTH | ext headers | SEQ (8, big endian) | ciphertext of payload+pad | TAG (16) | ICRC |
//! ```
//!
//! * AES-128-GCM, one key and one 4-byte salt per QP and direction.
//! * Nonce = salt (4) || SEQ (8). SEQ counts the packets the QP has sent in
//!   that direction, from 1, retransmissions included, and never wraps: a
//!   nonce is never used twice under a key, even when a retransmitted
//!   payload differs (the application changed the buffer).
//! * Associated data = the headers, with BTH byte 4 (FECN, BECN, reserved;
//!   the byte the ICRC masks too) zeroed, then SEQ. The opcode, QPN, PSN,
//!   AckReq, P_Key, pad count and every extension header (RETH, AETH, ...)
//!   are authenticated; an ACK or NAK (no payload) carries SEQ and TAG too,
//!   so a forged ACK/NAK fails to authenticate.
//! * Replay: the receiver keeps the highest SEQ it accepted and a window of
//!   the 128 below it; a SEQ seen before or older than the window is dropped
//!   (`crypto_replay_dropped`). The transport's own PSN checks still apply
//!   after decryption.
//! * The BTH pad count is the plaintext's; the IP packet is 24 bytes longer
//!   than the unprotected one.
//! * CNPs are not protected (Annex A17.9.3 fixes their format).
//!
//! The keys come from out of band (the perf tools derive them from an
//! X25519 agreement in the exchange, see `roce::crypto`); the engine only
//! seals and opens.

use core::fmt;

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_128_GCM};

/// Bytes of the sequence number.
pub const SEQ_LEN: usize = 8;
/// Bytes of the GCM tag.
pub const TAG_LEN: usize = 16;
/// Bytes a protected packet adds.
pub const OVERHEAD: usize = SEQ_LEN + TAG_LEN;
/// Bytes of a key (AES-128).
pub const KEY_LEN: usize = 16;
/// Bytes of a nonce salt.
pub const SALT_LEN: usize = 4;
/// Sequence numbers below the highest accepted one that may still come.
const REPLAY_WINDOW: u64 = 128;
/// Offset of the BTH byte left out of the associated data.
const BTH_MUTABLE_BYTE: usize = 4;
/// Longest header run (BTH plus the longest set of extension headers).
const MAX_AAD: usize = 96;

/// The key of one direction of a QP.
#[derive(Clone, PartialEq, Eq)]
pub struct DirectionKey {
    pub key: [u8; KEY_LEN],
    pub salt: [u8; SALT_LEN],
}

impl fmt::Debug for DirectionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DirectionKey { .. }")
    }
}

/// The keys of a QP: what it sends with, what it receives with (the
/// peer's `tx` is this side's `rx`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpKeys {
    pub tx: DirectionKey,
    pub rx: DirectionKey,
}

/// Why a protected packet was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// More pad than ciphertext, or too long to open.
    Malformed,
    /// SEQ seen before, or older than the window.
    Replay,
    /// The tag does not match (wrong key, changed bytes), or there is no
    /// room for SEQ and TAG (sent without protection).
    Auth,
}

/// The sealing and opening state of one QP.
pub(crate) struct QpCrypto {
    tx: LessSafeKey,
    tx_salt: [u8; SALT_LEN],
    tx_seq: u64,
    rx: LessSafeKey,
    rx_salt: [u8; SALT_LEN],
    /// Highest SEQ accepted (0: none yet).
    rx_top: u64,
    /// Bit i: SEQ `rx_top - i` was accepted.
    rx_seen: u128,
}

impl fmt::Debug for QpCrypto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QpCrypto").field("tx_seq", &self.tx_seq).field("rx_top", &self.rx_top).finish()
    }
}

fn key(k: &DirectionKey) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &k.key).expect("a 16-byte AES-128 key"))
}

fn nonce(salt: &[u8; SALT_LEN], seq: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[..SALT_LEN].copy_from_slice(salt);
    n[SALT_LEN..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// The associated data: headers with the mutable BTH byte zeroed, and SEQ.
fn aad(headers: &[u8], seq: &[u8]) -> Option<([u8; MAX_AAD + SEQ_LEN], usize)> {
    let n = headers.len();
    if n > MAX_AAD || n <= BTH_MUTABLE_BYTE {
        return None;
    }
    let mut a = [0u8; MAX_AAD + SEQ_LEN];
    a[..n].copy_from_slice(headers);
    a[BTH_MUTABLE_BYTE] = 0;
    a[n..n + SEQ_LEN].copy_from_slice(seq);
    Some((a, n + SEQ_LEN))
}

impl QpCrypto {
    pub fn new(keys: &QpKeys) -> QpCrypto {
        QpCrypto {
            tx: key(&keys.tx),
            tx_salt: keys.tx.salt,
            tx_seq: 0,
            rx: key(&keys.rx),
            rx_salt: keys.rx.salt,
            rx_top: 0,
            rx_seen: 0,
        }
    }

    /// Seals the datagram `buf[..len]` in place (headers of `hdr_len`
    /// bytes, then payload and pad, then the ICRC's 4 bytes, not yet
    /// written). Returns the new length, or `None` if `buf` has no room or
    /// the sequence numbers are spent.
    pub fn seal(&mut self, buf: &mut [u8], len: usize, hdr_len: usize) -> Option<usize> {
        let icrc = roce_wire::icrc::ICRC_LEN;
        let plain = len.checked_sub(hdr_len + icrc)?;
        let new_len = len + OVERHEAD;
        if new_len > buf.len() {
            return None;
        }
        let seq = self.tx_seq.checked_add(1)?;
        self.tx_seq = seq;
        let start = hdr_len + SEQ_LEN;
        buf.copy_within(hdr_len..hdr_len + plain, start);
        buf[hdr_len..start].copy_from_slice(&seq.to_be_bytes());
        let (a, alen) = aad(&buf[..hdr_len], &seq.to_be_bytes())?;
        let tag = self
            .tx
            .seal_in_place_separate_tag(
                nonce(&self.tx_salt, seq),
                Aad::from(&a[..alen]),
                &mut buf[start..start + plain],
            )
            .ok()?;
        buf[start + plain..start + plain + TAG_LEN].copy_from_slice(tag.as_ref());
        Some(new_len)
    }

    /// Opens the protected datagram `bytes` (outer ICRC already checked)
    /// into `out`: the plain datagram, its ICRC bytes zero. Returns its
    /// length. The replay window moves only for a packet that authenticates.
    pub fn open(&mut self, bytes: &[u8], hdr_len: usize, out: &mut [u8]) -> Result<usize, OpenError> {
        let icrc = roce_wire::icrc::ICRC_LEN;
        let body = bytes.len().checked_sub(hdr_len + icrc).ok_or(OpenError::Malformed)?;
        let plain = body.checked_sub(OVERHEAD).ok_or(OpenError::Auth)?;
        let pad = usize::from((bytes[1] >> 4) & 3);
        if plain < pad || hdr_len + plain + icrc > out.len() {
            return Err(OpenError::Malformed);
        }
        let seq_bytes = &bytes[hdr_len..hdr_len + SEQ_LEN];
        let seq = u64::from_be_bytes(seq_bytes.try_into().expect("SEQ_LEN bytes"));
        if !self.fresh(seq) {
            return Err(OpenError::Replay);
        }
        let (a, alen) = aad(&bytes[..hdr_len], seq_bytes).ok_or(OpenError::Malformed)?;
        let ct = hdr_len + SEQ_LEN;
        let tag =
            Tag::try_from(&bytes[ct + plain..ct + plain + TAG_LEN]).map_err(|_| OpenError::Malformed)?;
        out[..hdr_len].copy_from_slice(&bytes[..hdr_len]);
        out[hdr_len..hdr_len + plain].copy_from_slice(&bytes[ct..ct + plain]);
        self.rx
            .open_in_place_separate_tag(
                nonce(&self.rx_salt, seq),
                Aad::from(&a[..alen]),
                tag,
                &mut out[hdr_len..hdr_len + plain],
                0..,
            )
            .map_err(|_| OpenError::Auth)?;
        self.accept(seq);
        out[hdr_len + plain..hdr_len + plain + icrc].fill(0);
        Ok(hdr_len + plain + icrc)
    }

    /// Whether `seq` may be new: not 0, not older than the window, not seen.
    fn fresh(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.rx_top {
            return true;
        }
        let back = self.rx_top - seq;
        back < REPLAY_WINDOW && self.rx_seen & (1u128 << back) == 0
    }

    fn accept(&mut self, seq: u64) {
        if seq > self.rx_top {
            let shift = seq - self.rx_top;
            self.rx_seen = if shift >= REPLAY_WINDOW { 0 } else { self.rx_seen << shift };
            self.rx_seen |= 1;
            self.rx_top = seq;
        } else {
            self.rx_seen |= 1u128 << (self.rx_top - seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(a: u8, b: u8) -> QpKeys {
        QpKeys {
            tx: DirectionKey { key: [a; KEY_LEN], salt: [a; SALT_LEN] },
            rx: DirectionKey { key: [b; KEY_LEN], salt: [b; SALT_LEN] },
        }
    }

    /// A WRITE Only-shaped datagram: 12-byte BTH, 16-byte RETH, payload
    /// with 2 bytes of pad, ICRC slot.
    fn datagram(payload: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; 28];
        d[0] = 0x0a;
        d[1] = 2 << 4;
        d[4] = 0;
        d[7] = 0x12;
        d.extend_from_slice(payload);
        d.extend_from_slice(&[0, 0]);
        d.extend_from_slice(&[0; 4]);
        d
    }

    #[test]
    fn seal_then_open_round_trips_and_hides_the_payload() {
        let (mut a, mut b) = (QpCrypto::new(&keys(1, 2)), QpCrypto::new(&keys(2, 1)));
        let d = datagram(b"attack at dawn, 16B.");
        let mut buf = d.clone();
        buf.resize(d.len() + OVERHEAD + 64, 0);
        let n = a.seal(&mut buf, d.len(), 28).unwrap();
        assert_eq!(n, d.len() + OVERHEAD);
        assert!(!buf[..n].windows(6).any(|w| w == b"attack"), "payload left in clear");
        assert_eq!(&buf[..28], &d[..28], "headers stay in clear");
        let mut out = vec![0u8; 4096];
        let m = b.open(&buf[..n], 28, &mut out).unwrap();
        assert_eq!(&out[..m], &d[..]);
        // The same packet again is a replay.
        assert_eq!(b.open(&buf[..n], 28, &mut out), Err(OpenError::Replay));
    }

    #[test]
    fn any_changed_bit_but_the_mutable_byte_fails_to_authenticate() {
        let mut a = QpCrypto::new(&keys(1, 2));
        let d = datagram(&[7u8; 30]);
        let mut buf = d.clone();
        buf.resize(d.len() + OVERHEAD, 0);
        let n = a.seal(&mut buf, d.len(), 28).unwrap();
        let mut out = vec![0u8; 4096];
        for byte in 0..n - 4 {
            for bit in [0, 5] {
                let mut b = QpCrypto::new(&keys(2, 1));
                let mut bad = buf[..n].to_vec();
                bad[byte] ^= 1 << bit;
                let r = b.open(&bad, 28, &mut out);
                if byte == BTH_MUTABLE_BYTE {
                    assert!(r.is_ok(), "FECN/BECN/reserved may change on the way");
                } else {
                    assert!(r.is_err(), "byte {byte} bit {bit} changed and still opened");
                }
            }
        }
        // The other direction's key does not open it.
        assert_eq!(QpCrypto::new(&keys(1, 2)).open(&buf[..n], 28, &mut out), Err(OpenError::Auth));
    }

    #[test]
    fn replay_window_takes_reordering_and_refuses_repeats_and_the_too_old() {
        let mut b = QpCrypto::new(&keys(2, 1));
        for s in [5u64, 3, 4, 200, 100, 73] {
            assert!(b.fresh(s), "{s}");
            b.accept(s);
        }
        for s in [0u64, 3, 4, 5, 72, 100, 200] {
            assert!(!b.fresh(s), "{s} taken twice or too old");
        }
        assert!(b.fresh(199) && b.fresh(201) && b.fresh(u64::MAX));
    }

    #[test]
    fn sequence_numbers_never_wrap() {
        let mut a = QpCrypto::new(&keys(1, 2));
        a.tx_seq = u64::MAX;
        let d = datagram(&[1; 4]);
        let mut buf = d.clone();
        buf.resize(d.len() + OVERHEAD, 0);
        assert_eq!(a.seal(&mut buf, d.len(), 28), None);
    }
}
