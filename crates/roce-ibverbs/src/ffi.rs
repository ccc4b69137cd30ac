//! The `ibv_*` entry points and the ops tables.
//!
//! # Safety argument
//!
//! This module is the library's boundary with C; its `unsafe` is of three
//! kinds, each resting on the verbs contract the calling program keeps
//! (the one rdma-core documents for the same calls):
//!
//! 1. Object pointers. Every object the library hands out (`ibv_context`,
//!    `ibv_pd`, `ibv_mr`, `ibv_cq`, `ibv_comp_channel`, `ibv_qp`,
//!    `ibv_srq`, `ibv_ah`) is the first field of a `Box`ed `#[repr(C)]`
//!    wrapper (`objects`), leaked when created and freed only by the
//!    matching destroy call, so a pointer the program passes back is the
//!    wrapper's address and is valid until it destroys the object, which
//!    it must not use afterwards nor destroy twice. NULL is refused with
//!    `EINVAL`. Devices live for the whole process.
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

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use libc::{EBUSY, EINVAL, EIO, ENOMEM, ENOSYS, EOPNOTSUPP};
use roce::{
    Access, AddressVector, AttrMask, MemBuf, PathMtu, QpAttr, QpState, QpType, RecvWr, SendOp, SendWr, Sge,
};

use crate::abi::*;
use crate::config::DeviceEntry;
use crate::objects::*;
use crate::sys::set_errno;
use roce_proto::limits;

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

/// Reads a reference to an object the library made (see the module's
/// safety argument, point 1).
unsafe fn obj<'a, W, C>(p: *mut C) -> R<&'a W> {
    if p.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: `p` is the first field of a live `W` (module docs, point 1).
    Ok(unsafe { &*(p as *const W) })
}

/// The wrapper of an `ibv_context`: the `verbs_context` around it is the
/// first field of `ContextObj`.
unsafe fn ctx_obj<'a>(ctx: *mut ibv_context) -> R<&'a ContextObj> {
    if ctx.is_null() {
        return Err(EINVAL);
    }
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: contexts are made only by `ibv_open_device`, as the
    // `context` field of a boxed `ContextObj` whose first field is the
    // `verbs_context` (module docs, point 1).
    Ok(unsafe { &*((ctx as *mut u8).sub(off) as *const ContextObj) })
}

fn boxed<W>(w: W) -> *mut W {
    Box::into_raw(Box::new(w))
}

/// Frees a wrapper made by `boxed`.
unsafe fn free<W, C>(p: *mut C) {
    // SAFETY: the caller's pointer came from `boxed::<W>` and is dropped once.
    drop(unsafe { Box::from_raw(p as *mut W) });
}

/// A wrapper of an object made in a PD, which counts it among its users.
trait InPd {
    fn pd(&self) -> *const PdObj;
}

macro_rules! in_pd {
    ($($t:ty),*) => {$(
        impl InPd for $t {
            fn pd(&self) -> *const PdObj {
                self.pd
            }
        }
    )*};
}
in_pd!(MrObj, AhObj, SrqObj, QpObj);

/// Frees `p`, a `W` made by `boxed` in a PD, and takes it off the PD's
/// users. The caller frees it once, after whatever else of it it needs.
unsafe fn free_in_pd<W: InPd, C>(p: *mut C) -> R<()> {
    let w: &W = unsafe { obj(p) }?;
    // SAFETY: a PD outlives what was made in it (its dealloc fails while
    // it has users).
    let pd = unsafe { &*w.pd() };
    unsafe { free::<W, C>(p) };
    pd.users.fetch_sub(1, Ordering::AcqRel);
    Ok(())
}

fn c_name<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

// ------------------------------------------------------------------ devices

struct DeviceTable {
    /// Never changed once made, so the elements' addresses are stable.
    devices: Vec<DeviceObj>,
}

// SAFETY: the raw pointers inside `ibv_device` are NULL and never written;
// the table is immutable once made.
unsafe impl Sync for DeviceTable {}
// SAFETY: as above.
unsafe impl Send for DeviceTable {}

fn devices() -> &'static DeviceTable {
    static TABLE: OnceLock<DeviceTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let entries = crate::config::from_env().unwrap_or_else(|e| {
            eprintln!("libibverbs (roce): no devices: {e}");
            Vec::new()
        });
        let devices = entries
            .into_iter()
            .enumerate()
            .map(|(index, entry)| {
                let ibv = ibv_device {
                    _ops: _ibv_device_ops { _dummy1: null_mut(), _dummy2: null_mut() },
                    node_type: IBV_NODE_CA,
                    transport_type: IBV_TRANSPORT_IB,
                    name: c_name(&entry.name),
                    dev_name: c_name(&format!("uverbs{index}")),
                    // Not in sysfs: paths that exist nowhere, so reads fail cleanly.
                    dev_path: c_name(&format!("/nonexistent/roce/uverbs{index}")),
                    ibdev_path: c_name(&format!("/nonexistent/roce/{}", entry.name)),
                };
                DeviceObj { ibv, entry, index }
            })
            .collect();
        DeviceTable { devices }
    })
}

unsafe fn device_obj<'a>(d: *mut ibv_device) -> R<&'a DeviceObj> {
    devices().devices.iter().find(|o| std::ptr::eq(&o.ibv, d)).ok_or(EINVAL)
}

/// The devices opened in this process, by name, with how many contexts
/// use each: contexts of one device share its socket and engine.
static OPEN: Mutex<Vec<(String, roce::Device, usize)>> = Mutex::new(Vec::new());

fn open_dev(entry: &DeviceEntry) -> R<roce::Device> {
    let mut open = lock(&OPEN);
    if let Some(o) = open.iter_mut().find(|o| o.0 == entry.name) {
        o.2 += 1;
        return Ok(o.1.clone());
    }
    let dev = roce::Device::open(roce::DeviceConfig::new(entry.addr)).map_err(|e| {
        eprintln!("libibverbs (roce): {} at {}: {e}", entry.name, entry.addr);
        err(e)
    })?;
    open.push((entry.name.clone(), dev.clone(), 1));
    Ok(dev)
}

fn close_dev(name: &str) {
    let mut open = lock(&OPEN);
    if let Some(i) = open.iter().position(|o| o.0 == name) {
        open[i].2 -= 1;
        if open[i].2 == 0 {
            let (name, dev, _) = open.remove(i);
            if std::env::var_os("ROCE_COUNTERS").is_some() {
                // `ROCE_COUNTERS=1`: the device's counters on stderr when it
                // closes (what `roce perf --counters` shows).
                let c = dev.counters();
                let nonzero: Vec<String> =
                    c.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
                let d = dev.driver_stats();
                eprintln!(
                    "libibverbs (roce): {name} counters: {} drive_takeovers={}",
                    nonzero.join(" "),
                    d.drive_takeovers
                );
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    ret_ptr(|| {
        let t = devices();
        let n = t.devices.len();
        // SAFETY: calloc of n+1 pointers; freed by ibv_free_device_list.
        let list =
            unsafe { libc::calloc(n + 1, std::mem::size_of::<*mut ibv_device>()) } as *mut *mut ibv_device;
        if list.is_null() {
            return Err(ENOMEM);
        }
        for (i, d) in t.devices.iter().enumerate() {
            // SAFETY: i < n + 1 slots; devices live for the process.
            unsafe { *list.add(i) = &d.ibv as *const ibv_device as *mut ibv_device };
        }
        if !num.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *num = n as c_int };
        }
        Ok(list)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the list came from ibv_get_device_list's calloc (or is NULL).
    unsafe { libc::free(list.cast()) };
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(d: *mut ibv_device) -> *const c_char {
    ret_ptr(|| Ok(unsafe { device_obj(d) }?.ibv.name.as_ptr() as *mut c_char))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(d: *mut ibv_device) -> c_int {
    catch_unwind(|| unsafe { device_obj(d) }.map_or(-1, |o| o.index as c_int)).unwrap_or(-1)
}

fn guid_of(addr: std::net::IpAddr) -> u64 {
    // An EUI-64 made from the address's last 6 bytes, locally administered.
    let b = roce::gid_to_bytes(addr);
    let g = [0x02, b[10], b[11], 0xff, 0xfe, b[13], b[14], b[15]];
    u64::from_ne_bytes(g)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(d: *mut ibv_device) -> u64 {
    catch_unwind(|| unsafe { device_obj(d) }.map_or(0, |o| guid_of(o.entry.addr.ip()))).unwrap_or(0)
}

fn context_ops() -> ibv_context_ops {
    ibv_context_ops {
        _compat_query_device: Some(ibv_query_device),
        _compat_query_port: Some(compat_query_port),
        _compat_alloc_pd: null_mut(),
        _compat_dealloc_pd: null_mut(),
        _compat_reg_mr: null_mut(),
        _compat_rereg_mr: null_mut(),
        _compat_dereg_mr: null_mut(),
        alloc_mw: null_mut(),
        bind_mw: null_mut(),
        dealloc_mw: null_mut(),
        _compat_create_cq: null_mut(),
        poll_cq: Some(poll_cq),
        req_notify_cq: Some(req_notify_cq),
        _compat_cq_event: null_mut(),
        _compat_resize_cq: null_mut(),
        _compat_destroy_cq: null_mut(),
        _compat_create_srq: null_mut(),
        _compat_modify_srq: null_mut(),
        _compat_query_srq: null_mut(),
        _compat_destroy_srq: null_mut(),
        post_srq_recv: Some(post_srq_recv),
        _compat_create_qp: null_mut(),
        _compat_query_qp: null_mut(),
        _compat_modify_qp: null_mut(),
        _compat_destroy_qp: null_mut(),
        post_send: Some(post_send),
        post_recv: Some(post_recv),
        _compat_create_ah: null_mut(),
        _compat_destroy_ah: null_mut(),
        _compat_attach_mcast: null_mut(),
        _compat_detach_mcast: null_mut(),
        _compat_async_event: null_mut(),
    }
}

fn verbs_context_for(device: *mut ibv_device, async_fd: c_int) -> verbs_context {
    let n = null_mut();
    verbs_context {
        query_port: Some(query_port_ex),
        advise_mr: n,
        alloc_null_mr: n,
        read_counters: n,
        attach_counters_point_flow: n,
        create_counters: n,
        destroy_counters: n,
        reg_dm_mr: n,
        alloc_dm: n,
        free_dm: n,
        modify_flow_action_esp: n,
        destroy_flow_action: n,
        create_flow_action_esp: n,
        modify_qp_rate_limit: n,
        alloc_parent_domain: n,
        dealloc_td: n,
        alloc_td: n,
        modify_cq: n,
        post_srq_ops: n,
        destroy_rwq_ind_table: n,
        create_rwq_ind_table: n,
        destroy_wq: n,
        modify_wq: n,
        create_wq: n,
        query_rt_values: n,
        create_cq_ex: n,
        priv_: n,
        query_device_ex: n,
        ibv_destroy_flow: n,
        ABI_placeholder2: n,
        ibv_create_flow: n,
        ABI_placeholder1: n,
        open_qp: n,
        create_qp_ex: n,
        get_srq_num: n,
        create_srq_ex: n,
        open_xrcd: n,
        close_xrcd: n,
        _ABI_placeholder3: 0,
        sz: std::mem::size_of::<verbs_context>(),
        context: ibv_context {
            device,
            ops: context_ops(),
            cmd_fd: -1,
            async_fd,
            num_comp_vectors: 1,
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            abi_compat: VERBS_ABI_IS_EXTENDED as *mut c_void,
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(d: *mut ibv_device) -> *mut ibv_context {
    ret_ptr(|| {
        let dobj = unsafe { device_obj(d) }?;
        let dev = open_dev(&dobj.entry)?;
        let events = match crate::objects::EventQueue::new() {
            Ok(queue) => Arc::new(AsyncEvents {
                dev: Mutex::new(Some(dev.clone())),
                queue,
                qps: Mutex::default(),
                cqs: Mutex::default(),
                srqs: Mutex::default(),
            }),
            Err(e) => {
                close_dev(&dobj.entry.name);
                return Err(e.raw_os_error().unwrap_or(EIO));
            }
        };
        events.drain();
        let fd = events.queue.fd.as_raw_fd();
        let obj = boxed(ContextObj { vctx: verbs_context_for(d, fd), dev, device: dobj, events });
        // SAFETY: just boxed.
        Ok(unsafe { &mut (*obj).vctx.context })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    ret_errno(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        // SAFETY: device pointers live for the process.
        let name = unsafe { &*c.device }.entry.name.clone();
        lock(&c.events.dev).take();
        // SAFETY: the context is the program's to close, once.
        unsafe { free::<ContextObj, _>(c as *const ContextObj as *mut ContextObj) };
        close_dev(&name);
        Ok(())
    })
}

fn fill_device_attr(c: &ContextObj, a: &mut ibv_device_attr) {
    use limits::*;
    // SAFETY: device pointers live for the process.
    let dev = unsafe { &*c.device };
    let guid = guid_of(dev.entry.addr.ip());
    *a = ibv_device_attr {
        fw_ver: c_name(concat!("roce ", env!("CARGO_PKG_VERSION"))),
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: MAX_MSG_SIZE,
        page_size_cap: 0xffff_f000,
        vendor_id: 0,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: MAX_QP as c_int,
        max_qp_wr: MAX_QP_WR as c_int,
        // SYS_IMAGE_GUID | RC_RNR_NAK_GEN
        device_cap_flags: (1 << 11) | (1 << 12),
        max_sge: MAX_SGE as c_int,
        max_sge_rd: MAX_SGE as c_int,
        max_cq: MAX_QP as c_int,
        max_cqe: MAX_CQE as c_int,
        max_mr: MAX_MR as c_int,
        max_pd: MAX_QP as c_int,
        max_qp_rd_atom: MAX_RD_ATOMIC as c_int,
        max_ee_rd_atom: 0,
        max_res_rd_atom: MAX_QP as c_int * MAX_RD_ATOMIC as c_int,
        max_qp_init_rd_atom: MAX_RD_ATOMIC as c_int,
        max_ee_init_rd_atom: 0,
        atomic_cap: IBV_ATOMIC_HCA,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: MAX_QP as c_int,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: MAX_QP as c_int,
        max_srq_wr: MAX_QP_WR as c_int,
        max_srq_sge: MAX_SGE as c_int,
        max_pkeys: 1,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    };
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    ret_errno(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        fill_device_attr(c, a);
        Ok(())
    })
}

/// IB MTU enum values.
const IBV_MTU_4096: c_int = 5;

fn port_attr(port: u8) -> R<ibv_port_attr> {
    if port != 1 {
        return Err(EINVAL);
    }
    Ok(ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: IBV_MTU_4096,
        active_mtu: IBV_MTU_4096,
        gid_tbl_len: 1,
        // IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: limits::MAX_MSG_SIZE as u32,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 1,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        // 4X at 25 Gb/s (EDR): 100 Gb/s, the line rate the engine assumes.
        active_width: 2,
        active_speed: 32,
        phys_state: 5,
        link_layer: IBV_LINK_LAYER_ETHERNET,
        flags: 0,
        port_cap_flags2: 0,
    })
}

/// Copies the first `len` bytes of `a` to `out`.
unsafe fn write_port_attr(a: &ibv_port_attr, out: *mut ibv_port_attr, len: usize) -> R<()> {
    if out.is_null() {
        return Err(EINVAL);
    }
    let len = len.min(std::mem::size_of::<ibv_port_attr>());
    // SAFETY: `out` is valid for `len` bytes (the caller says how many).
    unsafe { std::ptr::copy_nonoverlapping(a as *const ibv_port_attr as *const u8, out as *mut u8, len) };
    Ok(())
}

/// `ibv_query_port@IBVERBS_1.1` (and the legacy op): the structure
/// without `port_cap_flags2`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(ctx: *mut ibv_context, port: u8, out: *mut ibv_port_attr) -> c_int {
    ret_errno(|| {
        unsafe { ctx_obj(ctx) }?;
        unsafe { write_port_attr(&port_attr(port)?, out, COMPAT_PORT_ATTR_LEN) }
    })
}

unsafe extern "C" fn compat_query_port(ctx: *mut ibv_context, port: u8, out: *mut ibv_port_attr) -> c_int {
    unsafe { ibv_query_port(ctx, port, out) }
}

/// `verbs_context.query_port`, what verbs.h's `ibv_query_port` calls.
unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    out: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    ret_errno(|| {
        unsafe { ctx_obj(ctx) }?;
        unsafe { write_port_attr(&port_attr(port)?, out, len) }
    })
}

fn gid_of(c: &ContextObj) -> [u8; 16] {
    roce::gid_to_bytes(c.dev.gid())
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    ret_minus1(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        if port != 1 || index != 0 {
            return Err(EINVAL);
        }
        let g = unsafe { gid.as_mut() }.ok_or(EINVAL)?;
        g.raw = gid_of(c);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    ret_errno(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return Err(EINVAL);
        }
        if port != 1 || index != 0 {
            return Err(libc::ENODATA);
        }
        let e = unsafe { entry.as_mut() }.ok_or(EINVAL)?;
        *e = ibv_gid_entry {
            gid: ibv_gid { raw: gid_of(c) },
            gid_index: 0,
            port_num: 1,
            gid_type: IBV_GID_TYPE_ROCE_V2,
            ndev_ifindex: 0,
        };
        Ok(())
    })
}

/// rdma-core's private `ibv_query_gid_type` (sysfs numbering).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_int,
) -> c_int {
    ret_minus1(|| {
        unsafe { ctx_obj(ctx) }?;
        if port != 1 || index != 0 {
            return Err(EINVAL);
        }
        *unsafe { ty.as_mut() }.ok_or(EINVAL)? = IBV_GID_TYPE_SYSFS_ROCE_V2;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    ret_minus1(|| {
        unsafe { ctx_obj(ctx) }?;
        if port != 1 || index != 0 {
            return Err(EINVAL);
        }
        *unsafe { pkey.as_mut() }.ok_or(EINVAL)? = 0xffff;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    let ok = catch_unwind(|| unsafe { ctx_obj(ctx) }.is_ok()).unwrap_or(false);
    if ok && port == 1 && pkey == 0xffff {
        0
    } else {
        set_errno(libc::ENOENT);
        -1
    }
}

// ------------------------------------------------------------------ PD, MR

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    ret_ptr(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        let pd = c.dev.alloc_pd().map_err(err)?;
        let o = boxed(PdObj { ibv: ibv_pd { context: ctx, handle: 0 }, pd, users: AtomicUsize::new(0) });
        Ok(o.cast())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    ret_errno(|| {
        let p: &PdObj = unsafe { obj(pd) }?;
        if p.users.load(Ordering::Acquire) > 0 {
            return Err(EBUSY);
        }
        unsafe { free::<PdObj, _>(pd) };
        Ok(())
    })
}

fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: Option<u64>,
    access: c_uint,
) -> R<*mut ibv_mr> {
    let p: &PdObj = unsafe { obj(pd) }?;
    let ptr = NonNull::new(addr as *mut u8).ok_or(EINVAL)?;
    if length == 0 || length > isize::MAX as usize {
        return Err(EINVAL);
    }
    let c = unsafe { ctx_obj(p.ibv.context) }?;
    let region = crate::regions::register(addr as usize, length, c.device as usize).ok_or(EBUSY)?;
    // SAFETY: the registered memory's contract (module docs, point 3):
    // the program keeps `[addr, addr + length)` allocated until it
    // deregisters (which drops this `MemBuf`'s region), the library makes
    // no Rust reference to it, and `region` keeps it off other devices.
    let buf = unsafe { MemBuf::from_raw_parts(ptr, length, None) };
    let access = Access(access & !IBV_ACCESS_OPTIONAL_RANGE);
    let mr = p.pd.reg_mr_range(buf, 0, length, iova, access).map_err(err)?;
    p.users.fetch_add(1, Ordering::AcqRel);
    let ibv =
        ibv_mr { context: p.ibv.context, pd, addr, length, handle: 0, lkey: mr.lkey(), rkey: mr.rkey() };
    Ok(boxed(MrObj { ibv, mr, pd: p, region }).cast())
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    ret_ptr(|| reg_mr(pd, addr, length, None, access as c_uint))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    ret_ptr(|| reg_mr(pd, addr, length, Some(iova), access as c_uint))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    ret_ptr(|| reg_mr(pd, addr, length, Some(iova), access))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    ret_errno(|| unsafe { free_in_pd::<MrObj, _>(mr) })
}

// ------------------------------------------------------- channels and CQs

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    ret_ptr(|| {
        unsafe { ctx_obj(ctx) }?;
        let events = crate::objects::EventQueue::new().map_err(|e| e.raw_os_error().unwrap_or(EIO))?;
        let fd = events.fd.as_raw_fd();
        let ch = Arc::new(Channel { events });
        Ok(boxed(ChannelObj {
            ibv: ibv_comp_channel { context: ctx, fd, refcnt: 0 },
            ch,
            users: AtomicUsize::new(0),
        })
        .cast())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    ret_errno(|| {
        let c: &ChannelObj = unsafe { obj(ch) }?;
        if c.users.load(Ordering::Acquire) > 0 {
            return Err(EBUSY);
        }
        unsafe { free::<ChannelObj, _>(ch) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    ret_ptr(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        if cqe < 1 {
            return Err(EINVAL);
        }
        let ch: Option<&ChannelObj> = if channel.is_null() { None } else { Some(unsafe { obj(channel) }?) };
        let cq = c.dev.create_cq(cqe as usize).map_err(err)?;
        let id = cq.id().0;
        let notify = Arc::new(CqNotify {
            armed_cq: Mutex::new(Some(cq.clone())),
            channel: ch.map(|c| c.ch.clone()),
            ibv: AtomicUsize::new(0),
            arm: Mutex::default(),
            acked_cond: Condvar::new(),
        });
        let o = boxed(CqObj {
            ibv: ibv_cq {
                context: ctx,
                channel,
                cq_context,
                handle: 0,
                cqe,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            cq,
            notify,
            channel: ch.map_or(std::ptr::null(), |c| c as *const ChannelObj),
            users: AtomicUsize::new(0),
            senders: Mutex::default(),
        });
        // SAFETY: just boxed.
        let r = unsafe { &*o };
        r.notify.ibv.store(o as usize, Ordering::Release);
        if let Some(ch) = ch {
            ch.users.fetch_add(1, Ordering::AcqRel);
        }
        lock(&c.events.cqs).insert(id, o as usize);
        Ok(o.cast())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    ret_errno(|| {
        let q: &CqObj = unsafe { obj(cq) }?;
        if q.users.load(Ordering::Acquire) > 0 {
            return Err(EBUSY);
        }
        {
            // As rdma-core: wait until every event handed out is acknowledged.
            let mut arm = lock(&q.notify.arm);
            arm.dead = true;
            while arm.acked < arm.delivered {
                arm = q.notify.acked_cond.wait(arm).unwrap_or_else(|p| p.into_inner());
            }
        }
        lock(&q.notify.armed_cq).take();
        let c = unsafe { ctx_obj(q.ibv.context) }?;
        lock(&c.events.cqs).remove(&q.cq.id().0);
        if !q.channel.is_null() {
            // SAFETY: a channel outlives its CQs (destroy fails while used).
            unsafe { &*q.channel }.users.fetch_sub(1, Ordering::AcqRel);
        }
        unsafe { free::<CqObj, _>(cq) };
        Ok(())
    })
}

/// `ibv_resize_cq`: the engine's CQs keep their size.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    EOPNOTSUPP
}

/// The `sl` of a UD receive over RoCE, as mlx5 devices report it (their
/// programming manual gives SL no meaning on RoCE and reuses it): bit 3
/// set for a UDP-encapsulated (RoCEv2) packet, bits 2:0 the network header
/// (1 IPv6, 2 IPv4). UCX's `ud_verbs` reads it to find the destination GID
/// in the GRH area, and drops what it cannot match. Peers are of the
/// device's own address family (the engine refuses mixed ones).
fn roce_pkt_type(ipv4: bool) -> u8 {
    0x8 | if ipv4 { 0x2 } else { 0x1 }
}

fn wc_to_c(w: &roce::Wc, ipv4: bool) -> ibv_wc {
    let imm = if w.wc_flags & roce::WC_WITH_IMM != 0 { w.imm_data.to_be() } else { w.imm_data };
    let sl = if w.wc_flags & roce::WC_GRH != 0 { roce_pkt_type(ipv4) } else { 0 };
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode: w.opcode as c_int,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags,
        pkey_index: 0,
        slid: 0,
        sl,
        dlid_path_bits: 0,
    }
}

/// Send WRs outstanding on a CQ from which an empty poll drives the
/// network (`Cq::poll_or_drive`): a pipeline, not one message in flight.
const DRIVE_BUSY: usize = 2;

/// `ops.poll_cq`: completions, or a negative number on error.
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num: c_int, wc: *mut ibv_wc) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        let Ok(q) = (unsafe { obj::<CqObj, _>(cq) }) else { return -EINVAL };
        if num <= 0 {
            return 0;
        }
        if wc.is_null() {
            return -EINVAL;
        }
        let mut buf = [roce::Wc::EMPTY; 32];
        let mut done = 0usize;
        let ipv4 = q.cq.device().gid().is_ipv4();
        while done < num as usize {
            let want = (num as usize - done).min(buf.len());
            // Programs spin on an empty CQ (perftest, the pingpong
            // examples, UCX's progress loop): an empty first poll makes
            // progress from the program's thread, taking over from the
            // driver thread while a pipeline of sends that complete here is
            // outstanding (DRIVE_BUSY WRs or more).
            let r = if done == 0 {
                // Held while polling: creating or destroying a QP on this
                // CQ waits for it.
                let senders = lock(&q.senders);
                q.cq.poll_or_drive(&mut buf[..want], &senders, DRIVE_BUSY)
            } else {
                q.cq.poll(&mut buf[..want])
            };
            let n = match r {
                Ok(n) => n,
                Err(e) if done == 0 => return -err(e),
                Err(_) => break,
            };
            for (i, w) in buf[..n].iter().enumerate() {
                // SAFETY: `wc` holds `num` entries (module docs, point 2).
                unsafe { wc.add(done + i).write(wc_to_c(w, ipv4)) };
            }
            done += n;
            if n < want {
                break;
            }
        }
        done as c_int
    }))
    .unwrap_or(-EIO)
}

/// `ops.req_notify_cq`. An event follows the next completion, or at once
/// if the CQ holds one already (a spurious event a program's poll loop
/// handles); `solicited_only` is treated as any completion, so it may
/// wake the program early, never late.
unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    ret_errno(|| {
        let q: &CqObj = unsafe { obj(cq) }?;
        if q.notify.channel.is_none() {
            return Err(EINVAL);
        }
        lock(&q.notify.arm).armed = true;
        q.notify.poke();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    ret_minus1(|| {
        let c: &ChannelObj = unsafe { obj(ch) }?;
        if cq.is_null() || cq_context.is_null() {
            return Err(EINVAL);
        }
        crate::sys::read_event(c.ibv.fd).map_err(|e| e.raw_os_error().unwrap_or(EIO))?;
        let p = c.ch.events.pop().ok_or(EIO)? as *mut CqObj;
        // SAFETY: a CQ with events not yet acknowledged is not destroyed
        // (ibv_destroy_cq waits), and events of dead CQs are never queued.
        let q = unsafe { &*p };
        lock(&q.notify.arm).delivered += 1;
        // SAFETY: the caller's out-parameters.
        unsafe {
            *cq = p.cast();
            *cq_context = q.ibv.cq_context;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Ok(q) = unsafe { obj::<CqObj, _>(cq) } {
            let mut arm = lock(&q.notify.arm);
            arm.acked += u64::from(nevents);
            q.notify.acked_cond.notify_all();
        }
    }));
}

// ------------------------------------------------------------------- SRQ

#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    ret_ptr(|| {
        let p: &PdObj = unsafe { obj(pd) }?;
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        let srq = p.pd.create_srq(a.attr.max_wr, a.attr.max_sge).map_err(err)?;
        if a.attr.srq_limit > 0 {
            srq.arm_limit(a.attr.srq_limit).map_err(err)?;
        }
        let id = srq.id().0;
        let o = boxed(SrqObj {
            ibv: ibv_srq {
                context: p.ibv.context,
                srq_context: a.srq_context,
                pd,
                handle: 0,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            srq,
            pd: p,
            max_wr: a.attr.max_wr,
            max_sge: a.attr.max_sge,
            limit: Mutex::new(a.attr.srq_limit),
            users: AtomicUsize::new(0),
        });
        p.users.fetch_add(1, Ordering::AcqRel);
        let c = unsafe { ctx_obj(p.ibv.context) }?;
        lock(&c.events.srqs).insert(id, o as usize);
        Ok(o.cast())
    })
}

const IBV_SRQ_MAX_WR: c_int = 1;
const IBV_SRQ_LIMIT: c_int = 2;

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    ret_errno(|| {
        let s: &SrqObj = unsafe { obj(srq) }?;
        let a = unsafe { attr.as_ref() }.ok_or(EINVAL)?;
        if mask & IBV_SRQ_MAX_WR != 0 {
            return Err(EOPNOTSUPP);
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            s.srq.arm_limit(a.srq_limit).map_err(err)?;
            *lock(&s.limit) = a.srq_limit;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    ret_errno(|| {
        let s: &SrqObj = unsafe { obj(srq) }?;
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        *a = ibv_srq_attr { max_wr: s.max_wr, max_sge: s.max_sge, srq_limit: *lock(&s.limit) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    ret_errno(|| {
        let s: &SrqObj = unsafe { obj(srq) }?;
        if s.users.load(Ordering::Acquire) > 0 {
            return Err(EBUSY);
        }
        let c = unsafe { ctx_obj(s.ibv.context) }?;
        lock(&c.events.srqs).remove(&s.srq.id().0);
        unsafe { free_in_pd::<SrqObj, _>(srq) }
    })
}

/// Posts a chain of receive WRs (linked by `next`) with `post`, stopping
/// at the first that fails, which `*bad` then names (ibverbs' convention).
///
/// # Safety
/// `wr` is null or the head of a chain of valid `ibv_recv_wr`s, each with
/// `num_sge` readable SGEs; `bad` is null or writable.
unsafe fn post_recv_chain(
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    mut post: impl FnMut(RecvWr) -> R<()>,
) -> R<()> {
    while let Some(w) = unsafe { wr.as_ref() } {
        if let Err(e) = unsafe { recv_wr(w) }.and_then(&mut post) {
            if !bad.is_null() {
                unsafe { *bad = wr };
            }
            return Err(e);
        }
        wr = w.next;
    }
    Ok(())
}

/// One receive WR as the engine's, its SGEs read from C.
unsafe fn recv_wr(wr: &ibv_recv_wr) -> R<RecvWr> {
    Ok(RecvWr { wr_id: wr.wr_id, sg_list: unsafe { sges(wr.sg_list, wr.num_sge) }? })
}

unsafe fn sges(list: *const ibv_sge, n: c_int) -> R<Vec<Sge>> {
    if n < 0 || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: the WR's SGE array holds `num_sge` entries (point 2).
        let s = unsafe { *list.add(i) };
        v.push(Sge { addr: s.addr, length: s.length, lkey: s.lkey });
    }
    Ok(v)
}

unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    ret_errno(|| {
        let s: &SrqObj = unsafe { obj(srq) }?;
        // SAFETY: `wr` and `bad` come from the caller as ibv_post_srq_recv's.
        unsafe { post_recv_chain(wr, bad, |r| s.srq.post_recv(r).map_err(err)) }
    })
}

// -------------------------------------------------------------------- QPs

fn qp_type_of(t: c_int) -> R<QpType> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        _ => Err(EOPNOTSUPP),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    ret_ptr(|| {
        let p: &PdObj = unsafe { obj(pd) }?;
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        let ty = qp_type_of(a.qp_type)?;
        let scq: &CqObj = unsafe { obj(a.send_cq) }?;
        let rcq: &CqObj = unsafe { obj(a.recv_cq) }?;
        let srq: Option<&SrqObj> = if a.srq.is_null() { None } else { Some(unsafe { obj(a.srq) }?) };
        let mut cap = a.cap;
        cap.max_send_wr = cap.max_send_wr.max(1);
        cap.max_send_sge = cap.max_send_sge.max(1);
        if srq.is_none() {
            cap.max_recv_wr = cap.max_recv_wr.max(1);
            cap.max_recv_sge = cap.max_recv_sge.max(1);
        }
        if cap.max_inline_data > limits::MAX_INLINE {
            return Err(EINVAL);
        }
        let mut b = roce::QpBuilder::new(ty, &scq.cq, &rcq.cq)
            .max_send_wr(cap.max_send_wr)
            .max_recv_wr(cap.max_recv_wr)
            .max_sge(cap.max_send_sge, cap.max_recv_sge)
            .max_inline_data(cap.max_inline_data)
            .sq_sig_all(a.sq_sig_all != 0);
        if let Some(s) = srq {
            b = b.srq(&s.srq);
        }
        let qp = p.pd.create_qp(b).map_err(err)?;
        a.cap = cap;
        let qpn = qp.qpn();
        let o = boxed(QpObj {
            ibv: ibv_qp {
                context: p.ibv.context,
                qp_context: a.qp_context,
                pd,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                handle: 0,
                qp_num: qpn,
                state: QpState::Reset as c_int,
                qp_type: a.qp_type,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            qp,
            cap,
            sq_sig_all: a.sq_sig_all != 0,
            pd: p,
            send_cq: scq,
            recv_cq: rcq,
            srq: srq.map_or(std::ptr::null(), |s| s as *const SrqObj),
        });
        p.users.fetch_add(1, Ordering::AcqRel);
        scq.users.fetch_add(1, Ordering::AcqRel);
        lock(&scq.senders).push(qpn);
        rcq.users.fetch_add(1, Ordering::AcqRel);
        if let Some(s) = srq {
            s.users.fetch_add(1, Ordering::AcqRel);
        }
        let c = unsafe { ctx_obj(p.ibv.context) }?;
        lock(&c.events.qps).insert(qpn, o as usize);
        Ok(o.cast())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    ret_errno(|| {
        let q: &QpObj = unsafe { obj(qp) }?;
        let c = unsafe { ctx_obj(q.ibv.context) }?;
        lock(&c.events.qps).remove(&q.qp.qpn());
        // SAFETY: what a QP uses outlives it (their destroys fail while used).
        let (scq, rcq, srq) = unsafe { (&*q.send_cq, &*q.recv_cq, q.srq.as_ref()) };
        let qpn = q.qp.qpn();
        unsafe { free_in_pd::<QpObj, _>(qp) }?;
        lock(&scq.senders).retain(|&n| n != qpn);
        scq.users.fetch_sub(1, Ordering::AcqRel);
        rcq.users.fetch_sub(1, Ordering::AcqRel);
        if let Some(s) = srq {
            s.users.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    })
}

fn qp_state(s: c_int) -> R<QpState> {
    Ok(match s {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return Err(EINVAL),
    })
}

fn mtu(m: c_int) -> R<PathMtu> {
    Ok(match m {
        1 => PathMtu::Mtu256,
        2 => PathMtu::Mtu512,
        3 => PathMtu::Mtu1024,
        4 => PathMtu::Mtu2048,
        5 => PathMtu::Mtu4096,
        _ => return Err(EINVAL),
    })
}

/// An address vector from `ibv_ah_attr`: RoCE needs the GRH (the
/// destination GID is the IP address). The peer's device is taken to use
/// this device's UDP port (4791 unless configured otherwise): verbs
/// programs exchange no port.
fn av_of(a: &ibv_ah_attr, udp_port: u16) -> R<AddressVector> {
    if a.is_global == 0 {
        return Err(EINVAL);
    }
    Ok(AddressVector {
        dgid: roce::gid_from_bytes(a.grh.dgid.raw),
        sgid_index: a.grh.sgid_index,
        traffic_class: a.grh.traffic_class,
        hop_limit: if a.grh.hop_limit == 0 { 64 } else { a.grh.hop_limit },
        flow_label: a.grh.flow_label,
        udp_port: Some(udp_port),
    })
}

fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: roce::gid_to_bytes(av.dgid) },
            flow_label: av.flow_label,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    ret_errno(|| {
        let q: &QpObj = unsafe { obj(qp) }?;
        let a = unsafe { attr.as_ref() }.ok_or(EINVAL)?;
        let m = AttrMask(mask as u32);
        let mut x = QpAttr::default();
        if m.contains(AttrMask::STATE) {
            x.qp_state = qp_state(a.qp_state)?;
        }
        if m.contains(AttrMask::CUR_STATE) {
            x.cur_qp_state = qp_state(a.cur_qp_state)?;
        }
        if m.contains(AttrMask::PATH_MTU) {
            x.path_mtu = mtu(a.path_mtu)?;
        }
        if m.contains(AttrMask::AV) {
            let port = unsafe { ctx_obj(q.ibv.context) }?.dev.local_addr().port();
            x.av = av_of(&a.ah_attr, port)?;
        }
        x.qkey = a.qkey;
        x.rq_psn = roce::Psn::new(a.rq_psn);
        x.sq_psn = roce::Psn::new(a.sq_psn);
        x.dest_qp_num = a.dest_qp_num;
        x.qp_access_flags = Access(a.qp_access_flags);
        x.pkey_index = a.pkey_index;
        x.port_num = a.port_num;
        x.max_dest_rd_atomic = a.max_dest_rd_atomic;
        x.max_rd_atomic = a.max_rd_atomic;
        x.min_rnr_timer = a.min_rnr_timer;
        x.timeout = a.timeout;
        x.retry_cnt = a.retry_cnt;
        x.rnr_retry = a.rnr_retry;
        // The engine keeps the sizes given at creation.
        let m = m.minus(AttrMask::CAP);
        q.qp.modify(&x, m).map_err(err)?;
        if m.contains(AttrMask::STATE) {
            // SAFETY: the QP's own structure; programs read `state`.
            unsafe { (*qp).state = a.qp_state };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    ret_errno(|| {
        let q: &QpObj = unsafe { obj(qp) }?;
        let x = q.qp.query().map_err(err)?;
        if let Some(a) = unsafe { attr.as_mut() } {
            a.qp_state = x.qp_state as c_int;
            a.cur_qp_state = x.qp_state as c_int;
            a.path_mtu = x.path_mtu as c_int;
            a.path_mig_state = 0;
            a.qkey = x.qkey;
            a.rq_psn = x.rq_psn.value();
            a.sq_psn = x.sq_psn.value();
            a.dest_qp_num = x.dest_qp_num;
            a.qp_access_flags = x.qp_access_flags.0;
            a.cap = q.cap;
            a.ah_attr = ah_attr_of(&x.av);
            a.alt_ah_attr = ah_attr_of(&x.av);
            a.alt_ah_attr.is_global = 0;
            a.pkey_index = x.pkey_index;
            a.alt_pkey_index = 0;
            a.en_sqd_async_notify = 0;
            a.sq_draining = 0;
            a.max_rd_atomic = x.max_rd_atomic;
            a.max_dest_rd_atomic = x.max_dest_rd_atomic;
            a.min_rnr_timer = x.min_rnr_timer;
            a.port_num = x.port_num;
            a.timeout = x.timeout;
            a.retry_cnt = x.retry_cnt;
            a.rnr_retry = x.rnr_retry;
            a.alt_port_num = 0;
            a.alt_timeout = 0;
            a.rate_limit = 0;
        }
        if let Some(i) = unsafe { init.as_mut() } {
            i.qp_context = q.ibv.qp_context;
            i.send_cq = q.ibv.send_cq;
            i.recv_cq = q.ibv.recv_cq;
            i.srq = q.ibv.srq;
            i.cap = q.cap;
            i.qp_type = q.ibv.qp_type;
            i.sq_sig_all = q.sq_sig_all as c_int;
        }
        Ok(())
    })
}

/// The bytes of an inline send, read from the program's memory now.
/// `IBV_SEND_INLINE` lets the SGEs name any readable memory (their L_Keys
/// are not checked): the verbs contract is that `[addr, addr + length)` of
/// each is readable for the call (module docs, point 2), and it is copied
/// before the call returns.
unsafe fn inline_bytes(sg: &[Sge]) -> R<Vec<u8>> {
    let total: u64 = sg.iter().map(|s| u64::from(s.length)).sum();
    if total > u64::from(limits::MAX_INLINE) {
        return Err(EINVAL);
    }
    let mut v: Vec<u8> = Vec::with_capacity(total as usize);
    for s in sg.iter().filter(|s| s.length > 0) {
        let p = s.addr as usize as *const u8;
        if p.is_null() {
            return Err(EINVAL);
        }
        let at = v.len();
        // SAFETY: the program vouches for `length` readable bytes at `addr`
        // for this call; `v` has room for them (total reserved above).
        unsafe {
            std::ptr::copy_nonoverlapping(p, v.as_mut_ptr().add(at), s.length as usize);
            v.set_len(at + s.length as usize);
        }
    }
    Ok(v)
}

/// A send WR in the engine's terms, with its inline bytes if it has any.
unsafe fn send_wr(w: &ibv_send_wr, is_ud: bool) -> R<(SendWr, Option<Vec<u8>>)> {
    let sg = unsafe { sges(w.sg_list, w.num_sge) }?;
    // SAFETY: reading the union member the opcode selects (all are plain
    // integers and pointers, so any bytes are a valid value).
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let imm = u32::from_be(w.imm_data);
    let op = match w.opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm { imm },
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv { rkey: w.imm_data },
        IBV_WR_RDMA_WRITE => SendOp::Write { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        IBV_WR_RDMA_WRITE_WITH_IMM => {
            SendOp::WriteWithImm { remote_addr: rdma.remote_addr, rkey: rdma.rkey, imm }
        }
        IBV_WR_RDMA_READ => SendOp::Read { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => {
            SendOp::FetchAdd { remote_addr: atomic.remote_addr, rkey: atomic.rkey, add: atomic.compare_add }
        }
        _ => return Err(EINVAL),
    };
    let mut s = SendWr::new(w.wr_id, op, sg);
    s.signaled = w.send_flags & IBV_SEND_SIGNALED != 0;
    s.fence = w.send_flags & IBV_SEND_FENCE != 0;
    s.solicited = w.send_flags & IBV_SEND_SOLICITED != 0;
    s.inline = w.send_flags & IBV_SEND_INLINE != 0;
    if is_ud {
        // Only a UD QP's WRs hold `wr.ud`.
        let a: &AhObj = unsafe { obj(ud.ah) }?;
        s.ud = Some(a.ah.dest(ud.remote_qpn, ud.remote_qkey));
    }
    let data =
        if s.inline && !s.op.is_read_or_atomic() { Some(unsafe { inline_bytes(&s.sg_list) }?) } else { None };
    Ok((s, data))
}

unsafe extern "C" fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> c_int {
    ret_errno(|| {
        let q: &QpObj = unsafe { obj(qp) }?;
        let is_ud = q.qp.qp_type() == QpType::Ud;
        let set_bad = |p: *mut ibv_send_wr| {
            if !bad.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad = p };
            }
        };
        // One WR, the common case: no lists to build.
        if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
            let r = unsafe { send_wr(w, is_ud) }.and_then(|(s, data)| {
                match data {
                    Some(d) => q.qp.post_send_inline(s, &d),
                    None => q.qp.post_send(s),
                }
                .map_err(err)
            });
            if r.is_err() {
                set_bad(wr);
            }
            return r;
        }
        let mut ptrs = Vec::new();
        let mut wrs = Vec::new();
        let mut p = wr;
        while let Some(w) = unsafe { p.as_ref() } {
            let s = match unsafe { send_wr(w, is_ud) } {
                Ok(s) => s,
                Err(e) => {
                    // Post what came before, as a provider would have.
                    if let Err((i, _)) = q.qp.post_send_each(wrs) {
                        set_bad(ptrs[i]);
                        return Err(EINVAL);
                    }
                    set_bad(p);
                    return Err(e);
                }
            };
            ptrs.push(p);
            wrs.push(s);
            p = w.next;
        }
        q.qp.post_send_each(wrs).map_err(|(i, e)| {
            set_bad(ptrs[i]);
            err(e)
        })
    })
}

unsafe extern "C" fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int {
    ret_errno(|| {
        let q: &QpObj = unsafe { obj(qp) }?;
        // SAFETY: `wr` and `bad` come from the caller as ibv_post_recv's.
        unsafe { post_recv_chain(wr, bad, |r| q.qp.post_recv(r).map_err(err)) }
    })
}

/// `ibv_qp_to_qp_ex`: QPs are made by `ibv_create_qp`, never extended.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    set_errno(EOPNOTSUPP);
    null_mut()
}

// -------------------------------------------------------------------- AHs

fn create_ah(pd: *mut ibv_pd, av: AddressVector) -> R<*mut ibv_ah> {
    let p: &PdObj = unsafe { obj(pd) }?;
    let ah = p.pd.create_ah(av).map_err(err)?;
    p.users.fetch_add(1, Ordering::AcqRel);
    Ok(boxed(AhObj { ibv: ibv_ah { context: p.ibv.context, pd, handle: 0 }, ah, pd: p }).cast())
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ret_ptr(|| {
        let p: &PdObj = unsafe { obj(pd) }?;
        let port = unsafe { ctx_obj(p.ibv.context) }?.dev.local_addr().port();
        create_ah(pd, av_of(unsafe { attr.as_ref() }.ok_or(EINVAL)?, port)?)
    })
}

/// The address a UD receive came from, read from the 40-byte GRH area at
/// the start of its buffer: RoCEv2 over IPv4 places the IPv4 header in its
/// last 20 bytes, over IPv6 the IPv6 header fills it.
fn grh_source(grh: &[u8; 40]) -> std::net::IpAddr {
    if grh[20] >> 4 == 4 && grh[..20].iter().all(|&b| b == 0) {
        let s: [u8; 4] = grh[32..36].try_into().expect("4 bytes");
        std::net::IpAddr::from(s)
    } else {
        let s: [u8; 16] = grh[8..24].try_into().expect("16 bytes");
        roce::gid_from_bytes(s)
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    attr: *mut ibv_ah_attr,
) -> c_int {
    ret_minus1(|| {
        unsafe { ctx_obj(ctx) }?;
        let w = unsafe { wc.as_ref() }.ok_or(EINVAL)?;
        if port != 1 || grh.is_null() || w.wc_flags & roce::WC_GRH == 0 {
            return Err(EINVAL);
        }
        // SAFETY: a UD receive buffer's first 40 bytes (point 2).
        let g: [u8; 40] = unsafe { *(grh as *const [u8; 40]) };
        let mut av = AddressVector::new(grh_source(&g));
        av.hop_limit = 64;
        *unsafe { attr.as_mut() }.ok_or(EINVAL)? = ah_attr_of(&av);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    port: u8,
) -> *mut ibv_ah {
    ret_ptr(|| {
        let p: &PdObj = unsafe { obj(pd) }?;
        let mut a = ah_attr_of(&AddressVector::new(std::net::IpAddr::from([0u8; 4])));
        if unsafe { ibv_init_ah_from_wc(p.ibv.context, port, wc, grh, &mut a) } != 0 {
            return Err(EINVAL);
        }
        let port = unsafe { ctx_obj(p.ibv.context) }?.dev.local_addr().port();
        create_ah(pd, av_of(&a, port)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    ret_errno(|| unsafe { free_in_pd::<AhObj, _>(ah) })
}

// ----------------------------------------------------------- async events

#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(ctx: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    ret_minus1(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        let out = unsafe { event.as_mut() }.ok_or(EINVAL)?;
        loop {
            crate::sys::read_event(c.events.queue.fd.as_raw_fd())
                .map_err(|e| e.raw_os_error().unwrap_or(EIO))?;
            let Some(e) = c.events.queue.pop() else { continue };
            let ev = &c.events;
            let look = |m: &Mutex<std::collections::HashMap<u32, usize>>, k: u32| lock(m).get(&k).copied();
            let (ty, el) = match e {
                roce::AsyncEvent::CqErr(id) => (IBV_EVENT_CQ_ERR, look(&ev.cqs, id.0)),
                roce::AsyncEvent::QpFatal(n) => (IBV_EVENT_QP_FATAL, look(&ev.qps, n)),
                roce::AsyncEvent::QpReqErr(n) => (IBV_EVENT_QP_REQ_ERR, look(&ev.qps, n)),
                roce::AsyncEvent::QpAccessErr(n) => (IBV_EVENT_QP_ACCESS_ERR, look(&ev.qps, n)),
                roce::AsyncEvent::SqDrained(n) => (IBV_EVENT_SQ_DRAINED, look(&ev.qps, n)),
                roce::AsyncEvent::SrqLimitReached(id) => (IBV_EVENT_SRQ_LIMIT_REACHED, look(&ev.srqs, id.0)),
                _ => continue,
            };
            // An event of an object already destroyed is dropped.
            let Some(el) = el else { continue };
            out.event_type = ty;
            out.element = ibv_async_event_element { cq: el as *mut ibv_cq };
            return Ok(());
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}

// ------------------------------------------------------------------- misc

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
