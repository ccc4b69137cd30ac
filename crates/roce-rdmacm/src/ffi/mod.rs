//! The `rdma_*` entry points (and the rsocket ones), a file per family:
//!
//! * `ids`: event channels, ids, addresses and routes, options, events;
//! * `conn`: listen, connect, accept, reject, disconnect, establish,
//!   `rdma_init_qp_attr`, ECE;
//! * `qp`: QPs, SRQs and endpoints (`rdma_create_ep`, `rdma_get_request`);
//! * `info`: `rdma_getaddrinfo`;
//! * `unsupported`: multicast, and the rsocket calls.
//!
//! # Safety argument
//! This module is the library's boundary with C. Its `unsafe` rests on
//! the librdmacm contract the calling program keeps (rdma-core's, for the
//! same calls): every `rdma_cm_id` and `rdma_event_channel` pointer passed
//! in was returned by this library and not yet destroyed (they are the
//! first fields of boxed [`IdObj`]/[`ChannelObj`], freed only by the
//! destroy calls; a pointer that is not, stale or foreign, is refused
//! with `EINVAL` before it is read: `id::LIVE`); every event pointer came from `rdma_get_cm_event` and
//! is acknowledged once; argument structures are valid for reads (or
//! writes) of their declared C type for the call. NULL is refused with
//! `EINVAL`. No panic crosses the boundary: bodies run under
//! `catch_unwind`, a panic becoming `EIO`.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;

use crate::abi::*;
use crate::id::{ChannelObj, IdObj};
use crate::sys::set_errno;

type R<T> = Result<T, c_int>;

/// 0, or -1 with `errno` set (librdmacm's convention).
fn ret(f: impl FnOnce() -> R<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(libc::EIO);
            -1
        }
    }
}

/// A pointer, or NULL with `errno` set.
fn ret_ptr<T>(f: impl FnOnce() -> R<*mut T>) -> *mut T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            set_errno(e);
            null_mut()
        }
        Err(_) => {
            set_errno(libc::EIO);
            null_mut()
        }
    }
}

/// The object behind a program's id pointer.
///
/// # Safety
/// The module's argument: NULL or a live id of this library.
unsafe fn id_obj<'a>(id: *mut rdma_cm_id) -> R<&'a IdObj> {
    let p = id.cast::<IdObj>();
    if !crate::id::LIVE.id(p) {
        // NULL, or not an id of ours that is still alive (one the
        // program destroyed): refused before it is read.
        return Err(libc::EINVAL);
    }
    // SAFETY: the C part is the first field of a live boxed IdObj.
    unsafe { p.as_ref() }.ok_or(libc::EINVAL)
}

/// The object behind a program's channel pointer.
///
/// # Safety
/// As [`id_obj`]'s.
unsafe fn chan_obj<'a>(ch: *mut rdma_event_channel) -> R<&'a ChannelObj> {
    let p = ch.cast::<ChannelObj>();
    if !crate::id::LIVE.channel(p) {
        return Err(libc::EINVAL);
    }
    // SAFETY: as `id_obj`.
    unsafe { p.as_ref() }.ok_or(libc::EINVAL)
}

/// Registers the CM handler with roce's libibverbs once.
fn cm_ready() -> R<()> {
    static DONE: std::sync::OnceLock<R<()>> = std::sync::OnceLock::new();
    *DONE.get_or_init(|| crate::backend::set_handler(crate::id::on_cm_event))
}

mod conn;
mod ids;
mod info;
mod qp;
mod unsupported;
