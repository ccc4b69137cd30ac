//! What the library does not do, failing as documented (README):
//!
//! * Multicast (`rdma_join_multicast[_ex]`): `ENOSYS`, the kernel CM's
//!   errno for a transport without multicast (cma.c `rdma_join_multicast`);
//!   `rdma_leave_multicast` of a group never joined is rdma-core's
//!   `EADDRNOTAVAIL`.
//! * rsockets: `rsocket` fails with `ENOSYS`, so no rsocket ever exists;
//!   every call given a socket number is `EBADF` (none is an rsocket).
//!   `rpoll` and `rselect` are `poll(2)` and `select(2)`, which is what
//!   rdma-core's do for descriptors that are not rsockets (rping,
//!   ucmatose, udaddy and cmtime import `rpoll`).

use std::ffi::{c_int, c_void};

use super::{id_obj, ret};
use crate::abi::*;

fn fail<T: From<i8>>(e: c_int) -> T {
    crate::sys::set_errno(e);
    T::from(-1)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    _ctx: *mut c_void,
) -> c_int {
    ret(|| {
        unsafe { id_obj(id) }?;
        unsafe { crate::addr::from_sockaddr(addr) }?;
        Err(libc::ENOSYS)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    _ctx: *mut c_void,
) -> c_int {
    ret(|| {
        unsafe { id_obj(id) }?;
        let a = unsafe { attr.as_ref() }.ok_or(libc::EINVAL)?;
        unsafe { crate::addr::from_sockaddr(a.addr) }?;
        Err(libc::ENOSYS)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    ret(|| {
        unsafe { id_obj(id) }?;
        unsafe { crate::addr::from_sockaddr(addr) }?;
        Err(libc::EADDRNOTAVAIL)
    })
}

#[no_mangle]
pub extern "C" fn rsocket(_domain: c_int, _type: c_int, _protocol: c_int) -> c_int {
    fail(libc::ENOSYS)
}

macro_rules! not_an_rsocket {
    ($($name:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {$(
        /// No rsocket exists (`rsocket` fails): `EBADF`.
        #[no_mangle]
        pub extern "C" fn $name(_socket: c_int, $($a: $t),*) -> $r {
            $( let _ = $a; )*
            fail(libc::EBADF)
        }
    )*};
}

not_an_rsocket! {
    rbind(addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int;
    rlisten(backlog: c_int) -> c_int;
    raccept(addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int;
    rconnect(addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int;
    rshutdown(how: c_int) -> c_int;
    rclose() -> c_int;
    rrecv(buf: *mut c_void, len: usize, flags: c_int) -> isize;
    rrecvfrom(buf: *mut c_void, len: usize, flags: c_int, src: *mut libc::sockaddr, alen: *mut libc::socklen_t) -> isize;
    rrecvmsg(msg: *mut libc::msghdr, flags: c_int) -> isize;
    rsend(buf: *const c_void, len: usize, flags: c_int) -> isize;
    rsendto(buf: *const c_void, len: usize, flags: c_int, dst: *const libc::sockaddr, alen: libc::socklen_t) -> isize;
    rsendmsg(msg: *const libc::msghdr, flags: c_int) -> isize;
    rread(buf: *mut c_void, count: usize) -> isize;
    rreadv(iov: *const libc::iovec, n: c_int) -> isize;
    rwrite(buf: *const c_void, count: usize) -> isize;
    rwritev(iov: *const libc::iovec, n: c_int) -> isize;
    rgetpeername(addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int;
    rgetsockname(addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int;
    rsetsockopt(level: c_int, name: c_int, val: *const c_void, len: libc::socklen_t) -> c_int;
    rgetsockopt(level: c_int, name: c_int, val: *mut c_void, len: *mut libc::socklen_t) -> c_int;
    riomap(buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: libc::off_t) -> libc::off_t;
    riounmap(buf: *mut c_void, len: usize) -> c_int;
}

/// `rfcntl(socket, cmd, ...)`: the variadic argument is not read (the
/// x86-64 and AArch64 calling conventions allow that).
#[no_mangle]
pub extern "C" fn rfcntl(_socket: c_int, _cmd: c_int) -> c_int {
    fail(libc::EBADF)
}

/// `riowrite` returns a `size_t`: `(size_t)-1` with `errno`.
#[no_mangle]
pub extern "C" fn riowrite(
    _socket: c_int,
    _buf: *const c_void,
    _count: usize,
    _offset: libc::off_t,
    _flags: c_int,
) -> usize {
    crate::sys::set_errno(libc::EBADF);
    usize::MAX
}

#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the program's array of `nfds` pollfds, as poll(2) takes it.
    unsafe { libc::poll(fds, nfds, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: the program's sets and timeout, as select(2) takes them.
    unsafe { libc::select(nfds, r, w, e, t) }
}
