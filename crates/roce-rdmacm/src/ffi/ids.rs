//! Event channels, ids, addresses and routes, options, and events.

use std::ffi::{c_char, c_int, c_void};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{chan_obj, id_obj, ret, ret_ptr, R};
use crate::abi::*;
use crate::addr;
use crate::id::{registry, ChannelObj, IdObj, Raw, Shared};
use crate::queue::lock;

#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    ret_ptr(|| {
        // Opens the devices now, as rdma-core's `ucma_init` does.
        let _ = addr::devices();
        ChannelObj::new().map(|c| c.cast()).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    let p = channel.cast::<ChannelObj>();
    // A channel destroyed already (or never ours) is left alone.
    if crate::id::LIVE.channel_gone(p) {
        // SAFETY: the module's argument: a live channel of ours, destroyed
        // once (it is no longer live), with no id left on it (the
        // program's duty, as in rdma-core).
        drop(unsafe { Box::from_raw(p) });
    }
}

/// A new id on `channel` (NULL: a synchronous id with a private channel).
pub(super) fn create_id(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> R<*mut IdObj> {
    let _ = addr::devices();
    let (chan, sync) = if channel.is_null() {
        (ChannelObj::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?, true)
    } else if crate::id::LIVE.channel(channel.cast()) {
        (channel.cast::<ChannelObj>(), false)
    } else {
        return Err(libc::EINVAL);
    };
    // SAFETY: the module's argument, or just made.
    let ch = unsafe { (*chan).ch.clone() };
    let shared = Shared::new(ch, chan as usize, sync);
    Ok(IdObj::new(shared, chan, context, ps, qp_type))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    ret(|| {
        let out = unsafe { id.as_mut() }.ok_or(libc::EINVAL)?;
        let qp_type = match ps {
            RDMA_PS_TCP | RDMA_PS_IB => IBV_QPT_RC,
            RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
            _ => return Err(libc::EINVAL),
        };
        *out = create_id(channel, context, ps, qp_type)?.cast();
        Ok(())
    })
}

/// librdmacm's `ucma_complete`: a synchronous id waits for the event its
/// call caused, keeps it in `id->event` (acknowledged at the next call)
/// and turns a failure into the errno.
pub(super) fn complete(id: &IdObj) -> R<()> {
    let (sync, chan) = {
        let st = lock(&id.shared.st);
        (st.sync, st.channel_obj)
    };
    if !sync {
        return Ok(());
    }
    let c = id.c();
    // SAFETY: the C part on a call naming the id; `event` is ours.
    unsafe {
        if !(*c).event.is_null() {
            crate::events::ack((*c).event);
            (*c).event = std::ptr::null_mut();
        }
    }
    // SAFETY: the id's private channel, alive as long as the id.
    let ev = crate::events::get_event(unsafe { &*(chan as *const ChannelObj) })?;
    // SAFETY: as above; `ev` is a live event.
    let (event, status) = unsafe {
        (*c).event = ev;
        ((*ev).event, (*ev).status)
    };
    match status {
        0 => Ok(()),
        _ if event == RDMA_CM_EVENT_REJECTED => Err(libc::ECONNREFUSED),
        s => Err(s.abs()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        destroy(obj);
        Ok(())
    })
}

/// Closes the id's CM handles, drops its queued events (and the
/// connection requests waiting on a listener, whose connections close),
/// acknowledges its kept event, waits for the ones handed out, and frees
/// it (with its private channel).
pub(super) fn destroy(obj: &IdObj) {
    let sh = obj.shared.clone();
    let (conn, listeners) = {
        let mut st = lock(&sh.st);
        (std::mem::take(&mut st.conn), std::mem::take(&mut st.listeners))
    };
    registry(|r| {
        r.conns.remove(&conn);
        for l in &listeners {
            r.listeners.remove(l);
        }
    });
    for h in listeners.iter().copied().chain((conn != 0).then_some(conn)) {
        crate::backend::close(h);
        for c in registry(|r| r.forget(h)) {
            let _ = crate::backend::reject(c, 28, &[]);
            crate::backend::close(c);
        }
    }
    let (ch, sync, chan) = {
        let mut st = lock(&sh.st);
        st.dead = true;
        (st.channel.clone(), st.sync, st.channel_obj)
    };
    let dropped = ch.queue.extract(|p| Arc::ptr_eq(&p.id, &sh));
    for p in dropped {
        if let Raw::Wire(w) = p.raw {
            if matches!(w.kind, crate::backend::EV_REQ | crate::backend::EV_SIDR_REQ) {
                registry(|r| r.conns.remove(&w.conn));
                let _ = crate::backend::reject(w.conn, 28, &[]);
                crate::backend::close(w.conn);
            }
        }
    }
    let c = obj.c();
    // SAFETY: the C part, on the destroy call.
    unsafe {
        if !(*c).event.is_null() {
            crate::events::ack((*c).event);
            (*c).event = std::ptr::null_mut();
        }
    }
    let mut st = lock(&sh.st);
    while st.outstanding > 0 {
        st = sh.cond.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    drop(st);
    sh.obj.store(0, Ordering::Release);
    crate::id::LIVE.id_gone(obj);
    // SAFETY: the id, destroyed once (the module's argument, and no longer
    // live for `id_obj`); nothing refers to it any more.
    drop(unsafe { Box::from_raw(obj as *const IdObj as *mut IdObj) });
    if sync && crate::id::LIVE.channel_gone(chan as *const ChannelObj) {
        // SAFETY: the id's private channel, which only it used.
        drop(unsafe { Box::from_raw(chan as *mut ChannelObj) });
    }
}

/// Binds the id to `a` (device and port; a wildcard address binds no
/// device, as the kernel's `rdma_bind_addr`).
fn bind(obj: &IdObj, a: SocketAddr) -> R<()> {
    let port = if a.port() == 0 { addr::ephemeral_port() } else { a.port() };
    let a = SocketAddr::new(a.ip(), port);
    let dev = if a.ip().is_unspecified() {
        None
    } else {
        Some(addr::device_by_ip(a.ip()).ok_or(libc::EADDRNOTAVAIL)?)
    };
    let c = obj.c();
    // SAFETY: the C part on a call naming the id.
    unsafe {
        if let Some((_, d)) = dev {
            (*c).verbs = d.ctx();
            (*c).port_num = 1;
        }
    }
    lock(&obj.shared.st).dev = dev.map(|d| d.0);
    obj.set_route(Some(a), None, false);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, sa: *mut libc::sockaddr) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let a = unsafe { addr::from_sockaddr(sa) }?;
        bind(obj, a)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let dst = unsafe { addr::from_sockaddr(dst) }?;
        if dst.ip().is_unspecified() {
            return Err(libc::EINVAL);
        }
        let src = if src.is_null() { None } else { Some(unsafe { addr::from_sockaddr(src) }?) };
        let bound = lock(&obj.shared.st).dev;
        let (dev, port) = match (src, bound) {
            (Some(s), _) if !s.ip().is_unspecified() => {
                (addr::device_by_ip(s.ip()).ok_or(libc::EADDRNOTAVAIL)?, s.port())
            }
            (_, Some(i)) => ((i, &addr::devices()[i]), obj.src().map_or(0, |a| a.port())),
            (s, None) => (addr::route(dst.ip())?, s.map_or(0, |a| a.port())),
        };
        if dev.1.ip.is_ipv4() != dst.ip().is_ipv4() {
            return Err(libc::EAFNOSUPPORT);
        }
        let port = if port == 0 { addr::ephemeral_port() } else { port };
        bind(obj, SocketAddr::new(dev.1.ip, port))?;
        obj.set_route(None, Some(dst), false);
        crate::id::post(&obj.shared, Raw::Local { event: RDMA_CM_EVENT_ADDR_RESOLVED, status: 0 });
        complete(obj)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        if obj.dst().is_none() || lock(&obj.shared.st).dev.is_none() {
            return Err(libc::EINVAL);
        }
        obj.set_route(None, None, true);
        crate::id::post(&obj.shared, Raw::Local { event: RDMA_CM_EVENT_ROUTE_RESOLVED, status: 0 });
        complete(obj)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    ret(|| {
        let ch = unsafe { chan_obj(channel) }?;
        let out = unsafe { event.as_mut() }.ok_or(libc::EINVAL)?;
        *out = crate::events::get_event(ch)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ret(|| {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        unsafe { crate::events::ack(event) };
        Ok(())
    })
}

fn port_of(st: &libc::sockaddr_storage) -> u16 {
    addr::from_storage(st).map_or(0, |a| a.port()).to_be()
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    match unsafe { id.as_ref() } {
        Some(c) => port_of(&c.route.addr.src_addr),
        None => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    match unsafe { id.as_ref() } {
        Some(c) => port_of(&c.route.addr.dst_addr),
        None => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    ret_ptr(|| {
        let devs = addr::devices();
        let n = devs.len();
        // SAFETY: a fresh array of n + 1 pointers, freed by rdma_free_devices.
        let list = unsafe { libc::calloc(n + 1, std::mem::size_of::<*mut ibv_context>()) }
            .cast::<*mut ibv_context>();
        if list.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, d) in devs.iter().enumerate() {
            // SAFETY: within the array.
            unsafe { *list.add(i) = d.ctx() };
        }
        if let Some(num) = unsafe { num.as_mut() } {
            *num = c_int::try_from(n).unwrap_or(c_int::MAX);
        }
        Ok(list)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: an array from rdma_get_devices, freed once (or NULL).
    unsafe { libc::free(list.cast()) };
}

#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    let s: &'static std::ffi::CStr = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        let byte = || -> R<u8> {
            if optlen != 1 {
                return Err(libc::EINVAL);
            }
            Ok(unsafe { *optval.cast::<u8>() })
        };
        let int = || -> R<c_int> {
            if optlen != std::mem::size_of::<c_int>() {
                return Err(libc::EINVAL);
            }
            Ok(unsafe { optval.cast::<c_int>().read_unaligned() })
        };
        match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => lock(&obj.shared.st).tos = byte()?,
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
                lock(&obj.shared.st).ack_timeout = Some(byte()?.min(31))
            }
            // One address per device and no port sharing between
            // processes: the socket options change nothing, as for an
            // IPv4-only id.
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) => {
                int()?;
            }
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
                // A path given by the program (ibacm's): the RoCE route is
                // made from the addresses all the same.
                if optlen == 0 || obj.dst().is_none() {
                    return Err(libc::EINVAL);
                }
                obj.set_route(None, None, true);
                crate::id::post(&obj.shared, Raw::Local { event: RDMA_CM_EVENT_ROUTE_RESOLVED, status: 0 });
            }
            _ => return Err(libc::ENOSYS),
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let (old_sync, old_chan) = {
            let st = lock(&obj.shared.st);
            (st.sync, st.channel_obj)
        };
        if old_sync && channel.is_null() {
            return Err(libc::EINVAL);
        }
        let (new_chan, sync) = if channel.is_null() {
            (ChannelObj::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?, true)
        } else {
            (channel.cast::<ChannelObj>(), false)
        };
        let c = obj.c();
        if old_sync {
            // SAFETY: the C part on a call naming the id.
            unsafe {
                if !(*c).event.is_null() {
                    crate::events::ack((*c).event);
                    (*c).event = std::ptr::null_mut();
                }
            }
        }
        // SAFETY: a live channel (the module's argument, or just made).
        let new_ch = unsafe { (*new_chan).ch.clone() };
        {
            // Under the registry's lock nothing is queued for the id
            // meanwhile (`on_cm_event`); its queued events move along.
            let _g = lock(&crate::id::REGISTRY);
            let mut st = lock(&obj.shared.st);
            let moved = st.channel.queue.extract(|p| Arc::ptr_eq(&p.id, &obj.shared));
            st.channel = new_ch.clone();
            st.channel_obj = new_chan as usize;
            st.sync = sync;
            for p in moved {
                new_ch.queue.push(p);
            }
        }
        // SAFETY: the C part.
        unsafe { (*c).channel = new_chan.cast() };
        let mut st = lock(&obj.shared.st);
        while st.outstanding > 0 {
            st = obj.shared.cond.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        drop(st);
        if old_sync && crate::id::LIVE.channel_gone(old_chan as *const ChannelObj) {
            // SAFETY: the id's old private channel, which only it used.
            drop(unsafe { Box::from_raw(old_chan as *mut ChannelObj) });
        }
        Ok(())
    })
}
