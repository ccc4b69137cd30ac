//! Namespace back-ends: where a namespace's blocks live (a file, a block
//! device, or memory).

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

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
