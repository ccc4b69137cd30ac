//! fio's side of the engine interface, as fio 3.33 (Debian 12's) lays it
//! out on 64-bit Linux: `struct ioengine_ops` (which we fill and fio
//! reads), and the leading fields of `struct io_u` and `struct fio_file`
//! (which fio owns and we read or write a few fields of). fio has no
//! installed headers, so the layouts are written here from its
//! `ioengines.h`, `io_u.h` and `file.h`, each offset pinned by a constant
//! assertion below. fio checks the ops table's version
//! ([`FIO_IOOPS_VERSION`]); [`check_fio_version`] also refuses a fio whose
//! `io_u`/`fio_file` may be laid out otherwise.
//!
//! # Safety argument
//!
//! This is the only module that touches fio's memory. Every pointer it
//! takes comes from fio as an argument of an engine callback, and fio's
//! contract for those is what makes each access sound:
//!
//! * An `io_u` passed to `queue` stays allocated and is not touched by fio
//!   (it is flagged `IO_U_F_FLIGHT`) until the engine hands it back from
//!   `event` after `getevents`; its `xfer_buf` holds `xfer_buflen` bytes
//!   of fio's own buffer. [`IoUnit`] is built only from such pointers (in
//!   `queue`, and in `getevents` from the handle `queue` recorded), and
//!   only one `IoUnit` for an `io_u` exists at a time, so the `&mut [u8]`
//!   it lends is the only reference to those bytes.
//! * A `fio_file` passed to `open_file`/`get_file_size`/`close_file`, and
//!   an `io_u`'s `file`, stay allocated for the job's life; `file_name` is
//!   a NUL-terminated string fio allocated. We write only
//!   `real_file_size`, as fio asks of `get_file_size`.
//! * All callbacks of one job (one `thread_data`) run on that job's
//!   thread, so none of these fields is written by fio while we read it.
//!
//! Nothing else is dereferenced: `thread_data` is only a key.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::mem::offset_of;

/// `FIO_IOOPS_VERSION` of fio 3.33: fio refuses an ops table of another.
pub const FIO_IOOPS_VERSION: c_int = 31;

/// `enum fio_q_status`.
pub const FIO_Q_COMPLETED: c_int = 0;
pub const FIO_Q_QUEUED: c_int = 1;
pub const FIO_Q_BUSY: c_int = 2;

/// `enum fio_ioengine_flags` we set: no local file behind the name (fio
/// must not create or lay one out), raw I/O with nothing to extend, no
/// disk-utilisation stats for the name, and aligned buffers.
pub const FIO_DISKLESSIO: c_int = 1 << 2;
pub const FIO_RAWIO: c_int = 1 << 1;
pub const FIO_NOEXTEND: c_int = 1 << 3;
pub const FIO_NODISKUTIL: c_int = 1 << 4;
pub const FIO_MEMALIGN: c_int = 1 << 9;

/// `enum fio_ddir`.
pub mod ddir {
    pub const READ: i32 = 0;
    pub const WRITE: i32 = 1;
    pub const TRIM: i32 = 2;
    pub const SYNC: i32 = 3;
    pub const DATASYNC: i32 = 4;
    pub const SYNC_FILE_RANGE: i32 = 5;
}

/// `struct thread_data`: opaque (a key).
#[repr(C)]
pub struct ThreadData {
    _private: [u8; 0],
}

type TdFn = unsafe extern "C" fn(*mut ThreadData) -> c_int;
type TdVoidFn = unsafe extern "C" fn(*mut ThreadData);
type IoUFn = unsafe extern "C" fn(*mut ThreadData, *mut IoU) -> c_int;
type FileFn = unsafe extern "C" fn(*mut ThreadData, *mut FioFile) -> c_int;
/// A slot we never fill (zoned-device calls, iomem hooks).
type Unused = Option<unsafe extern "C" fn()>;

/// `struct ioengine_ops` (ioengines.h).
#[repr(C)]
pub struct IoengineOps {
    pub list: [*mut c_void; 2],
    pub name: *const c_char,
    pub version: c_int,
    pub flags: c_int,
    pub dlhandle: *mut c_void,
    pub setup: Option<TdFn>,
    pub init: Option<TdFn>,
    pub post_init: Option<TdFn>,
    pub prep: Option<IoUFn>,
    pub queue: Option<IoUFn>,
    pub commit: Option<TdFn>,
    pub getevents:
        Option<unsafe extern "C" fn(*mut ThreadData, c_uint, c_uint, *const libc::timespec) -> c_int>,
    pub event: Option<unsafe extern "C" fn(*mut ThreadData, c_int) -> *mut IoU>,
    pub errdetails: Option<unsafe extern "C" fn(*mut IoU) -> *mut c_char>,
    pub cancel: Option<IoUFn>,
    pub cleanup: Option<TdVoidFn>,
    pub open_file: Option<FileFn>,
    pub close_file: Option<FileFn>,
    pub invalidate: Option<FileFn>,
    pub unlink_file: Option<FileFn>,
    pub get_file_size: Option<FileFn>,
    pub prepopulate_file: Option<FileFn>,
    pub terminate: Option<TdVoidFn>,
    pub iomem_alloc: Unused,
    pub iomem_free: Unused,
    pub io_u_init: Option<IoUFn>,
    pub io_u_free: Unused,
    pub get_zoned_model: Unused,
    pub report_zones: Unused,
    pub reset_wp: Unused,
    pub get_max_open_zones: Unused,
    pub option_struct_size: c_int,
    pub options: *mut c_void,
}

/// The leading fields of `struct io_u` (io_u.h), up to the engine's
/// private word.
#[repr(C)]
pub struct IoU {
    start_time: libc::timespec,
    issue_time: libc::timespec,
    file: *mut FioFile,
    flags: c_uint,
    ddir: c_int,
    acct_ddir: c_int,
    numberio: u16,
    ioprio: u16,
    clat_prio_index: u16,
    buflen: c_ulonglong,
    offset: c_ulonglong,
    verify_offset: c_ulonglong,
    buf: *mut c_void,
    rand_seed: u64,
    xfer_buf: *mut c_void,
    xfer_buflen: c_ulonglong,
    buf_filled_len: c_ulonglong,
    ipo: *mut c_void,
    resid: c_ulonglong,
    error: c_uint,
    engine_data: *mut c_void,
}

/// The leading fields of `struct fio_file` (file.h), up to the size.
#[repr(C)]
pub struct FioFile {
    hash_list: [*mut c_void; 2],
    filetype: c_int,
    fd: c_int,
    shadow_fd: c_int,
    major: c_uint,
    minor: c_uint,
    fileno: c_int,
    file_name: *mut c_char,
    real_file_size: u64,
}

// The offsets fio 3.33 compiles to on x86-64 and aarch64 Linux.
const _: () = {
    assert!(offset_of!(IoengineOps, name) == 16);
    assert!(offset_of!(IoengineOps, setup) == 40);
    assert!(offset_of!(IoengineOps, queue) == 72);
    assert!(offset_of!(IoengineOps, get_file_size) == 160);
    assert!(offset_of!(IoengineOps, io_u_init) == 200);
    assert!(offset_of!(IoengineOps, option_struct_size) == 248);
    assert!(offset_of!(IoengineOps, options) == 256);
    assert!(offset_of!(IoU, file) == 32);
    assert!(offset_of!(IoU, ddir) == 44);
    assert!(offset_of!(IoU, buflen) == 64);
    assert!(offset_of!(IoU, offset) == 72);
    assert!(offset_of!(IoU, xfer_buf) == 104);
    assert!(offset_of!(IoU, xfer_buflen) == 112);
    assert!(offset_of!(IoU, resid) == 136);
    assert!(offset_of!(IoU, error) == 144);
    assert!(offset_of!(IoU, engine_data) == 152);
    assert!(offset_of!(FioFile, file_name) == 40);
    assert!(offset_of!(FioFile, real_file_size) == 48);
};

/// The fio versions whose `io_u` and `fio_file` start as above.
const KNOWN_FIO: &[&str] = &["fio-3.33"];

/// Refuses to run inside a fio whose structures may differ from the ones
/// above (fio exports its version string).
pub fn check_fio_version() -> Result<(), String> {
    // SAFETY: dlsym with a NUL-terminated name; the symbol, where the
    // executable exports it, is fio's `const char fio_version_string[]`.
    let s = unsafe {
        let p = libc::dlsym(libc::RTLD_DEFAULT, c"fio_version_string".as_ptr());
        if p.is_null() {
            return Err("not inside fio (no fio_version_string): load this library with fio's \
                        ioengine=external:PATH"
                .into());
        }
        CStr::from_ptr(p as *const c_char).to_string_lossy().into_owned()
    };
    if KNOWN_FIO.iter().any(|k| s == *k || s.starts_with(&format!("{k}-"))) {
        Ok(())
    } else {
        Err(format!(
            "built for the structure layouts of {} and this is {s}: its io_u may differ, so the engine refuses to run",
            KNOWN_FIO.join(", ")
        ))
    }
}

/// An `io_u` fio lent us (see the safety argument above).
pub struct IoUnit(*mut IoU);

impl IoUnit {
    /// # Safety
    /// `p` is an `io_u` fio passed to `queue` and has not yet been handed
    /// back from `event`, and no other `IoUnit` for it is alive.
    pub unsafe fn from_raw(p: *mut IoU) -> Option<IoUnit> {
        (!p.is_null()).then_some(IoUnit(p))
    }

    pub fn handle(&self) -> usize {
        self.0 as usize
    }

    pub fn ddir(&self) -> i32 {
        // SAFETY: a live io_u (from_raw's contract).
        unsafe { (*self.0).ddir }
    }

    /// The transfer's byte offset in the file.
    pub fn offset(&self) -> u64 {
        // SAFETY: as in `ddir`.
        unsafe { (*self.0).offset }
    }

    pub fn len(&self) -> u64 {
        // SAFETY: as in `ddir`.
        unsafe { (*self.0).xfer_buflen }
    }

    /// Its file, as a key.
    pub fn file(&self) -> usize {
        // SAFETY: as in `ddir`.
        unsafe { (*self.0).file as usize }
    }

    /// The result fio reads: 0 or an errno, with no bytes left over.
    pub fn set_result(&mut self, errno: i32) {
        // SAFETY: as in `ddir`; fio reads these after `event`.
        unsafe {
            (*self.0).error = errno as c_uint;
            (*self.0).resid = if errno == 0 { 0 } else { (*self.0).xfer_buflen };
        }
    }

    /// fio's buffer for this transfer.
    pub fn buffer(&mut self) -> &mut [u8] {
        // SAFETY: `xfer_buf` holds `xfer_buflen` bytes fio leaves to the
        // engine while the io_u is in flight; `&mut self` makes this the
        // only borrow of them.
        unsafe {
            let u = &*self.0;
            if u.xfer_buf.is_null() || u.xfer_buflen == 0 {
                return &mut [];
            }
            std::slice::from_raw_parts_mut(u.xfer_buf as *mut u8, u.xfer_buflen as usize)
        }
    }
}

/// A `fio_file` fio lent us.
pub struct File(*mut FioFile);

impl File {
    /// # Safety
    /// `p` is a `fio_file` fio passed to a file callback (or an `io_u`'s).
    pub unsafe fn from_raw(p: *mut FioFile) -> Option<File> {
        (!p.is_null()).then_some(File(p))
    }

    pub fn key(&self) -> usize {
        self.0 as usize
    }

    pub fn name(&self) -> String {
        // SAFETY: fio's NUL-terminated file name, or null.
        unsafe {
            let n = (*self.0).file_name;
            if n.is_null() {
                String::new()
            } else {
                CStr::from_ptr(n).to_string_lossy().into_owned()
            }
        }
    }

    pub fn set_size(&mut self, bytes: u64) {
        // SAFETY: the file fio passed; it asks the engine for this field.
        unsafe { (*self.0).real_file_size = bytes }
    }
}

/// `malloc`ed copy of `s` (fio `free`s what `errdetails` returns).
pub fn c_string(s: &str) -> *mut c_char {
    let c = std::ffi::CString::new(s.replace('\0', " ")).unwrap_or_default();
    // SAFETY: strdup of a valid C string; null on allocation failure,
    // which fio prints as "(null)".
    unsafe { libc::strdup(c.as_ptr()) }
}
