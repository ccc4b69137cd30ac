//! The uverbs device node that verbs middleware looks for before it
//! opens a device. UCX (1.13, `uct_ib_device_is_accessible`) lists an
//! `ibv_device` only if `stat("/dev/infiniband/" + dev->dev_name)`
//! succeeds with a readable mode: with the kernel's uverbs that node is the
//! device's command character device (major 231, minor 192 + index). This
//! library's devices have no kernel node, and the path's directory is the
//! kernel's, so the library answers for it: it exports `stat` (the
//! `stat@GLIBC_2.33` programs built against glibc 2.33 and later bind,
//! UCX's among them) which, when the kernel has no such file, describes
//! `/dev/infiniband/uverbsN` for each of the library's devices N as that
//! character device, mode 0666, and `access` (UCX then checks
//! `access(path, R_OK | W_OK)`) grants read and write on it; every other
//! path, and every path the kernel has, is the kernel's answer
//! (`fstatat` and `faccessat`, what glibc's `stat` and `access` call). It takes effect where the library is loaded ahead of libc
//! (`LD_PRELOAD`, as `roce exec` does); the program then opens the device
//! through `ibv_open_device`, never through the node.
//!
//! Safety: `path` is the caller's NUL-terminated string and `buf` its
//! `struct stat`, valid for writes, for the call (the contract of
//! stat(2) and access(2)); the library reads the one and writes the other
//! only then.

use std::ffi::{c_char, c_int, CStr};

use crate::sys::set_errno;

/// The uverbs character devices' major number and first minor (the
/// kernel's `IB_UVERBS_MAJOR`, `IB_UVERBS_BASE_MINOR`).
const UVERBS_MAJOR: u32 = 231;
const UVERBS_BASE_MINOR: u32 = 192;

/// The library's device index that `path` names as its uverbs node, if any.
pub(crate) fn node_index(path: &[u8], devices: usize) -> Option<usize> {
    let n = path.strip_prefix(b"/dev/infiniband/uverbs")?;
    if n.is_empty() || n.len() > 3 || !n.iter().all(u8::is_ascii_digit) || (n.len() > 1 && n[0] == b'0') {
        return None;
    }
    let i: usize = std::str::from_utf8(n).ok()?.parse().ok()?;
    (i < devices).then_some(i)
}

/// The device index of `path` if the kernel answered ENOENT or ENOTDIR for
/// it (`errno`) and it names one of the library's uverbs nodes.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn ours(path: *const c_char, errno: c_int) -> Option<usize> {
    if path.is_null() || (errno != libc::ENOENT && errno != libc::ENOTDIR) {
        return None;
    }
    // SAFETY: a NUL-terminated string (the caller's promise).
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    std::panic::catch_unwind(|| node_index(p, crate::ffi::device_count())).ok().flatten()
}

fn last_errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// access(2), with the library's uverbs nodes: read and write granted,
/// execute refused (`EACCES`), as for a mode 0666 device.
///
/// # Safety
/// As access(2): `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on as they came.
    let r = unsafe { libc::faccessat(libc::AT_FDCWD, path, mode, 0) };
    if r == 0 {
        return r;
    }
    let errno = last_errno();
    // SAFETY: the caller's string (access's contract).
    if unsafe { ours(path, errno) }.is_none() {
        set_errno(errno);
        return r;
    }
    if mode & libc::X_OK != 0 {
        set_errno(libc::EACCES);
        return -1;
    }
    0
}

/// stat(2), with the library's uverbs nodes (see the module's comment).
///
/// # Safety
/// As stat(2): `path` a NUL-terminated string, `buf` a writable `stat`.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: the caller's arguments, passed on as they came.
    let r = unsafe { libc::fstatat(libc::AT_FDCWD, path, buf, 0) };
    if r == 0 || buf.is_null() {
        return r;
    }
    let errno = last_errno();
    // SAFETY: the caller's string (stat's contract).
    let Some(index) = (unsafe { ours(path, errno) }) else {
        set_errno(errno);
        return r;
    };
    // SAFETY: all-zero is a valid `stat` (plain integers).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_mode = libc::S_IFCHR | 0o666;
    st.st_nlink = 1;
    st.st_rdev = libc::makedev(UVERBS_MAJOR, UVERBS_BASE_MINOR + index as u32);
    st.st_blksize = 4096;
    // SAFETY: `buf` is writable for one `stat` (stat's contract).
    unsafe { buf.write(st) };
    0
}

#[cfg(test)]
mod tests {
    use super::node_index;

    #[test]
    fn only_the_librarys_uverbs_nodes_are_named() {
        assert_eq!(node_index(b"/dev/infiniband/uverbs0", 1), Some(0));
        assert_eq!(node_index(b"/dev/infiniband/uverbs1", 2), Some(1));
        assert_eq!(node_index(b"/dev/infiniband/uverbs1", 1), None);
        assert_eq!(node_index(b"/dev/infiniband/uverbs01", 2), None);
        assert_eq!(node_index(b"/dev/infiniband/uverbs", 1), None);
        assert_eq!(node_index(b"/dev/infiniband/uverbs0/x", 1), None);
        assert_eq!(node_index(b"/dev/infiniband/rdma_cm", 1), None);
        assert_eq!(node_index(b"/dev/null", 1), None);
    }
}
