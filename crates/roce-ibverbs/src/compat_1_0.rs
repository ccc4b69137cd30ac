//! libibverbs' IBVERBS_1.0 ABI, which rdma-core still exports beside the
//! current one (`compat-1_0.c`): binaries linked against libibverbs before
//! 1.1 (2006) bind `ibv_get_device_list@IBVERBS_1.0` and the like, whose
//! objects (`ibv_device_1_0`, `ibv_context_1_0`, ...) wrap the current
//! ones with other layouts. No program this library serves (perftest,
//! libfabric, UCX, Open MPI, pyverbs, rdma-core's examples) binds them;
//! they exist so the library defines every version node and symbol
//! rdma-core 44's does (a loader resolving a 1.0 binary finds them), and
//! each fails with `ENOSYS`, the errno of a function not implemented:
//! constructors return NULL, the verbs that return an errno return it
//! (those of rdma-core's -1 convention return -1), and the acknowledgements
//! and the list release, which nothing could have handed out, do nothing.
//! `symbols.txt` binds each `roce_compat_1_0_ibv_X` here as `ibv_X@IBVERBS_1.0`.
//!
//! The functions take no parameters: the x86-64 and AArch64 calling
//! conventions let a callee ignore the arguments its caller passes.

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use libc::ENOSYS;

use crate::sys::set_errno;

macro_rules! compat_null {
    ($($name:ident),* $(,)?) => {$(
        /// An IBVERBS_1.0 constructor: NULL with `errno` = `ENOSYS`.
        #[no_mangle]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(ENOSYS);
            null_mut()
        }
    )*};
}

macro_rules! compat_errno {
    ($($name:ident),* $(,)?) => {$(
        /// An IBVERBS_1.0 verb that returns an errno: `ENOSYS`.
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            set_errno(ENOSYS);
            ENOSYS
        }
    )*};
}

macro_rules! compat_minus1 {
    ($($name:ident),* $(,)?) => {$(
        /// An IBVERBS_1.0 call of the -1 convention: -1, `errno` = `ENOSYS`.
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            set_errno(ENOSYS);
            -1
        }
    )*};
}

macro_rules! compat_void {
    ($($name:ident),* $(,)?) => {$(
        /// An IBVERBS_1.0 release of what no 1.0 call handed out: nothing
        /// to do.
        #[no_mangle]
        pub extern "C" fn $name() {}
    )*};
}

compat_null!(
    roce_compat_1_0_ibv_get_device_list,
    roce_compat_1_0_ibv_get_device_name,
    roce_compat_1_0_ibv_open_device,
    roce_compat_1_0_ibv_alloc_pd,
    roce_compat_1_0_ibv_reg_mr,
    roce_compat_1_0_ibv_create_cq,
    roce_compat_1_0_ibv_create_srq,
    roce_compat_1_0_ibv_create_qp,
    roce_compat_1_0_ibv_create_ah,
);

compat_errno!(
    roce_compat_1_0_ibv_close_device,
    roce_compat_1_0_ibv_query_device,
    roce_compat_1_0_ibv_query_port,
    roce_compat_1_0_ibv_dealloc_pd,
    roce_compat_1_0_ibv_dereg_mr,
    roce_compat_1_0_ibv_resize_cq,
    roce_compat_1_0_ibv_destroy_cq,
    roce_compat_1_0_ibv_modify_srq,
    roce_compat_1_0_ibv_query_srq,
    roce_compat_1_0_ibv_destroy_srq,
    roce_compat_1_0_ibv_query_qp,
    roce_compat_1_0_ibv_modify_qp,
    roce_compat_1_0_ibv_destroy_qp,
    roce_compat_1_0_ibv_destroy_ah,
    roce_compat_1_0_ibv_attach_mcast,
    roce_compat_1_0_ibv_detach_mcast,
);

compat_minus1!(
    roce_compat_1_0_ibv_get_async_event,
    roce_compat_1_0_ibv_get_cq_event,
    roce_compat_1_0_ibv_query_gid,
    roce_compat_1_0_ibv_query_pkey,
);

compat_void!(
    roce_compat_1_0_ibv_ack_async_event,
    roce_compat_1_0_ibv_ack_cq_events,
    roce_compat_1_0_ibv_free_device_list,
);

/// The node GUID of an IBVERBS_1.0 device: none was handed out, so 0.
#[no_mangle]
pub extern "C" fn roce_compat_1_0_ibv_get_device_guid() -> u64 {
    set_errno(ENOSYS);
    0
}
