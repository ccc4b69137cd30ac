//! Namespace back-ends: where a namespace's blocks live (a file, a block
//! device, or memory).

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use roce::{try_alloc_buffer, Access, Device, MemBuf, Mr};

/// The storage behind one namespace: byte-addressed, its length fixed.
/// Calls come from several queues at once (`&self`); each call is whole
/// (a read sees a write entirely or not at all only where the back-end
/// gives that, as a disk does for one block).
pub trait Backend: Send + Sync {
    /// Length in bytes.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes written data durable (NVM Flush).
    fn flush(&self) -> io::Result<()>;
    /// Writes `len` zero bytes at `offset` (NVM Write Zeroes).
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let zeros = vec![0u8; len.min(1 << 20) as usize];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64) as usize;
            self.write_at(offset + at, &zeros[..n])?;
            at += n as u64;
        }
        Ok(())
    }
    /// What the namespace is, for logs (`/path/disk.img`, `memory`).
    fn describe(&self) -> String;
    /// True where a read or write is a copy in memory that never waits for
    /// a disk: the target then serves commands straight in the registered
    /// data slot, holding the device while it copies (a file's read could
    /// wait for the disk, and the driver thread with it).
    fn never_blocks(&self) -> bool {
        false
    }
    /// The registered buffer that holds the namespace's bytes (byte `i`
    /// of the namespace at byte `i` of the buffer), where the back-end
    /// lives in memory a roce device can reach: the target then moves a
    /// Read's and a Write's blocks by RDMA straight between it and the
    /// host, registering it with each connection's protection domain.
    fn region(&self) -> Option<&Arc<MemBuf>> {
        None
    }
}

/// A regular file or a block device, read and written in place.
pub struct FileBackend {
    file: File,
    len: u64,
    path: PathBuf,
}

impl FileBackend {
    /// Opens `path` for reading and writing. Its length is the file's (a
    /// block device's size is found by seeking to its end).
    pub fn open(path: &Path) -> io::Result<FileBackend> {
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = file.seek(SeekFrom::End(0))?;
        Ok(FileBackend { file, len, path: path.to_path_buf() })
    }

    /// Creates (or truncates) a file of `len` bytes (sparse).
    pub fn create(path: &Path, len: u64) -> io::Result<FileBackend> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        file.set_len(len)?;
        Ok(FileBackend { file, len, path: path.to_path_buf() })
    }
}

impl Backend for FileBackend {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// A namespace in the memory of a roce device (lost when the target
/// stops): a buffer registered with the device, whose bytes the target
/// sends from and receives into by RDMA with no copy (see
/// [`Backend::region`]). Every other access goes through the device's
/// lock ([`Mr::read`], [`Mr::write`]), so it never runs against the NIC's;
/// such calls must not come from inside [`Mr::with_bytes_mut`] (which holds
/// that lock), and so the back-end does not claim
/// [`never_blocks`](Backend::never_blocks).
pub struct DeviceMem {
    mr: Mr,
}

impl DeviceMem {
    /// `len` zero bytes registered with `dev` (its own protection domain;
    /// local access only: the hosts reach it through the target's RDMA).
    pub fn new(dev: &Device, len: u64) -> roce::Result<DeviceMem> {
        let len = usize::try_from(len)
            .map_err(|_| roce::Error::Config(format!("{len} bytes do not fit in memory")))?;
        let buf = try_alloc_buffer(len).ok_or_else(|| {
            roce::Error::Config(format!("cannot allocate {len} bytes of memory for a namespace"))
        })?;
        let pd = dev.alloc_pd()?;
        let mr = pd.reg_mr(buf, Access::LOCAL_WRITE)?;
        Ok(DeviceMem { mr })
    }

    /// A copy of the bytes at `offset` (for tests and checks).
    pub fn snapshot(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read_at(offset, &mut v)?;
        Ok(v)
    }
}

/// The device's errors as I/O errors: out of range as the memory back-end
/// says it, the rest (a dead device) as they are.
fn mr_error(e: roce::Error) -> io::Error {
    match e {
        roce::Error::Verbs(roce::VerbsError::OutsideRegion { .. }) => {
            io::Error::new(io::ErrorKind::UnexpectedEof, "past the end of the namespace")
        }
        e => io::Error::other(e.to_string()),
    }
}

impl Backend for DeviceMem {
    fn len(&self) -> u64 {
        self.mr.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        self.mr.read(at, buf).map_err(mr_error)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let at = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        self.mr.write(at, buf).map_err(mr_error)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let at = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let n = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        self.mr.fill(at, n, 0).map_err(mr_error)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        "memory (registered)".to_string()
    }
    fn region(&self) -> Option<&Arc<MemBuf>> {
        Some(self.mr.buf())
    }
}

/// A namespace in memory (lost when the target stops).
pub struct MemBackend {
    bytes: RwLock<Vec<u8>>,
}

impl MemBackend {
    pub fn new(len: u64) -> MemBackend {
        MemBackend { bytes: RwLock::new(vec![0u8; len as usize]) }
    }

    /// A copy of the bytes at `offset` (for tests and checks).
    pub fn snapshot(&self, offset: u64, len: usize) -> Vec<u8> {
        let b = self.bytes.read().unwrap_or_else(|e| e.into_inner());
        b[offset as usize..offset as usize + len].to_vec()
    }
}

fn range(len: usize, offset: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    match start.checked_add(n) {
        Some(end) if end <= len => Ok(start..end),
        _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past the end of the namespace")),
    }
}

impl Backend for MemBackend {
    fn len(&self) -> u64 {
        self.bytes.read().unwrap_or_else(|e| e.into_inner()).len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let b = self.bytes.read().unwrap_or_else(|e| e.into_inner());
        buf.copy_from_slice(&b[range(b.len(), offset, buf.len())?]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut b = self.bytes.write().unwrap_or_else(|e| e.into_inner());
        let r = range(b.len(), offset, buf.len())?;
        b[r].copy_from_slice(buf);
        Ok(())
    }
    fn never_blocks(&self) -> bool {
        true
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_namespace_reads_back_and_refuses_the_end() {
        let dir = std::env::temp_dir().join(format!("roce-nvmf-ns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("disk.img");
        let f = FileBackend::create(&p, 8192).unwrap();
        f.write_at(4096, b"hello").unwrap();
        f.write_zeroes(4097, 2).unwrap();
        let g = FileBackend::open(&p).unwrap();
        assert_eq!(g.len(), 8192);
        let mut b = [0u8; 5];
        g.read_at(4096, &mut b).unwrap();
        assert_eq!(&b, b"h\0\0lo");
        assert!(g.read_at(8190, &mut b).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        let m = MemBackend::new(100);
        assert!(m.write_at(98, b"abc").is_err());
        m.write_at(97, b"abc").unwrap();
        assert_eq!(m.snapshot(97, 3), b"abc");
    }
}
