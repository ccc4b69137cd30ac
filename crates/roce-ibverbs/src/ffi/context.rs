//! Devices and contexts: the device list, opening and closing a context
//! (contexts of one device share its engine), the ops tables, and the
//! device, port, GID and P_Key queries.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use std::panic::catch_unwind;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, OnceLock};

use libc::{EINVAL, EIO, ENOMEM};
use roce_proto::limits;

use super::cq::{poll_cq, req_notify_cq};
use super::srq::post_srq_recv;
use super::wr::{post_recv, post_send};
use super::{boxed, c_name, ctx_obj, err, handle, ret_errno, ret_minus1, ret_ptr, R};
use crate::abi::*;
use crate::config::DeviceEntry;
use crate::handle::CPart;
use crate::objects::*;
use crate::sys::set_errno;

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

/// How many devices the library offers (`ibv_device::dev_name` is
/// `uverbsN` for N below it).
pub(crate) fn device_count() -> usize {
    devices().devices.len()
}

/// The device whose `ibv_device` is at `d` (an address compared, never
/// read).
fn device_obj(d: *mut ibv_device) -> R<&'static DeviceObj> {
    devices().devices.iter().find(|o| std::ptr::eq(&o.ibv, d)).ok_or(EINVAL)
}

/// A device opened in this process, with how many contexts use it:
/// contexts of one device share its socket, engine and async events.
struct Open {
    name: String,
    dev: roce::Device,
    events: Arc<DeviceEvents>,
    contexts: usize,
}

static OPEN: Mutex<Vec<Open>> = Mutex::new(Vec::new());

fn open_dev(entry: &DeviceEntry) -> R<(roce::Device, Arc<DeviceEvents>)> {
    let mut open = lock(&OPEN);
    if let Some(o) = open.iter_mut().find(|o| o.name == entry.name) {
        o.contexts += 1;
        return Ok((o.dev.clone(), o.events.clone()));
    }
    let dev = roce::Device::open(roce::DeviceConfig::new(entry.addr)).map_err(|e| {
        eprintln!("libibverbs (roce): {} at {}: {e}", entry.name, entry.addr);
        err(e)
    })?;
    let events = DeviceEvents::new(dev.clone());
    open.push(Open { name: entry.name.clone(), dev: dev.clone(), events: events.clone(), contexts: 1 });
    if std::env::var_os("ROCE_COUNTERS").is_some() {
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a function without arguments that the C
        // library calls once at exit; it only reads the devices' state.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(counters_at_exit);
        });
    }
    Ok((dev, events))
}

/// At exit, with `ROCE_COUNTERS`: the counters of every device still open
/// (a program may exit without closing its contexts, and librdmacm keeps
/// one open on every device for the process's life, as rdma-core's does).
extern "C" fn counters_at_exit() {
    let _ = catch_unwind(|| {
        for o in lock(&OPEN).iter() {
            print_counters(&o.name, &o.dev);
        }
    });
}

/// `ROCE_COUNTERS=1`: a device's counters on stderr (what `roce perf
/// --counters` shows), when its last context closes or at exit.
fn print_counters(name: &str, dev: &roce::Device) {
    let c = dev.counters();
    let nonzero: Vec<String> = c.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k}={v}")).collect();
    let d = dev.driver_stats();
    let b = &d.socket_buffers;
    let mut text = format!(
        "libibverbs (roce): {name} counters: {} drive_takeovers={} rx_dropped_socket_full={} \
         rx_errors={} tx_dropped={} tx_errors={} rcvbuf={}/{}{} sndbuf={}/{}{}\n",
        nonzero.join(" "),
        d.drive_takeovers,
        d.rx_dropped,
        d.rx_errors,
        d.tx_dropped,
        d.tx_errors,
        b.recv_granted,
        b.recv_requested,
        if b.recv_forced { " (forced)" } else { "" },
        b.send_granted,
        b.send_requested,
        if b.send_forced { " (forced)" } else { "" },
    );
    if let Some(w) = &d.socket_buffer_warning {
        text.push_str(&format!("libibverbs (roce): {name} warning: {w}\n"));
    }
    // One write, so that lines of processes sharing the stream (ranks
    // under mpirun) do not interleave.
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
}

fn close_dev(name: &str) {
    let mut open = lock(&OPEN);
    if let Some(i) = open.iter().position(|o| o.name == name) {
        open[i].contexts -= 1;
        if open[i].contexts == 0 {
            let Open { name, dev, events, .. } = open.remove(i);
            events.close();
            if std::env::var_os("ROCE_COUNTERS").is_some() {
                print_counters(&name, &dev);
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
    ret_ptr(|| Ok(device_obj(d)?.ibv.name.as_ptr() as *mut c_char))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(d: *mut ibv_device) -> c_int {
    catch_unwind(|| device_obj(d).map_or(-1, |o| o.index as c_int)).unwrap_or(-1)
}

fn guid_of(addr: std::net::IpAddr) -> u64 {
    // An EUI-64 made from the address's last 6 bytes, locally administered.
    let b = roce::gid_to_bytes(addr);
    let g = [0x02, b[10], b[11], 0xff, 0xfe, b[13], b[14], b[15]];
    u64::from_ne_bytes(g)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(d: *mut ibv_device) -> u64 {
    catch_unwind(|| device_obj(d).map_or(0, |o| guid_of(o.entry.addr.ip()))).unwrap_or(0)
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
        let dobj = device_obj(d)?;
        let (dev, device_events) = open_dev(&dobj.entry)?;
        let events = match AsyncEvents::new() {
            Ok(e) => Arc::new(e),
            Err(e) => {
                close_dev(&dobj.entry.name);
                return Err(e.raw_os_error().unwrap_or(EIO));
            }
        };
        let fd = events.queue.fd.as_raw_fd();
        device_events.attach(events.clone());
        device_events.drain();
        let vctx = CPart::new(verbs_context_for(d, fd));
        // The program's pointer is the `context` inside the `verbs_context`,
        // with the whole wrapper's provenance (`Handle::to_c`).
        Ok(boxed(ContextObj { vctx, dev, device: dobj, events, device_events }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    ret_errno(|| {
        // SAFETY: the program's context, closed once (point 1).
        let h = unsafe { handle::<ContextObj>(ctx) }?;
        // SAFETY: alive until freed below.
        let c = unsafe { h.get() };
        let name = &c.device.entry.name;
        c.device_events.detach(&c.events);
        // SAFETY: the context is the program's to close, once; `c` is not
        // used afterwards.
        unsafe { h.free() };
        close_dev(name);
        Ok(())
    })
}

fn fill_device_attr(c: &ContextObj, a: &mut ibv_device_attr) {
    use limits::*;
    let dev = c.device;
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

/// Port 1's attributes; its active MTU follows the device's link, as
/// rxe's follows its netdev (`Device::active_mtu`).
fn port_attr(c: &ContextObj, port: u8) -> R<ibv_port_attr> {
    if port != 1 {
        return Err(EINVAL);
    }
    Ok(ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: IBV_MTU_4096,
        active_mtu: c.dev.active_mtu() as c_int,
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
        let c = unsafe { ctx_obj(ctx) }?;
        unsafe { write_port_attr(&port_attr(c, port)?, out, COMPAT_PORT_ATTR_LEN) }
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
        let c = unsafe { ctx_obj(ctx) }?;
        unsafe { write_port_attr(&port_attr(c, port)?, out, len) }
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

/// `ibv_query_gid_table`: every GID of every port, `entry_size` bytes
/// apart (a larger caller's entries keep their tail). One port with one
/// GID: returns 1, or `-EINVAL` (rdma-core's negative errno) for unknown
/// flags, a short entry or no room.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let r = catch_unwind(|| -> R<isize> {
        let c = unsafe { ctx_obj(ctx) }?;
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() || max_entries < 1 {
            return Err(EINVAL);
        }
        let e = unsafe { entries.as_mut() }.ok_or(EINVAL)?;
        *e = ibv_gid_entry {
            gid: ibv_gid { raw: gid_of(c) },
            gid_index: 0,
            port_num: 1,
            gid_type: IBV_GID_TYPE_ROCE_V2,
            ndev_ifindex: 0,
        };
        Ok(1)
    });
    match r {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => -(e as isize),
        Err(_) => -(EIO as isize),
    }
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
