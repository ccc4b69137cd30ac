//! The verbs library this one drives, found at run time.
//!
//! librdmacm makes QPs, CQs and PDs through libibverbs, and roce's CM
//! lives in roce's libibverbs (it shares the device's engine and its UDP
//! socket, where the CM messages arrive on QP 1). So this library calls
//! `libibverbs.so.1` — the one the program loaded, or loads it — through a
//! table of entry points looked up once. rdma-core's own libibverbs has
//! the `ibv_*` entry points but not roce's private CM ones (version node
//! `ROCE_PRIVATE`): then every call needing the CM fails with `ENOSYS`.
//!
//! # Safety argument
//! Each pointer in the table comes from `dlsym` on a library that stays
//! loaded for the life of the process (it is never `dlclose`d), under the
//! name of a function whose C prototype is the one its field declares
//! (rdma-core 44's `<infiniband/verbs.h>`, and `backend` for roce's
//! private ones), so calling it through that type is sound.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use crate::abi::*;

macro_rules! table {
    ($( $f:ident : fn($($a:ty),*) $(-> $r:ty)? ;)*) => {
        /// The verbs entry points, `None` where the library lacks one.
        #[allow(non_snake_case)]
        pub struct Verbs {
            $( pub $f: Option<unsafe extern "C" fn($($a),*) $(-> $r)?>, )*
        }

        impl Verbs {
            /// # Safety
            /// `lib` is a `dlopen` handle never closed.
            unsafe fn load(lib: *mut c_void) -> Verbs {
                Verbs {
                    $( $f: {
                        let name = concat!(stringify!($f), "\0");
                        // SAFETY: a NUL-terminated name; the handle is live.
                        let p = unsafe { libc::dlsym(lib, name.as_ptr().cast()) };
                        // SAFETY: the symbol of that name has this prototype
                        // (module docs); NULL becomes `None`.
                        unsafe { std::mem::transmute::<*mut c_void, Option<unsafe extern "C" fn($($a),*) $(-> $r)?>>(p) }
                    }, )*
                }
            }
        }
    };
}

table! {
    ibv_get_device_list: fn(*mut c_int) -> *mut *mut c_void;
    ibv_free_device_list: fn(*mut *mut c_void);
    ibv_open_device: fn(*mut c_void) -> *mut ibv_context;
    ibv_query_gid: fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    ibv_query_device: fn(*mut ibv_context, *mut c_void) -> c_int;
    ibv_alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
    ibv_create_comp_channel: fn(*mut ibv_context) -> *mut ibv_comp_channel;
    ibv_destroy_comp_channel: fn(*mut ibv_comp_channel) -> c_int;
    ibv_create_cq: fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    ibv_destroy_cq: fn(*mut ibv_cq) -> c_int;
    ibv_create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    ibv_modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    ibv_destroy_qp: fn(*mut ibv_qp) -> c_int;
    ibv_create_srq: fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
    ibv_destroy_srq: fn(*mut ibv_srq) -> c_int;
    roce_cm_set_handler: fn(Option<CmHandler>) -> c_int;
    roce_cm_listen: fn(*mut ibv_context, u16, u8, *const u8, u16, *mut u64) -> c_int;
    roce_cm_connect: fn(*mut ibv_context, u16, u8, *const u8, u16, *const u8, u16, *const CmParam, *mut u64) -> c_int;
    roce_cm_accept: fn(u64, *const CmParam) -> c_int;
    roce_cm_reject: fn(u64, u16, *const u8, u8) -> c_int;
    roce_cm_establish: fn(u64) -> c_int;
    roce_cm_disconnect: fn(u64) -> c_int;
    roce_cm_close: fn(u64);
    roce_cm_qp_attr: fn(u64, c_int, *mut ibv_qp_attr, *mut c_int) -> c_int;
}

static VERBS: OnceLock<Option<Verbs>> = OnceLock::new();

/// The table, loading the library on first use; `None` if no
/// `libibverbs.so.1` can be loaded.
pub fn verbs() -> Option<&'static Verbs> {
    VERBS
        .get_or_init(|| {
            let name = c"libibverbs.so.1";
            // SAFETY: a NUL-terminated name; the handle is never closed.
            let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if lib.is_null() {
                return None;
            }
            // SAFETY: as `load` asks.
            Some(unsafe { Verbs::load(lib) })
        })
        .as_ref()
}

/// The entry point `f` of the table, or `ENOSYS` (no such library or no
/// such function in it).
macro_rules! vfn {
    ($f:ident) => {
        $crate::verbs::verbs().and_then(|v| v.$f).ok_or(libc::ENOSYS)
    };
}
pub(crate) use vfn;
