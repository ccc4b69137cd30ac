//! `--encrypt` and `--psk`, shared by `roce perf` and `roce ping`: how an
//! end takes part in the X25519 key agreement whose session protects its
//! QPs (AES-128-GCM per QP and direction; `roce::crypto`). Each tool
//! carries the public keys in its own exchange.

use std::path::Path;

use super::error::{Error, Result};

/// Shortest pre-shared key accepted (128 bits).
const MIN_PSK_LEN: usize = 16;

/// `--encrypt` on `roce perf` or `roce ping`, with the pre-shared key of
/// `--psk` if any: how this end takes part in a key agreement.
#[derive(Debug, Clone)]
pub struct Encryption {
    psk: Option<Vec<u8>>,
}

/// Reads a pre-shared key file: at least 16 bytes.
pub fn read_psk(path: &Path) -> Result<Vec<u8>> {
    let k = std::fs::read(path).map_err(|source| Error::Psk { path: path.to_path_buf(), source })?;
    if k.len() < MIN_PSK_LEN {
        return Err(Error::BadArgs(format!(
            "the pre-shared key {} has {} bytes: use at least {MIN_PSK_LEN}",
            path.display(),
            k.len()
        )));
    }
    Ok(k)
}

impl Encryption {
    /// From the flags: `None` without `--encrypt`.
    pub fn from_flags(encrypt: bool, psk: Option<&Path>) -> Result<Option<Self>> {
        if !encrypt {
            return Ok(None);
        }
        Ok(Some(Encryption { psk: psk.map(read_psk).transpose()? }))
    }

    /// How the packets are protected, for the header.
    pub fn describe(&self) -> &'static str {
        match self.psk {
            None => "AES-128-GCM per QP and direction, keys by X25519",
            Some(_) => "AES-128-GCM per QP and direction, keys by X25519 and the pre-shared key",
        }
    }

    /// This end's half of the agreement (its public key goes to the peer).
    pub fn start(&self) -> Result<roce::crypto::KeyExchange> {
        roce::crypto::KeyExchange::new().map_err(Error::Encryption)
    }

    /// The session, from the peer's public key. `initiator`: the client.
    pub fn agree(
        &self,
        kx: roce::crypto::KeyExchange,
        peer: &[u8; roce::crypto::PUBLIC_KEY_LEN],
        initiator: bool,
    ) -> Result<roce::crypto::Session> {
        kx.agree(peer, initiator, self.psk.as_deref()).map_err(Error::Encryption)
    }
}
