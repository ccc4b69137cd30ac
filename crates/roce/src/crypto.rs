//! Keys for protected QPs (see `roce_proto::crypto` for the wire format),
//! agreed out of band: each end makes an ephemeral X25519 key pair, the two
//! public keys cross the out-of-band channel, and HKDF-SHA256 of the shared
//! secret (and an optional pre-shared key) gives every QP one AES-128-GCM
//! key and nonce salt per direction.
//!
//! Without a pre-shared key the agreement resists a passive observer of the
//! out-of-band channel, not an active one who replaces the public keys (as
//! any unauthenticated Diffie-Hellman); with one, both ends must know it.
//!
//! Derivation, for the QP pair (sender QPN s, receiver QPN r) in the
//! direction from the end that sent its public key first (the initiator,
//! `i`) or the other (`r`):
//!
//! ```text
//! prk  = HKDF-Extract(salt = "roce rpp v1", ikm = X25519(priv, peer_pub) || psk)
//! okm  = HKDF-Expand(prk, "roce rpp v1" || initiator_pub || responder_pub
//!                          || s (4, BE) || r (4, BE) || dir, 20)
//! key  = okm[0..16], salt = okm[16..20]
//! ```

use ring::agreement::{agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::hkdf::{KeyType, Prk, Salt, HKDF_SHA256};
use ring::rand::SystemRandom;
use roce_proto::crypto::{KEY_LEN, SALT_LEN};
use roce_proto::{DirectionKey, QpKeys};

use crate::error::{Error, Result};

/// Bytes of an X25519 public key.
pub const PUBLIC_KEY_LEN: usize = 32;
const LABEL: &[u8] = b"roce rpp v1";

/// One end's half of a key agreement.
pub struct KeyExchange {
    private: EphemeralPrivateKey,
    public: [u8; PUBLIC_KEY_LEN],
}

impl KeyExchange {
    /// A fresh ephemeral key pair from the OS's randomness.
    pub fn new() -> Result<KeyExchange> {
        let rng = SystemRandom::new();
        let private = EphemeralPrivateKey::generate(&X25519, &rng)
            .map_err(|_| Error::Randomness("X25519 key generation failed".into()))?;
        let pk = private.compute_public_key().map_err(|_| Error::Randomness("X25519 public key".into()))?;
        let public = pk.as_ref().try_into().expect("X25519 public keys are 32 bytes");
        Ok(KeyExchange { private, public })
    }

    /// What the peer needs: send it over the out-of-band channel.
    pub fn public_key(&self) -> [u8; PUBLIC_KEY_LEN] {
        self.public
    }

    /// Completes the agreement with the peer's public key. `initiator`
    /// tells which end this is (the two ends must disagree); `psk` is mixed
    /// in when given (both ends must give the same).
    pub fn agree(self, peer: &[u8; PUBLIC_KEY_LEN], initiator: bool, psk: Option<&[u8]>) -> Result<Session> {
        let (mine, theirs) = (self.public, *peer);
        let ikm = agree_ephemeral(self.private, &UnparsedPublicKey::new(&X25519, peer), |shared| {
            let mut v = shared.to_vec();
            v.extend_from_slice(psk.unwrap_or_default());
            v
        })
        .map_err(|_| Error::Config("the peer's X25519 public key is invalid".into()))?;
        let prk = Salt::new(HKDF_SHA256, LABEL).extract(&ikm);
        let (ipub, rpub) = if initiator { (mine, theirs) } else { (theirs, mine) };
        Ok(Session { prk, initiator, ipub, rpub })
    }
}

/// An agreed secret, from which each QP's keys are drawn.
pub struct Session {
    prk: Prk,
    initiator: bool,
    ipub: [u8; PUBLIC_KEY_LEN],
    rpub: [u8; PUBLIC_KEY_LEN],
}

struct Okm;
impl KeyType for Okm {
    fn len(&self) -> usize {
        KEY_LEN + SALT_LEN
    }
}

impl Session {
    /// The keys of the local QP `local` connected to the peer's `remote`.
    /// The peer's `qp_keys(remote, local)` gives the same keys, swapped.
    pub fn qp_keys(&self, local: u32, remote: u32) -> QpKeys {
        let (out, inn) = if self.initiator { (b'i', b'r') } else { (b'r', b'i') };
        QpKeys { tx: self.direction(local, remote, out), rx: self.direction(remote, local, inn) }
    }

    fn direction(&self, sender: u32, receiver: u32, dir: u8) -> DirectionKey {
        let (s, r) = (sender.to_be_bytes(), receiver.to_be_bytes());
        let info: [&[u8]; 6] = [LABEL, &self.ipub, &self.rpub, &s, &r, core::slice::from_ref(&dir)];
        let mut okm = [0u8; KEY_LEN + SALT_LEN];
        self.prk
            .expand(&info, Okm)
            .and_then(|o| o.fill(&mut okm))
            .expect("20 bytes are well within HKDF-SHA256's output");
        let mut key = DirectionKey { key: [0; KEY_LEN], salt: [0; SALT_LEN] };
        key.key.copy_from_slice(&okm[..KEY_LEN]);
        key.salt.copy_from_slice(&okm[KEY_LEN..]);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ends_derive_mirrored_keys_and_the_psk_and_qpns_matter() {
        let (a, b) = (KeyExchange::new().unwrap(), KeyExchange::new().unwrap());
        let (pa, pb) = (a.public_key(), b.public_key());
        assert_ne!(pa, pb);
        let sa = a.agree(&pb, true, Some(b"pw")).unwrap();
        let sb = b.agree(&pa, false, Some(b"pw")).unwrap();
        let ka = sa.qp_keys(0x11, 0x22);
        let kb = sb.qp_keys(0x22, 0x11);
        assert_eq!(ka.tx, kb.rx);
        assert_eq!(ka.rx, kb.tx);
        assert_ne!(ka.tx, ka.rx, "one key for both directions");
        assert_ne!(sa.qp_keys(0x11, 0x23).tx, ka.tx, "QPs share a key");
        // Another PSK gives other keys.
        let (c, d) = (KeyExchange::new().unwrap(), KeyExchange::new().unwrap());
        let (pc, pd) = (c.public_key(), d.public_key());
        let sc = c.agree(&pd, true, Some(b"pw")).unwrap();
        let sd = d.agree(&pc, false, Some(b"other")).unwrap();
        assert_ne!(sc.qp_keys(1, 2).tx, sd.qp_keys(2, 1).rx);
        assert!(format!("{:?}", ka.tx).find("key: [").is_none(), "Debug prints key bytes");
    }
}
