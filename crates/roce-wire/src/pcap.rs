//! Capture files: read pcap and pcapng, write pcap or pcapng, Ethernet link
//! type only (LINKTYPE_ETHERNET = 1). Built on the `pcap-file` crate; this
//! module adds typed errors that say what is wrong with a file instead of a
//! bare parse failure, and writers fixed to Ethernet with nanosecond
//! timestamps. The pcapng writer carries what pcap cannot: a comment on the
//! file and on each packet, and each packet's direction.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader as RawPcapReader, PcapWriter as RawPcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::pcapng::{Block, PcapNgBlock, PcapNgReader, PcapNgWriter as RawPcapNgWriter};
use pcap_file::Endianness;
use pcap_file::{DataLink, PcapError as RawError, TsResolution};
use thiserror::Error;

/// Why a capture file cannot be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PcapError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: io::Error },
    #[error("the file is empty")]
    Empty,
    #[error("not a pcap or pcapng file (magic bytes {0:02x?})")]
    NotPcap(Vec<u8>),
    #[error("file ends in the middle of {0}")]
    Truncated(&'static str),
    #[error("link type {0} is not supported (only Ethernet, link type 1)")]
    UnsupportedLinkType(u32),
    #[error("malformed capture: {0}")]
    Malformed(String),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl PcapError {
    fn from_raw(e: RawError, what: &'static str) -> PcapError {
        match e {
            RawError::IncompleteBuffer => PcapError::Truncated(what),
            RawError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => PcapError::Truncated(what),
            RawError::IoError(e) => PcapError::Io(e),
            other => PcapError::Malformed(other.to_string()),
        }
    }
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Time since the Unix epoch.
    pub timestamp: Duration,
    /// Length of the frame on the wire (may exceed `data.len()` if cut by the snap length).
    pub orig_len: u32,
    pub data: Vec<u8>,
}

type Stream<R> = io::Chain<io::Cursor<[u8; 4]>, R>;

enum Inner<R: Read> {
    Pcap(RawPcapReader<Stream<R>>),
    PcapNg(PcapNgReader<Stream<R>>),
}

/// Reads Ethernet frames from a pcap or pcapng stream. After the first error
/// (a truncated or corrupt record) it yields `None`: the underlying parser
/// would otherwise report the same error forever.
pub struct PcapReader<R: Read> {
    inner: Inner<R>,
    failed: bool,
}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
const PCAP_MAGICS: [[u8; 4]; 4] =
    [[0xd4, 0xc3, 0xb2, 0xa1], [0xa1, 0xb2, 0xc3, 0xd4], [0x4d, 0x3c, 0xb2, 0xa1], [0xa1, 0xb2, 0x3c, 0x4d]];

impl PcapReader<BufReader<File>> {
    /// Opens a capture file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        let p = path.as_ref();
        let f = File::open(p).map_err(|source| PcapError::Open { path: p.display().to_string(), source })?;
        PcapReader::new(BufReader::new(f))
    }
}

impl<R: Read> PcapReader<R> {
    /// Reads the file header and checks the link type.
    pub fn new(mut reader: R) -> Result<Self, PcapError> {
        let mut magic = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match reader.read(&mut magic[got..])? {
                0 => break,
                n => got += n,
            }
        }
        if got == 0 {
            return Err(PcapError::Empty);
        }
        let is_ng = magic == PCAPNG_MAGIC;
        if got < 4 || !(is_ng || PCAP_MAGICS.contains(&magic)) {
            return Err(PcapError::NotPcap(magic[..got].to_vec()));
        }
        let stream = io::Cursor::new(magic).chain(reader);
        let inner = if is_ng {
            Inner::PcapNg(
                PcapNgReader::new(stream).map_err(|e| PcapError::from_raw(e, "the section header"))?,
            )
        } else {
            let r = RawPcapReader::new(stream).map_err(|e| PcapError::from_raw(e, "the file header"))?;
            let lt = u32::from(r.header().datalink);
            if lt != u32::from(DataLink::ETHERNET) {
                return Err(PcapError::UnsupportedLinkType(lt));
            }
            Inner::Pcap(r)
        };
        Ok(PcapReader { inner, failed: false })
    }

    /// The next frame, `None` at the end of the file and after an error.
    pub fn next_record(&mut self) -> Option<Result<Record, PcapError>> {
        if self.failed {
            return None;
        }
        let next = self.read_next();
        self.failed = matches!(next, Some(Err(_)));
        next
    }

    fn read_next(&mut self) -> Option<Result<Record, PcapError>> {
        match &mut self.inner {
            Inner::Pcap(r) => r.next_packet().map(|p| {
                p.map(|p| Record { timestamp: p.timestamp, orig_len: p.orig_len, data: p.data.into_owned() })
                    .map_err(|e| PcapError::from_raw(e, "a packet record"))
            }),
            Inner::PcapNg(r) => loop {
                let block = match r.next_block()? {
                    Ok(b) => b,
                    Err(e) => return Some(Err(PcapError::from_raw(e, "a block"))),
                };
                let (iface, rec) = match block {
                    Block::EnhancedPacket(p) => (
                        p.interface_id,
                        Record {
                            timestamp: p.timestamp,
                            orig_len: p.original_len,
                            data: p.data.into_owned(),
                        },
                    ),
                    Block::SimplePacket(p) => (
                        0,
                        Record {
                            timestamp: Duration::ZERO,
                            orig_len: p.original_len,
                            data: p.data.into_owned(),
                        },
                    ),
                    _ => continue,
                };
                let Some(desc) = r.interfaces().get(iface as usize) else {
                    return Some(Err(PcapError::Malformed(format!(
                        "packet names unknown interface {iface}"
                    ))));
                };
                let lt = u32::from(desc.linktype);
                if lt != u32::from(DataLink::ETHERNET) {
                    return Some(Err(PcapError::UnsupportedLinkType(lt)));
                }
                let mut rec = rec;
                rec.timestamp = pcapng_time(rec.timestamp, &desc.options);
                return Some(Ok(rec));
            },
        }
    }
}

/// The time of an Enhanced Packet Block. `pcap-file` 2.0 hands over the raw
/// 64-bit tick count as if it were nanoseconds; a tick is really 10^-n
/// seconds (or 2^-n with the top bit of `if_tsresol` set), n = 6 unless the
/// interface says otherwise, plus `if_tsoffset` seconds (pcapng §4.2).
fn pcapng_time(raw: Duration, options: &[InterfaceDescriptionOption<'_>]) -> Duration {
    let ticks = raw.as_nanos();
    let mut resol = 6u8;
    let mut offset = 0u64;
    for o in options {
        match o {
            InterfaceDescriptionOption::IfTsResol(r) => resol = *r,
            InterfaceDescriptionOption::IfTsOffset(s) => offset = *s,
            _ => {}
        }
    }
    let exp = u32::from(resol & 0x7f);
    let nanos = if resol & 0x80 != 0 {
        // 2^-exp seconds per tick; exp <= 127 keeps the shift in range
        ticks.saturating_mul(1_000_000_000) >> exp
    } else if exp <= 9 {
        ticks.saturating_mul(10u128.pow(9 - exp))
    } else {
        10u128.checked_pow(exp - 9).map_or(0, |d| ticks / d)
    };
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs.saturating_add(offset), (nanos % 1_000_000_000) as u32)
}

impl<R: Read> Iterator for PcapReader<R> {
    type Item = Result<Record, PcapError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

/// Writes Ethernet frames to a pcap file with nanosecond timestamps.
pub struct PcapWriter<W: Write> {
    inner: RawPcapWriter<W>,
}

/// Snap length written in the header: the largest frame we emit fits.
pub const SNAPLEN: u32 = 65535;

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) a capture file.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        let p = path.as_ref();
        let f =
            File::create(p).map_err(|source| PcapError::Open { path: p.display().to_string(), source })?;
        PcapWriter::new(BufWriter::new(f))
    }
}

impl<W: Write> PcapWriter<W> {
    pub fn new(writer: W) -> Result<Self, PcapError> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: SNAPLEN,
            ts_resolution: TsResolution::NanoSecond,
            ..PcapHeader::default()
        };
        let inner =
            RawPcapWriter::with_header(writer, header).map_err(|e| PcapError::from_raw(e, "writing"))?;
        Ok(PcapWriter { inner })
    }

    /// Appends one frame (cut to the snap length if longer).
    pub fn write(&mut self, timestamp: Duration, frame: &[u8]) -> Result<(), PcapError> {
        let cut = &frame[..frame.len().min(SNAPLEN as usize)];
        let pkt = PcapPacket::new(timestamp, frame.len() as u32, cut);
        self.inner.write_packet(&pkt).map_err(|e| PcapError::from_raw(e, "writing"))?;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> Result<W, PcapError> {
        let mut w = self.inner.into_writer();
        w.flush()?;
        Ok(w)
    }
}

/// Which way a packet went, as pcapng's `epb_flags` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Inbound,
    Outbound,
}

/// Writes Ethernet frames to a pcapng file: one section with a comment,
/// one interface with nanosecond timestamps, packets with their direction
/// and an optional comment.
pub struct PcapNgWriter<W: Write> {
    inner: RawPcapNgWriter<W>,
}

impl PcapNgWriter<BufWriter<File>> {
    /// Creates (or truncates) a capture file whose section carries `comment`.
    pub fn create(path: impl AsRef<Path>, comment: &str) -> Result<Self, PcapError> {
        let p = path.as_ref();
        let f =
            File::create(p).map_err(|source| PcapError::Open { path: p.display().to_string(), source })?;
        PcapNgWriter::new(BufWriter::new(f), comment)
    }
}

impl<W: Write> PcapNgWriter<W> {
    pub fn new(writer: W, comment: &str) -> Result<Self, PcapError> {
        let raw = |e| PcapError::from_raw(e, "writing");
        let section = SectionHeaderBlock {
            endianness: Endianness::Little,
            options: vec![SectionHeaderOption::Comment(comment.to_owned().into())],
            ..SectionHeaderBlock::default()
        };
        let mut inner = RawPcapNgWriter::with_section_header(writer, section).map_err(raw)?;
        let interface = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: SNAPLEN,
            // pcap-file writes packet timestamps in nanoseconds.
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        };
        inner.write_block(&interface.into_block()).map_err(raw)?;
        Ok(PcapNgWriter { inner })
    }

    /// Appends one frame (cut to the snap length if longer).
    pub fn write(
        &mut self,
        timestamp: Duration,
        frame: &[u8],
        direction: Direction,
        comment: Option<&str>,
    ) -> Result<(), PcapError> {
        let cut = &frame[..frame.len().min(SNAPLEN as usize)];
        let flags = match direction {
            Direction::Inbound => 1,
            Direction::Outbound => 2,
        };
        let mut options = vec![EnhancedPacketOption::Flags(flags)];
        if let Some(c) = comment {
            options.push(EnhancedPacketOption::Comment(c.into()));
        }
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp,
            original_len: frame.len() as u32,
            data: cut.into(),
            options,
        };
        self.inner.write_block(&epb.into_block()).map_err(|e| PcapError::from_raw(e, "writing"))?;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> Result<W, PcapError> {
        let mut w = self.inner.into_inner();
        w.flush()?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcapng_write_then_read_round_trips() {
        let mut w = PcapNgWriter::new(Vec::new(), "made by a test").unwrap();
        w.write(Duration::new(5, 123), &[1, 2, 3], Direction::Outbound, None).unwrap();
        w.write(Duration::new(6, 999_999_999), &[0xaa; 70], Direction::Inbound, Some("a note")).unwrap();
        let bytes = w.finish().unwrap();
        let recs: Vec<_> = PcapReader::new(&bytes[..]).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].timestamp, Duration::new(5, 123));
        assert_eq!(recs[0].data, vec![1, 2, 3]);
        assert_eq!(recs[1].timestamp, Duration::new(6, 999_999_999));
        assert_eq!(recs[1].orig_len, 70);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("made by a test") && text.contains("a note"));
    }

    #[test]
    fn write_then_read_round_trips() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write(Duration::new(5, 123), &[1, 2, 3]).unwrap();
        w.write(Duration::new(6, 999_999_999), &[0xaa; 70]).unwrap();
        let bytes = w.finish().unwrap();
        let recs: Vec<_> = PcapReader::new(&bytes[..]).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].timestamp, Duration::new(5, 123));
        assert_eq!(recs[0].data, vec![1, 2, 3]);
        assert_eq!(recs[1].orig_len, 70);
    }

    /// A little-endian pcapng file: section header, one Ethernet interface
    /// (with `if_tsresol` = `resol` if given) and one packet at `ticks`.
    fn pcapng(resol: Option<u8>, ticks: u64) -> Vec<u8> {
        let mut f = Vec::new();
        let mut block = |kind: u32, body: &[u8]| {
            let len = (12 + body.len()) as u32;
            f.extend_from_slice(&kind.to_le_bytes());
            f.extend_from_slice(&len.to_le_bytes());
            f.extend_from_slice(body);
            f.extend_from_slice(&len.to_le_bytes());
        };
        let mut shb = vec![0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0];
        shb.extend_from_slice(&u64::MAX.to_le_bytes());
        block(0x0a0d_0d0a, &shb);
        let mut idb = vec![1, 0, 0, 0, 0xff, 0xff, 0, 0];
        if let Some(r) = resol {
            idb.extend_from_slice(&[9, 0, 1, 0, r, 0, 0, 0, 0, 0, 0, 0]);
        }
        block(1, &idb);
        let mut epb = vec![0u8; 4];
        epb.extend_from_slice(&((ticks >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ticks as u32).to_le_bytes());
        epb.extend_from_slice(&60u32.to_le_bytes());
        epb.extend_from_slice(&60u32.to_le_bytes());
        epb.extend_from_slice(&[0xab; 60]);
        block(6, &epb);
        f
    }

    #[test]
    fn pcapng_timestamps_follow_the_interface_resolution() {
        let read = |resol, ticks| {
            let bytes = pcapng(resol, ticks);
            let recs: Vec<_> = PcapReader::new(&bytes[..]).unwrap().collect::<Result<_, _>>().unwrap();
            assert_eq!(recs.len(), 1);
            assert_eq!(recs[0].data, vec![0xab; 60]);
            recs[0].timestamp
        };
        let t = Duration::new(1_700_000_000, 123_456_000);
        // default: microseconds
        assert_eq!(read(None, 1_700_000_000_123_456), t);
        assert_eq!(read(Some(6), 1_700_000_000_123_456), t);
        assert_eq!(read(Some(9), 1_700_000_000_123_456_000), t);
        assert_eq!(read(Some(3), 1_700_000_000_123), Duration::new(1_700_000_000, 123_000_000));
        // 2^-10 s ticks
        assert_eq!(read(Some(0x80 | 10), 3 * 1024 + 512), Duration::from_millis(3500));
        // absurd resolutions do not panic
        read(Some(0x7f), u64::MAX);
        read(Some(0xff), u64::MAX);
        read(Some(0), u64::MAX);
    }

    #[test]
    fn bad_files_give_typed_errors() {
        assert!(matches!(PcapReader::new(&[][..]), Err(PcapError::Empty)));
        assert!(matches!(PcapReader::new(&b"hello world"[..]), Err(PcapError::NotPcap(_))));
        assert!(matches!(PcapReader::new(&[0xd4, 0xc3][..]), Err(PcapError::NotPcap(_))));
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write(Duration::ZERO, &[0u8; 100]).unwrap();
        let bytes = w.finish().unwrap();
        // header cut short
        assert!(matches!(PcapReader::new(&bytes[..10]), Err(PcapError::Truncated(_))));
        // record cut short: one error, then the end (not the same error forever)
        let mut r = PcapReader::new(&bytes[..bytes.len() - 7]).unwrap();
        assert!(matches!(r.next(), Some(Err(PcapError::Truncated(_)))));
        assert!(r.next().is_none());
    }
}
