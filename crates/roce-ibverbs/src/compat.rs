//! Symbols that rdma-core's providers (libmlx5, libefa, ...) and
//! librdmacm import from libibverbs. perftest links those libraries, and
//! Debian builds everything with immediate binding, so a program loads
//! only if each of these resolves. None of them is reached through this
//! library: providers drive kernel devices, and there is none. Each fails
//! the way rdma-core reports a missing kernel interface (EOPNOTSUPP, a NULL
//! with errno set), or, for the registration and logging hooks the
//! providers' constructors call, does nothing.

use std::ffi::{c_char, c_int, c_uint, c_void};

use libc::EOPNOTSUPP;

use crate::sys::set_errno;

macro_rules! unsupported_int {
    ($($name:ident),* $(,)?) => {$(
        /// A provider's kernel command: no kernel device stands behind this
        /// library.
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            EOPNOTSUPP
        }
    )*};
}

unsupported_int!(
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
    verbs_init_cq,
);

/// A provider's context allocation: there is no kernel device to open.
#[no_mangle]
pub extern "C" fn _verbs_init_and_alloc_context() -> *mut c_void {
    set_errno(EOPNOTSUPP);
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn verbs_open_device() -> *mut c_void {
    set_errno(EOPNOTSUPP);
    std::ptr::null_mut()
}

/// Called by each provider's constructor at load: the library drives no
/// hardware, so the provider is not kept.
#[no_mangle]
pub extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}

/// `ibv_register_driver@IBVERBS_1.1`, the pre-rdma-core driver
/// registration (no default version in rdma-core 44 either): like
/// `verbs_register_driver_34`, the driver is not kept.
#[no_mangle]
pub extern "C" fn roce_compat_ibv_register_driver(_name: *const c_char, _init: *const c_void) {}

/// How many attributes a provider's ioctl command holds, counting those of
/// the buffers linked to it: no provider builds commands here (their
/// contexts are never made, `_verbs_init_and_alloc_context`), so there
/// are no linked buffers and the count is the caller's own.
#[no_mangle]
pub extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint, _link: *const c_void) -> c_uint {
    num_attrs
}

/// A provider's read of its device's sysfs file (printf-like path; the
/// arguments after the format are ignored, as in `__verbs_log`): -1 with
/// `EINVAL` for no device, as rdma-core, and `ENOENT` otherwise, since no
/// device of this library has a sysfs directory.
#[no_mangle]
pub extern "C" fn ibv_read_ibdev_sysfs_file(
    _buf: *mut c_char,
    _size: usize,
    sysfs_dev: *const c_void,
    _fmt: *const c_char,
) -> c_int {
    set_errno(if sysfs_dev.is_null() { libc::EINVAL } else { libc::ENOENT });
    -1
}

#[no_mangle]
pub extern "C" fn verbs_set_ops(_ctx: *mut c_void, _ops: *const c_void) {}

#[no_mangle]
pub extern "C" fn verbs_uninit_context(_ctx: *mut c_void) {}

#[no_mangle]
pub extern "C" fn verbs_allow_disassociate_destroy(_ctx: *mut c_void) -> bool {
    false
}

/// rdma-core's debug log (printf-like; the arguments are ignored, which the
/// x86-64 and AArch64 calling conventions allow for a variadic caller).
#[no_mangle]
pub extern "C" fn __verbs_log(_ctx: *mut c_void, _level: u32, _fmt: *const c_void) {}

/// Kernel-to-user structure copies for librdmacm's kernel CM, which the
/// library does not have: nothing reaches them.
#[no_mangle]
pub extern "C" fn ibv_copy_ah_attr_from_kern(_dst: *mut c_void, _src: *const c_void) {}
#[no_mangle]
pub extern "C" fn ibv_copy_qp_attr_from_kern(_dst: *mut c_void, _src: *const c_void) {}
#[no_mangle]
pub extern "C" fn ibv_copy_path_rec_from_kern(_dst: *mut c_void, _src: *const c_void) {}
#[no_mangle]
pub extern "C" fn ibv_copy_path_rec_to_kern(_dst: *mut c_void, _src: *const c_void) {}
