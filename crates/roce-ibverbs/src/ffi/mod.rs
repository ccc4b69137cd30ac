//! The `ibv_*` entry points and the ops tables, one file per object
//! family:
//!
//! * `context`: the device list, contexts, the ops tables and the device,
//!   port, GID and P_Key queries;
//! * `pd_mr`: protection domains and memory regions;
//! * `cq`: completion queues and completion channels;
//! * `qp`: queue pairs; `wr`: reading and posting work requests;
//! * `srq`: shared receive queues; `ah`: address handles and vectors;
//! * `async_events`: a context's async events;
//! * `misc`: fork support, string tables, verbs the device lacks, the
//!   import of kernel objects; `rates`: the static-rate conversions.
//!
//! This file holds what they share: the return conventions, the errno of
//! each error, and the conversions from the program's pointers.
//!
//! # Safety argument
//!
//! This module is the library's boundary with C; its `unsafe` is of three
//! kinds, each resting on the verbs contract the calling program keeps
//! (the one rdma-core documents for the same calls):
//!
//! 1. Object pointers. Every object the library hands out (`ibv_context`,
//!    `ibv_pd`, `ibv_mr`, `ibv_cq`, `ibv_comp_channel`, `ibv_qp`,
//!    `ibv_srq`, `ibv_ah`) lies in a `Box`ed `#[repr(C)]` wrapper
//!    (`objects`), made by `Handle::new` and freed only by the matching
//!    destroy call, so a pointer the program passes back leads to its
//!    wrapper (`handle`, which keeps the provenance and aliasing rules)
//!    and is valid until it destroys the object, which it must not use
//!    afterwards nor destroy twice. NULL is refused with `EINVAL`. The
//!    structure the program sees is read and written only through raw
//!    pointers (`CPart::get`): the program may write it. The library's
//!    records (a CQ's queued events, a context's objects by number) hold
//!    `Handle`s or reference-counted state, and drop a handle before its
//!    object is freed. Devices live for the whole process.
//! 2. Argument structures (`ibv_qp_attr`, `ibv_send_wr` lists, SGE arrays,
//!    `ibv_wc` arrays, out-parameters): valid for reads (or writes) of the
//!    declared type, and arrays of the declared length, for the call.
//! 3. Registered memory: `ibv_reg_mr` wraps the program's buffer in a
//!    `MemBuf` (`MemBuf::from_raw_parts`), whose contract is the one verbs
//!    gives a program: the bytes stay allocated until `ibv_dereg_mr`, and
//!    the program touches bytes a work request is using only as verbs
//!    allow (the engine alone reads and writes them, under the device
//!    lock; the library never makes a Rust reference to them). `regions`
//!    keeps one range from being registered with two devices at once.
//!
//! No panic crosses the boundary: every entry point runs its body under
//! `catch_unwind` and turns a panic into `EIO` (or a NULL/-1 return).

use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use libc::{EBUSY, EINVAL, EIO, ENOMEM};

use crate::abi::*;
use crate::handle::{CObject, Handle};
use crate::objects::*;
use crate::sys::set_errno;

type R<T> = Result<T, c_int>;

/// Runs `f`: 0 or the errno it returned (the convention of most verbs).
fn ret_errno(f: impl FnOnce() -> R<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e,
        Err(_) => EIO,
    }
}

/// Runs `f`: 0, or -1 with `errno` set.
fn ret_minus1(f: impl FnOnce() -> R<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(EIO);
            -1
        }
    }
}

/// Runs `f`: its pointer, or NULL with `errno` set.
fn ret_ptr<T>(f: impl FnOnce() -> R<*mut T>) -> *mut T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            set_errno(e);
            null_mut()
        }
        Err(_) => {
            set_errno(EIO);
            null_mut()
        }
    }
}

/// The errno rdma-core's providers give for the same failure.
fn errno_of(e: &roce::Error) -> c_int {
    use roce::Error;
    use roce_proto::VerbsError;
    match e {
        Error::Verbs(v) => match v {
            VerbsError::QueueFull(_) | VerbsError::NoResources(_) => ENOMEM,
            VerbsError::InUse(_) => EBUSY,
            VerbsError::CqOverflow => libc::EOVERFLOW,
            _ => EINVAL,
        },
        Error::Io(io) => io.raw_os_error().unwrap_or(EIO),
        Error::Timeout(_) => libc::ETIMEDOUT,
        Error::Config(_) => EINVAL,
        _ => EIO,
    }
}

fn err(e: roce::Error) -> c_int {
    errno_of(&e)
}

/// The wrapper behind a program's pointer (point 1).
///
/// # Safety
/// `p` is NULL or the program's pointer to a live `W` (point 1).
unsafe fn obj<'a, W: CObject>(p: *mut W::C) -> R<&'a W> {
    // SAFETY: the caller's promise.
    Ok(unsafe { handle::<W>(p)?.get() })
}

/// The handle behind a program's pointer.
///
/// # Safety
/// `p` is NULL or the program's pointer to a `W` (point 1).
unsafe fn handle<W: CObject>(p: *mut W::C) -> R<Handle<W>> {
    // SAFETY: the caller's promise.
    unsafe { Handle::from_c(p) }.ok_or(EINVAL)
}

/// The wrapper of an `ibv_context`.
///
/// # Safety
/// As [`obj`]'s.
unsafe fn ctx_obj<'a>(ctx: *mut ibv_context) -> R<&'a ContextObj> {
    // SAFETY: the caller's promise.
    unsafe { obj(ctx) }
}

/// A new object: the pointer the program will hold.
fn boxed<W: CObject>(w: W) -> *mut W::C {
    Handle::new(w).to_c()
}

/// A wrapper of an object made in a PD, which counts it among its users.
trait InPd: CObject {
    fn pd(&self) -> Handle<PdObj>;
}

macro_rules! in_pd {
    ($($t:ty),*) => {$(
        impl InPd for $t {
            fn pd(&self) -> Handle<PdObj> {
                self.pd
            }
        }
    )*};
}
in_pd!(MrObj, AhObj, SrqObj, QpObj);

/// Frees `p`, a `W` made in a PD, and takes it off the PD's users.
///
/// # Safety
/// `p` is NULL or the program's pointer to a live `W`, which nothing uses
/// afterwards (the program's destroy call).
unsafe fn free_in_pd<W: InPd>(p: *mut W::C) -> R<()> {
    // SAFETY: the caller's promise.
    let h = unsafe { handle::<W>(p) }?;
    // SAFETY: alive until freed below.
    let pd = unsafe { h.get() }.pd();
    // SAFETY: freed once; nothing of it is used afterwards.
    unsafe { h.free() };
    // SAFETY: a PD outlives what was made in it (its dealloc fails while
    // it has users).
    unsafe { pd.get() }.users.fetch_sub(1, Ordering::AcqRel);
    Ok(())
}

/// Field `$f` of wrapper `$w`'s C part, read through its raw pointer:
/// the library set it when the object was made, and the program does not
/// write it during a call (point 1).
macro_rules! c_field {
    ($w:expr, $f:ident) => {{
        let p = $w.ibv.get();
        // (Also used inside `unsafe` blocks.)
        #[allow(unused_unsafe)]
        // SAFETY: a live wrapper's C part; a plain read of one field.
        let v = unsafe { (*p).$f };
        v
    }};
}

fn c_name<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

pub(crate) use context::device_count;

mod ah;
mod async_events;
mod cm;
mod context;
mod cq;
mod misc;
mod pd_mr;
mod qp;
mod rates;
mod srq;
mod wr;
