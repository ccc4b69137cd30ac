//! `rdma_getaddrinfo`: the system's `getaddrinfo` for the node and
//! service, turned into an `rdma_addrinfo` as rdma-core's addrinfo.c does
//! without ibacm (the first address only; a passive lookup fills the
//! source address, an active one the destination, with the hints' source
//! kept; the QP type and port space from the hints, else from the socket
//! type: stream → RC over RDMA_PS_TCP, datagram → UD over RDMA_PS_UDP).

use std::ffi::{c_char, c_int};
use std::ptr::null_mut;

use crate::abi::*;

/// Copies a `sockaddr` of `len` bytes into a new allocation.
///
/// # Safety
/// `sa` is valid for `len` bytes.
unsafe fn dup_addr(sa: *const libc::sockaddr, len: libc::socklen_t) -> *mut libc::sockaddr {
    let len = len as usize;
    // SAFETY: a fresh buffer of `len` bytes.
    let p = unsafe { libc::malloc(len.max(1)) };
    if !p.is_null() {
        // SAFETY: both valid for `len` bytes, not overlapping.
        unsafe { std::ptr::copy_nonoverlapping(sa.cast::<u8>(), p.cast::<u8>(), len) };
    }
    p.cast()
}

#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
        crate::sys::set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the program's hints, valid for the call (or NULL).
    let h = unsafe { hints.as_ref() };
    let flags = h.map_or(0, |h| h.ai_flags);
    let hint_qp = h.map_or(0, |h| h.ai_qp_type);
    let hint_ps = h.map_or(0, |h| h.ai_port_space);
    // SAFETY: all-zero is a valid `addrinfo` (NULL pointers).
    let mut ai_hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    if flags & RAI_PASSIVE != 0 {
        ai_hints.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        ai_hints.ai_flags |= libc::AI_NUMERICHOST;
    }
    if flags & RAI_FAMILY != 0 {
        ai_hints.ai_family = h.map_or(0, |h| h.ai_family);
    }
    let dgram = hint_qp == IBV_QPT_UD || hint_ps == RDMA_PS_UDP;
    ai_hints.ai_socktype = if dgram { libc::SOCK_DGRAM } else { libc::SOCK_STREAM };
    ai_hints.ai_protocol = if dgram { libc::IPPROTO_UDP } else { libc::IPPROTO_TCP };
    let mut ai: *mut libc::addrinfo = null_mut();
    // SAFETY: NUL-terminated strings or NULL (the contract); `ai` written.
    let rc = unsafe { libc::getaddrinfo(node, service, &ai_hints, &mut ai) };
    if rc != 0 {
        // rdma-core returns getaddrinfo's own code (EAI_*).
        return rc;
    }
    // SAFETY: getaddrinfo succeeded: `ai` is a valid list.
    let first = unsafe { &*ai };
    let rai = Box::new(rdma_addrinfo {
        ai_flags: flags,
        ai_family: first.ai_family,
        ai_qp_type: if hint_qp != 0 {
            hint_qp
        } else if first.ai_socktype == libc::SOCK_DGRAM {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        },
        ai_port_space: if hint_ps != 0 {
            hint_ps
        } else if first.ai_protocol == libc::IPPROTO_UDP {
            RDMA_PS_UDP
        } else {
            RDMA_PS_TCP
        },
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: null_mut(),
        ai_dst_addr: null_mut(),
        ai_src_canonname: null_mut(),
        ai_dst_canonname: null_mut(),
        ai_route_len: 0,
        ai_route: null_mut(),
        ai_connect_len: 0,
        ai_connect: null_mut(),
        ai_next: null_mut(),
    });
    let rai = Box::into_raw(rai);
    // SAFETY: just made; `first.ai_addr` valid for `ai_addrlen` bytes; the
    // hints' source address for `ai_src_len`.
    unsafe {
        let copy = dup_addr(first.ai_addr, first.ai_addrlen);
        if flags & RAI_PASSIVE != 0 {
            (*rai).ai_src_addr = copy;
            (*rai).ai_src_len = first.ai_addrlen;
        } else {
            (*rai).ai_dst_addr = copy;
            (*rai).ai_dst_len = first.ai_addrlen;
            if let Some(h) = h.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len > 0) {
                (*rai).ai_src_addr = dup_addr(h.ai_src_addr, h.ai_src_len);
                (*rai).ai_src_len = h.ai_src_len;
            }
        }
        if !first.ai_canonname.is_null() {
            let name = libc::strdup(first.ai_canonname);
            if flags & RAI_PASSIVE != 0 {
                (*rai).ai_src_canonname = name;
            } else {
                (*rai).ai_dst_canonname = name;
            }
        }
        libc::freeaddrinfo(ai);
        *res = rai;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a list from rdma_getaddrinfo, freed once.
        let b = unsafe { Box::from_raw(p) };
        // SAFETY: malloc'd (or NULL) by rdma_getaddrinfo.
        unsafe {
            libc::free(b.ai_src_addr.cast());
            libc::free(b.ai_dst_addr.cast());
            libc::free(b.ai_src_canonname.cast());
            libc::free(b.ai_dst_canonname.cast());
            libc::free(b.ai_route);
            libc::free(b.ai_connect);
        }
        p = b.ai_next;
    }
}
