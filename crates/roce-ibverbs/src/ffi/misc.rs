//! Fork support, the string tables, and the verbs the device lacks.

use std::ffi::{c_char, c_int, c_void, CStr};

use libc::{EINVAL, EIO, ENOSYS, EOPNOTSUPP};

use super::ret_minus1;
use crate::abi::*;
use crate::sys::set_errno;

#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    // The library pins no pages and shares none with a kernel driver:
    // fork needs no preparation.
    0
}

/// `IBV_FORK_UNNEEDED`.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

macro_rules! strings {
    ($name:ident, $unknown:literal, [$($s:literal),* $(,)?]) => {
        #[no_mangle]
        pub extern "C" fn $name(v: c_int) -> *const c_char {
            const S: &[&CStr] = &[$($s),*];
            usize::try_from(v).ok().and_then(|i| S.get(i)).copied().unwrap_or($unknown).as_ptr()
        }
    };
}

strings!(
    ibv_wc_status_str,
    c"unknown",
    [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM rendezvous pending",
    ]
);
strings!(
    ibv_node_type_str,
    c"unknown",
    [
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ]
);
strings!(
    ibv_port_state_str,
    c"invalid state",
    [c"no state change (NOP)", c"down", c"init", c"armed", c"active", c"active deferred",]
);
strings!(
    ibv_event_type_str,
    c"unknown",
    [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ]
);

/// Not supported: fail with the errno rdma-core uses for a verb a device
/// lacks.
#[no_mangle]
pub extern "C" fn ibv_attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_rereg_mr(
    _mr: *mut ibv_mr,
    _flags: c_int,
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _len: usize,
    _access: c_int,
) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _ctx: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    ENOSYS
}

/// `ibv_get_sysfs_path`: no sysfs tree is used.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// `ibv_read_sysfs_file`: reads `dir/file` into `buf` (NUL-terminated,
/// trailing newline dropped) and returns its length: the paths the library
/// gives its devices exist nowhere, so their reads fail with ENOENT.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    let mut len = 0usize;
    let r = ret_minus1(|| {
        use std::os::unix::ffi::OsStrExt;
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return Err(EINVAL);
        }
        // SAFETY: NUL-terminated strings from the caller.
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(d.to_bytes()))
            .join(std::ffi::OsStr::from_bytes(f.to_bytes()));
        let data = std::fs::read(path).map_err(|e| e.raw_os_error().unwrap_or(EIO))?;
        let mut n = data.len().min(size - 1);
        if n > 0 && data[n - 1] == b'\n' {
            n -= 1;
        }
        // SAFETY: `buf` holds `size` bytes (point 2); n < size.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
        len = n;
        Ok(())
    });
    if r == 0 {
        len as c_int
    } else {
        r
    }
}

/// `ibv_import_device`: a context from another process's command fd. As
/// rdma-core: `EINVAL` unless `cmd_fd` is a character device, `ENODEV`
/// when it is no device's (none of this library's devices has a kernel
/// character device).
#[no_mangle]
pub extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    // SAFETY: fstat writes only the `stat` it is given.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::fstat(cmd_fd, &mut st) };
    let chr = r == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFCHR;
    set_errno(if chr { libc::ENODEV } else { EINVAL });
    std::ptr::null_mut()
}

/// `ibv_import_pd`, `ibv_import_mr`, `ibv_import_dm`: objects shared
/// through a kernel context, which this library's contexts are not (none
/// can be imported): NULL with `EOPNOTSUPP`, rdma-core's answer for a
/// provider without import (`dummy_ops.c`).
#[no_mangle]
pub extern "C" fn ibv_import_pd(_ctx: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    set_errno(EOPNOTSUPP);
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    set_errno(EOPNOTSUPP);
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn ibv_import_dm(_ctx: *mut ibv_context, _handle: u32) -> *mut c_void {
    set_errno(EOPNOTSUPP);
    std::ptr::null_mut()
}

/// The unimports: nothing was imported, so nothing is released (rdma-core's
/// `dummy_ops.c` does the same).
#[no_mangle]
pub extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}

#[no_mangle]
pub extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}

#[no_mangle]
pub extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

/// `ibv_reg_dmabuf_mr`: registering a dma-buf needs a kernel importer
/// (device memory behind a file descriptor), which the engine is not:
/// NULL with `EOPNOTSUPP`, as rdma-core's `dummy_ops.c`.
#[no_mangle]
pub extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_query_qp_data_in_order`: 0, "not guaranteed", rdma-core's answer
/// where the provider does not say (`dummy_ops.c`). The engine places a
/// message's packets in PSN order, but promises nothing about when the
/// program's CPU sees the bytes before the completion.
#[no_mangle]
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}
