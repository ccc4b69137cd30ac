//! Fabrics commands (NVMe-oF 1.1, 3.3 and 3.5-3.6: Connect, Property Get,
//! Property Set) and the NVMe/RDMA private data carried in the RDMA CM's
//! REQ, REP and REJ (NVMe RDMA Transport 1.0, 3.1, Figs. 5-7).

use super::{field_str, le16, put16, put_str, Sqe, NQN_MAX};

/// Fabrics command types (byte 4 of a command with opcode 0x7F).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECEIVE: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

/// Controller properties (NVMe Base 2.0, 3.1.4, Fig. 33): offsets.
pub mod property {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset (4 bytes).
    pub const NSSR: u32 = 0x20;
}

/// The Connect command's fields (NVMe-oF 1.1, Fig. 20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    pub recfmt: u16,
    /// 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Bit 2: disable SQ flow control.
    pub cattr: u8,
    /// Keep Alive Timeout in ms (admin queue only; 0 = none).
    pub kato: u32,
}

impl Connect {
    pub fn parse<T: AsRef<[u8]>>(s: &Sqe<T>) -> Connect {
        Connect {
            recfmt: s.word_at(40),
            qid: s.word_at(42),
            sqsize: s.word_at(44),
            cattr: s.byte(46),
            kato: s.dword_at(48),
        }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, s: &mut Sqe<T>) {
        s.set_byte(4, fctype::CONNECT);
        s.set_word_at(40, self.recfmt);
        s.set_word_at(42, self.qid);
        s.set_word_at(44, self.sqsize);
        s.set_byte(46, self.cattr);
        s.set_dword_at(48, self.kato);
    }
}

/// Connect's 1024 bytes of data (NVMe-oF 1.1, Fig. 21).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectData {
    pub hostid: [u8; 16],
    /// 0xFFFF on the admin queue (dynamic controller model); the
    /// controller ID the admin Connect returned on an I/O queue.
    pub cntlid: u16,
    pub subnqn: String,
    pub hostnqn: String,
}

/// Offsets of the fields in [`ConnectData`] (the "IPO" a Connect Invalid
/// Parameters completion names).
pub mod connect_data {
    pub const LEN: usize = 1024;
    pub const HOSTID: u16 = 0;
    pub const CNTLID: u16 = 16;
    pub const SUBNQN: u16 = 256;
    pub const HOSTNQN: u16 = 512;
}

/// Why Connect data is refused: the offset of the bad field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnectDataError {
    #[error("connect data is {0} bytes, not 1024")]
    Length(usize),
    #[error("the NQN at offset {0} is not NUL-terminated UTF-8 of at most 223 bytes")]
    Nqn(u16),
}

impl ConnectData {
    pub fn parse(b: &[u8]) -> Result<ConnectData, ConnectDataError> {
        if b.len() < connect_data::LEN {
            return Err(ConnectDataError::Length(b.len()));
        }
        let nqn = |at: u16| -> Result<String, ConnectDataError> {
            let f = &b[at as usize..at as usize + 256];
            match (f.iter().position(|&c| c == 0), field_str(f)) {
                (Some(n), Some(s)) if n <= NQN_MAX && n > 0 => Ok(s.to_string()),
                _ => Err(ConnectDataError::Nqn(at)),
            }
        };
        Ok(ConnectData {
            hostid: b[..16].try_into().expect("16 bytes"),
            cntlid: le16(b, 16),
            subnqn: nqn(connect_data::SUBNQN)?,
            hostnqn: nqn(connect_data::HOSTNQN)?,
        })
    }

    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; connect_data::LEN];
        b[..16].copy_from_slice(&self.hostid);
        put16(&mut b, 16, self.cntlid);
        put_str(&mut b[256..256 + NQN_MAX], &self.subnqn, 0);
        put_str(&mut b[512..512 + NQN_MAX], &self.hostnqn, 0);
        b
    }
}

/// Property Get/Set fields (NVMe-oF 1.1, Figs. 27 and 30): `size8` is
/// ATTRIB bit 0 (8-byte property), `value` only for Set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertyCmd {
    pub size8: bool,
    pub offset: u32,
    pub value: u64,
}

impl PropertyCmd {
    pub fn parse<T: AsRef<[u8]>>(s: &Sqe<T>) -> PropertyCmd {
        PropertyCmd { size8: s.byte(40) & 1 != 0, offset: s.dword_at(44), value: s.qword_at(48) }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, s: &mut Sqe<T>, fctype: u8) {
        s.set_byte(4, fctype);
        s.set_byte(40, u8::from(self.size8));
        s.set_dword_at(44, self.offset);
        s.set_qword_at(48, self.value);
    }
}

/// The RDMA_CM_REQUEST private data (RDMA Transport 1.0, Fig. 5), 32
/// bytes after the RDMA CM's own 36-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqPrivate {
    pub recfmt: u16,
    pub qid: u16,
    /// Host receive queue size: response capsules the host can take.
    pub hrqsize: u16,
    /// Host send queue size, 0's based (= Connect SQSIZE).
    pub hsqsize: u16,
    /// Controller ID on I/O queues (Linux sends it since 6.12; 0 before).
    pub cntlid: u16,
}

/// The length of each NVMe/RDMA private data block.
pub const PRIVATE_LEN: usize = 32;

impl ReqPrivate {
    /// `None` if fewer than 8 bytes came.
    pub fn parse(b: &[u8]) -> Option<ReqPrivate> {
        (b.len() >= 8).then(|| ReqPrivate {
            recfmt: le16(b, 0),
            qid: le16(b, 2),
            hrqsize: le16(b, 4),
            hsqsize: le16(b, 6),
            cntlid: if b.len() >= 10 { le16(b, 8) } else { 0 },
        })
    }
    pub fn emit(&self) -> [u8; PRIVATE_LEN] {
        let mut b = [0u8; PRIVATE_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.qid);
        put16(&mut b, 4, self.hrqsize);
        put16(&mut b, 6, self.hsqsize);
        put16(&mut b, 8, self.cntlid);
        b
    }
}

/// The RDMA_CM_ACCEPT private data (Fig. 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepPrivate {
    pub recfmt: u16,
    /// Controller receive queue size: commands the controller can take.
    pub crqsize: u16,
}

impl RepPrivate {
    pub fn parse(b: &[u8]) -> Option<RepPrivate> {
        (b.len() >= 4).then(|| RepPrivate { recfmt: le16(b, 0), crqsize: le16(b, 2) })
    }
    pub fn emit(&self) -> [u8; PRIVATE_LEN] {
        let mut b = [0u8; PRIVATE_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.crqsize);
        b
    }
}

/// RDMA_CM_REJECT status values (Fig. 7).
pub mod rej_status {
    pub const INVALID_PRIVATE_DATA_LENGTH: u16 = 1;
    pub const INVALID_RECFMT: u16 = 2;
    pub const INVALID_QID: u16 = 3;
    pub const INVALID_HSQSIZE: u16 = 4;
    pub const INVALID_HRQSIZE: u16 = 5;
    pub const NO_RESOURCES: u16 = 6;
    pub const INVALID_IRD: u16 = 7;
    pub const INVALID_ORD: u16 = 8;
    pub const INVALID_CNTLID: u16 = 9;
}

/// The RDMA_CM_REJECT private data: `{recfmt, sts}`.
pub fn rej_private(sts: u16) -> [u8; 4] {
    let mut b = [0u8; 4];
    put16(&mut b, 2, sts);
    b
}

/// The STS of a REJ's private data, if it carries one.
pub fn parse_rej_private(b: &[u8]) -> Option<u16> {
    (b.len() >= 4).then(|| le16(b, 2))
}

/// A discovery log page entry's RDMA transport specific address subtype
/// (NVMe-oF 1.1, Fig. 39).
pub mod tsas_rdma {
    /// RDMA_QPTYPE: reliable connected.
    pub const QPTYPE_CONNECTED: u8 = 1;
    /// RDMA_PRTYPE: no provider specified (what Linux nvmet sends).
    pub const PRTYPE_NOT_SPECIFIED: u8 = 1;
    pub const PRTYPE_ROCEV2: u8 = 4;
    /// RDMA_CMS: RDMA IP CM.
    pub const CMS_RDMA_CM: u8 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_data_round_trips_and_names_the_bad_field() {
        let d = ConnectData {
            hostid: [7; 16],
            cntlid: 0xffff,
            subnqn: "nqn.2026-11.io.roce:disk".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:1234".into(),
        };
        let b = d.emit();
        assert_eq!(b.len(), 1024);
        assert_eq!(ConnectData::parse(&b), Ok(d.clone()));
        let mut bad = b.clone();
        bad[256..512].fill(b'a'); // no NUL
        assert_eq!(ConnectData::parse(&bad), Err(ConnectDataError::Nqn(256)));
        let mut empty = b.clone();
        empty[512..768].fill(0);
        assert_eq!(ConnectData::parse(&empty), Err(ConnectDataError::Nqn(512)));
        assert_eq!(ConnectData::parse(&b[..1000]), Err(ConnectDataError::Length(1000)));
    }

    #[test]
    fn private_data_matches_the_kernel_host() {
        // Linux admin queue: recfmt 0, qid 0, hrqsize 32, hsqsize 31.
        let b = [0, 0, 0, 0, 32, 0, 31, 0, 0, 0];
        assert_eq!(
            ReqPrivate::parse(&b),
            Some(ReqPrivate { recfmt: 0, qid: 0, hrqsize: 32, hsqsize: 31, cntlid: 0 })
        );
        assert_eq!(RepPrivate::parse(&RepPrivate { recfmt: 0, crqsize: 128 }.emit()).unwrap().crqsize, 128);
        assert_eq!(parse_rej_private(&rej_private(rej_status::INVALID_HSQSIZE)), Some(4));
        assert_eq!(ReqPrivate::parse(&b[..7]), None);
    }
}
