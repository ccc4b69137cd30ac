//! The submission queue entry (command capsule), its SGL descriptor, and
//! the completion queue entry (response capsule).

use super::{le16, le32, le64, put16, put32, put64, Status};

/// An SQE is 64 bytes (NVMe Base 2.0, Fig. 88; Identify SQES = 6).
pub const SQE_LEN: usize = 64;
/// A CQE is 16 bytes (Fig. 90; Identify CQES = 4). On RDMA a response
/// capsule is exactly one CQE (RDMA Transport 1.0, Fig. 9).
pub const CQE_LEN: usize = 16;

mod field {
    pub const OPCODE: usize = 0;
    /// FUSE (bits 1:0) and PSDT (bits 7:6): 01b = SGLs for data.
    pub const FLAGS: usize = 1;
    pub const CID: usize = 2;
    pub const NSID: usize = 4;
    pub const DPTR: usize = 24;
    pub const CDW10: usize = 40;
}

/// PSDT = 01b in the flags byte: "SGLs are used for this transfer"
/// (Linux `NVME_CMD_SGL_METABUF`), what every NVMe-oF command carries.
pub const FLAGS_SGL: u8 = 0x40;

/// A read-only or writable view of a 64-byte SQE.
#[derive(Debug, Clone, Copy)]
pub struct Sqe<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Sqe<T> {
    /// A view over `buf`, which must hold at least 64 bytes.
    pub fn new_checked(buf: T) -> Option<Sqe<T>> {
        (buf.as_ref().len() >= SQE_LEN).then_some(Sqe { buf })
    }
    pub fn opcode(&self) -> u8 {
        self.buf.as_ref()[field::OPCODE]
    }
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[field::FLAGS]
    }
    /// Fused operation bits (must be 0: NVMe-oF has no fused commands here).
    pub fn fuse(&self) -> u8 {
        self.flags() & 3
    }
    /// PSDT: 0 PRPs, 1 or 2 SGLs.
    pub fn psdt(&self) -> u8 {
        self.flags() >> 6
    }
    pub fn cid(&self) -> u16 {
        le16(self.buf.as_ref(), field::CID)
    }
    pub fn nsid(&self) -> u32 {
        le32(self.buf.as_ref(), field::NSID)
    }
    /// The data pointer's 16 bytes (one SGL descriptor).
    pub fn dptr(&self) -> &[u8] {
        &self.buf.as_ref()[field::DPTR..field::DPTR + 16]
    }
    /// Command dword 10 + `i` (i in 0..6).
    pub fn cdw(&self, i: usize) -> u32 {
        le32(self.buf.as_ref(), field::CDW10 + 4 * i)
    }
    /// Bytes 40.. as a u64 (Read/Write SLBA, Property Set value at 48).
    pub fn qword_at(&self, at: usize) -> u64 {
        le64(self.buf.as_ref(), at)
    }
    pub fn byte(&self, at: usize) -> u8 {
        self.buf.as_ref()[at]
    }
    pub fn word_at(&self, at: usize) -> u16 {
        le16(self.buf.as_ref(), at)
    }
    pub fn dword_at(&self, at: usize) -> u32 {
        le32(self.buf.as_ref(), at)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf.as_ref()[..SQE_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Sqe<T> {
    pub fn set_opcode(&mut self, v: u8) {
        self.buf.as_mut()[field::OPCODE] = v;
    }
    pub fn set_flags(&mut self, v: u8) {
        self.buf.as_mut()[field::FLAGS] = v;
    }
    pub fn set_cid(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::CID, v);
    }
    pub fn set_nsid(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::NSID, v);
    }
    pub fn set_dptr(&mut self, sgl: &Sgl) {
        sgl.emit(&mut self.buf.as_mut()[field::DPTR..field::DPTR + 16]);
    }
    pub fn set_cdw(&mut self, i: usize, v: u32) {
        put32(self.buf.as_mut(), field::CDW10 + 4 * i, v);
    }
    pub fn set_byte(&mut self, at: usize, v: u8) {
        self.buf.as_mut()[at] = v;
    }
    pub fn set_word_at(&mut self, at: usize, v: u16) {
        put16(self.buf.as_mut(), at, v);
    }
    pub fn set_dword_at(&mut self, at: usize, v: u32) {
        put32(self.buf.as_mut(), at, v);
    }
    pub fn set_qword_at(&mut self, at: usize, v: u64) {
        put64(self.buf.as_mut(), at, v);
    }
}

/// An SGL descriptor as NVMe/RDMA allows it in a command (RDMA Transport
/// 1.0, 3.3: exactly one descriptor; keyed data blocks address host
/// memory the controller reaches by RDMA READ/WRITE, offset data blocks
/// address in-capsule data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sgl {
    /// Keyed SGL Data Block (type 4): host memory at `addr` under `key`,
    /// `len` < 2^24 bytes. `invalidate` (sub type 0xF) lets the controller
    /// answer with SEND WITH INVALIDATE of `key`.
    Keyed { addr: u64, len: u32, key: u32, invalidate: bool },
    /// SGL Data Block with sub type Offset (type 0, sub type 1): `len`
    /// bytes of in-capsule data at `offset` after the SQE (plus ICDOFF).
    InCapsule { offset: u64, len: u32 },
}

/// Descriptor type byte (byte 15: type << 4 | sub type).
mod sgl_type {
    pub const KEYED_ADDRESS: u8 = 0x40;
    pub const KEYED_INVALIDATE: u8 = 0x4F;
    pub const DATA_OFFSET: u8 = 0x01;
}

/// Why an SGL descriptor is refused, with the status the controller
/// answers (Linux nvmet: "invalid SGL type/subtype").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SglError {
    #[error("SGL descriptor type {0:#04x} is not allowed in an NVMe/RDMA command")]
    Type(u8),
}

impl SglError {
    pub fn status(&self) -> Status {
        Status::SGL_TYPE_INVALID
    }
}

impl Sgl {
    /// The "no data" descriptor Linux sends (keyed, length 0).
    pub const NULL: Sgl = Sgl::Keyed { addr: 0, len: 0, key: 0, invalidate: false };

    pub fn parse(d: &[u8]) -> Result<Sgl, SglError> {
        match d[15] {
            t @ (sgl_type::KEYED_ADDRESS | sgl_type::KEYED_INVALIDATE) => Ok(Sgl::Keyed {
                addr: le64(d, 0),
                len: u32::from_le_bytes([d[8], d[9], d[10], 0]),
                key: le32(d, 11),
                invalidate: t == sgl_type::KEYED_INVALIDATE,
            }),
            sgl_type::DATA_OFFSET => Ok(Sgl::InCapsule { offset: le64(d, 0), len: le32(d, 8) }),
            t => Err(SglError::Type(t)),
        }
    }

    /// Writes the 16-byte descriptor. A keyed length is cut to 24 bits.
    pub fn emit(&self, d: &mut [u8]) {
        d[..16].fill(0);
        match *self {
            Sgl::Keyed { addr, len, key, invalidate } => {
                put64(d, 0, addr);
                d[8..11].copy_from_slice(&len.to_le_bytes()[..3]);
                put32(d, 11, key);
                d[15] = if invalidate { sgl_type::KEYED_INVALIDATE } else { sgl_type::KEYED_ADDRESS };
            }
            Sgl::InCapsule { offset, len } => {
                put64(d, 0, offset);
                put32(d, 8, len);
                d[15] = sgl_type::DATA_OFFSET;
            }
        }
    }

    pub fn len(&self) -> u32 {
        match *self {
            Sgl::Keyed { len, .. } | Sgl::InCapsule { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A completion queue entry (NVMe Base 2.0, Fig. 90).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific dword 0 (Connect: the controller ID; Property Get:
    /// the value's low half; Set Features Number of Queues: the grant).
    pub dw0: u32,
    pub dw1: u32,
    /// Submission queue head pointer after this command.
    pub sqhd: u16,
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
}

impl Cqe {
    pub fn new(cid: u16, status: Status) -> Cqe {
        Cqe { dw0: 0, dw1: 0, sqhd: 0, sqid: 0, cid, status }
    }

    pub fn parse(b: &[u8]) -> Option<Cqe> {
        (b.len() >= CQE_LEN).then(|| Cqe {
            dw0: le32(b, 0),
            dw1: le32(b, 4),
            sqhd: le16(b, 8),
            sqid: le16(b, 10),
            cid: le16(b, 12),
            status: Status::from_field(le16(b, 14)),
        })
    }

    /// The 16 bytes; the phase tag is 0 (a response capsule has no queue
    /// to wrap: RDMA Transport 1.0, 2.2).
    pub fn emit(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        put32(&mut b, 0, self.dw0);
        put32(&mut b, 4, self.dw1);
        put16(&mut b, 8, self.sqhd);
        put16(&mut b, 10, self.sqid);
        put16(&mut b, 12, self.cid);
        put16(&mut b, 14, self.status.to_field(false));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_linux_read_command_parses() {
        // A Read of 8 blocks at LBA 0x1234 with an invalidating key, as
        // `nvme_rdma_map_sg_single` + `nvme_setup_rw` build it.
        let mut b = [0u8; 64];
        b[0] = 0x02;
        b[1] = 0x40;
        b[2..4].copy_from_slice(&7u16.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b[24..32].copy_from_slice(&0xffff_8880_1234_0000u64.to_le_bytes());
        b[32..35].copy_from_slice(&[0x00, 0x10, 0x00]); // 4096
        b[35..39].copy_from_slice(&0xabcd_0102u32.to_le_bytes());
        b[39] = 0x4F;
        b[40..48].copy_from_slice(&0x1234u64.to_le_bytes());
        b[48..50].copy_from_slice(&7u16.to_le_bytes());
        let s = Sqe::new_checked(&b[..]).unwrap();
        assert_eq!((s.opcode(), s.psdt(), s.cid(), s.nsid()), (2, 1, 7, 1));
        assert_eq!(
            Sgl::parse(s.dptr()),
            Ok(Sgl::Keyed { addr: 0xffff_8880_1234_0000, len: 4096, key: 0xabcd_0102, invalidate: true })
        );
        assert_eq!((s.qword_at(40), s.cdw(2) & 0xffff), (0x1234, 7));
        assert!(Sqe::new_checked(&b[..63]).is_none());
    }

    #[test]
    fn other_descriptor_types_are_refused() {
        let mut d = [0u8; 16];
        for t in [0x00u8, 0x02, 0x20, 0x30, 0x41, 0x50, 0xff] {
            d[15] = t;
            assert_eq!(Sgl::parse(&d), Err(SglError::Type(t)));
        }
    }

    proptest! {
        #[test]
        fn sgl_round_trips(addr: u64, len in 0u32..(1 << 24), key: u32, inv: bool, off: u64, ilen: u32) {
            let mut d = [0u8; 16];
            for s in [Sgl::Keyed { addr, len, key, invalidate: inv }, Sgl::InCapsule { offset: off, len: ilen }] {
                s.emit(&mut d);
                prop_assert_eq!(Sgl::parse(&d), Ok(s));
            }
        }

        #[test]
        fn cqe_round_trips(dw0: u32, dw1: u32, sqhd: u16, sqid: u16, cid: u16, sct in 0u8..8, sc: u8, dnr: bool) {
            let c = Cqe { dw0, dw1, sqhd, sqid, cid, status: Status { sct, sc, dnr } };
            prop_assert_eq!(Cqe::parse(&c.emit()), Some(c));
        }
    }
}
