//! What ranks exchange through the rendezvous to connect: per channel and
//! peer, the data and credit QPs' endpoints (one device: one address and
//! port) and the receive region.
//! Little-endian, fixed-size entries after a `u32` count.

/// One QP's endpoint and the region the peer writes into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub channel: u32,
    /// The rank this QP talks to.
    pub peer: u32,
    pub gid: [u8; 16],
    pub port: u16,
    pub qpn: u32,
    pub psn: u32,
    /// The credit QP (same address and port).
    pub credit_qpn: u32,
    pub credit_psn: u32,
    pub addr: u64,
    pub rkey: u32,
}

const ENTRY: usize = 4 + 4 + 16 + 2 + 4 + 4 + 4 + 4 + 8 + 4;

/// All of one rank's entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blob {
    pub entries: Vec<Entry>,
}

impl Blob {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + ENTRY * self.entries.len());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.channel.to_le_bytes());
            out.extend_from_slice(&e.peer.to_le_bytes());
            out.extend_from_slice(&e.gid);
            out.extend_from_slice(&e.port.to_le_bytes());
            out.extend_from_slice(&e.qpn.to_le_bytes());
            out.extend_from_slice(&e.psn.to_le_bytes());
            out.extend_from_slice(&e.credit_qpn.to_le_bytes());
            out.extend_from_slice(&e.credit_psn.to_le_bytes());
            out.extend_from_slice(&e.addr.to_le_bytes());
            out.extend_from_slice(&e.rkey.to_le_bytes());
        }
        out
    }

    /// `None` if the bytes are not a whole list.
    pub fn decode(b: &[u8]) -> Option<Blob> {
        let n = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
        if b.len() != 4 + n.checked_mul(ENTRY)? {
            return None;
        }
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let e = &b[4 + i * ENTRY..4 + (i + 1) * ENTRY];
            let u32_at = |o: usize| u32::from_le_bytes(e[o..o + 4].try_into().expect("4"));
            entries.push(Entry {
                channel: u32_at(0),
                peer: u32_at(4),
                gid: e[8..24].try_into().expect("16"),
                port: u16::from_le_bytes(e[24..26].try_into().expect("2")),
                qpn: u32_at(26),
                psn: u32_at(30),
                credit_qpn: u32_at(34),
                credit_psn: u32_at(38),
                addr: u64::from_le_bytes(e[42..50].try_into().expect("8")),
                rkey: u32_at(50),
            });
        }
        Some(Blob { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_truncation() {
        let b = Blob {
            entries: vec![Entry {
                channel: 1,
                peer: 3,
                gid: [7; 16],
                port: 4791,
                qpn: 0x12,
                psn: 0xabcdef,
                credit_qpn: 0x13,
                credit_psn: 0x123456,
                addr: 0xdead_beef_0000,
                rkey: 9,
            }],
        };
        let enc = b.encode();
        assert_eq!(Blob::decode(&enc), Some(b));
        assert_eq!(Blob::decode(&enc[..enc.len() - 1]), None);
        assert_eq!(Blob::decode(&[]), None);
    }
}
