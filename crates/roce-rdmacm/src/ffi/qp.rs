//! QPs, SRQs and endpoints: made through libibverbs with the id's device
//! context and PD, and CQs (with completion channels) made for the id
//! when the program gives none (librdmacm's `ucma_create_cqs`), which the
//! `rdma_verbs.h` inline helpers (`rdma_get_send_comp` ...) use.

use std::ffi::c_int;
use std::ptr::null_mut;

use super::{id_obj, ret, R};
use crate::abi::*;
use crate::addr;
use crate::id::IdObj;
use crate::queue::lock;
use crate::verbs::vfn;

fn errno_or(e: c_int) -> c_int {
    if e == 0 {
        libc::EIO
    } else {
        e
    }
}

/// The id's device, or `EINVAL` (not bound or resolved yet).
fn device(obj: &IdObj) -> R<&'static addr::Device> {
    let i = lock(&obj.shared.st).dev.ok_or(libc::EINVAL)?;
    addr::devices().get(i).ok_or(libc::EINVAL)
}

/// Makes a CQ (and its channel) of `size` entries for the id.
fn make_cq(obj: &IdObj, size: u32) -> R<(*mut ibv_comp_channel, *mut ibv_cq)> {
    // SAFETY: the C part on a call naming the id.
    let ctx = unsafe { (*obj.c()).verbs };
    // SAFETY: an open context of the library.
    let ch = unsafe { vfn!(ibv_create_comp_channel)?(ctx) };
    if ch.is_null() {
        return Err(errno_or(crate::sys::errno()));
    }
    let cqe = c_int::try_from(size.max(1)).unwrap_or(c_int::MAX);
    // SAFETY: as above; `ch` was made on it.
    let cq = unsafe { vfn!(ibv_create_cq)?(ctx, cqe, obj.c().cast(), ch, 0) };
    if cq.is_null() {
        let e = crate::sys::errno();
        // SAFETY: just made, unused.
        unsafe { vfn!(ibv_destroy_comp_channel)?(ch) };
        return Err(errno_or(e));
    }
    Ok((ch, cq))
}

/// Destroys the CQs and channels `rdma_create_qp` made for the id.
fn destroy_cqs(obj: &IdObj) {
    let mut st = lock(&obj.shared.st);
    if !st.own_cqs {
        return;
    }
    st.own_cqs = false;
    drop(st);
    let c = obj.c();
    // SAFETY: the C part; the CQs and channels are the id's own, and the
    // QP using them is gone.
    unsafe {
        for (cq, ch) in [((*c).recv_cq, (*c).recv_cq_channel), ((*c).send_cq, (*c).send_cq_channel)] {
            if !cq.is_null() {
                if let Ok(f) = vfn!(ibv_destroy_cq) {
                    f(cq);
                }
            }
            if !ch.is_null() {
                if let Ok(f) = vfn!(ibv_destroy_comp_channel) {
                    f(ch);
                }
            }
        }
        (*c).recv_cq = null_mut();
        (*c).send_cq = null_mut();
        (*c).recv_cq_channel = null_mut();
        (*c).send_cq_channel = null_mut();
    }
}

/// `rdma_create_qp`'s work on a plain `ibv_qp_init_attr`.
fn create_qp(obj: &IdObj, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> R<()> {
    let c = obj.c();
    // SAFETY: the C part on a call naming the id.
    unsafe {
        if !(*c).qp.is_null() {
            return Err(libc::EINVAL);
        }
    }
    let d = device(obj)?;
    let pd = if pd.is_null() {
        // SAFETY: the C part.
        let own = unsafe { (*c).pd };
        if own.is_null() {
            d.pd()?
        } else {
            own
        }
    } else {
        // SAFETY: the program's PD (the contract).
        if unsafe { (*pd).context } != d.ctx() {
            return Err(libc::EINVAL);
        }
        pd
    };
    // SAFETY: the C part.
    let (id_send, id_recv) = unsafe { ((*c).send_cq, (*c).recv_cq) };
    if (!id_recv.is_null() && !attr.recv_cq.is_null() && id_recv != attr.recv_cq)
        || (!id_send.is_null() && !attr.send_cq.is_null() && id_send != attr.send_cq)
    {
        return Err(libc::EINVAL);
    }
    let mut made = false;
    if attr.recv_cq.is_null() && id_recv.is_null() {
        let (ch, cq) = make_cq(obj, attr.cap.max_recv_wr)?;
        // SAFETY: the C part.
        unsafe {
            (*c).recv_cq_channel = ch;
            (*c).recv_cq = cq;
        }
        made = true;
    }
    if attr.send_cq.is_null() && id_send.is_null() {
        match make_cq(obj, attr.cap.max_send_wr) {
            Ok((ch, cq)) => unsafe {
                (*c).send_cq_channel = ch;
                (*c).send_cq = cq;
            },
            Err(e) => {
                lock(&obj.shared.st).own_cqs = made;
                destroy_cqs(obj);
                return Err(e);
            }
        }
        made = true;
    }
    if made {
        lock(&obj.shared.st).own_cqs = true;
    }
    // SAFETY: the C part.
    unsafe {
        if attr.send_cq.is_null() {
            attr.send_cq = (*c).send_cq;
        }
        if attr.recv_cq.is_null() {
            attr.recv_cq = (*c).recv_cq;
        }
        if attr.srq.is_null() && !(*c).srq.is_null() {
            attr.srq = (*c).srq;
        }
        (*c).qp_type = attr.qp_type;
    }
    // SAFETY: a PD of the id's device; `attr` is valid for the call.
    let qp = unsafe { vfn!(ibv_create_qp)?(pd, attr) };
    if qp.is_null() {
        let e = errno_or(crate::sys::errno());
        destroy_cqs(obj);
        return Err(e);
    }
    if let Err(e) = crate::qp::init_new_qp(obj, qp, attr.qp_type == IBV_QPT_UD) {
        // SAFETY: just made, unused.
        unsafe { vfn!(ibv_destroy_qp)?(qp) };
        destroy_cqs(obj);
        return Err(e);
    }
    // SAFETY: the C part.
    unsafe {
        (*c).pd = pd;
        (*c).qp = qp;
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        create_qp(obj, pd, a)
    })
}

/// `rdma_create_qp_ex`: the extended attributes this library can pass to
/// `ibv_create_qp` (a PD; no XRC, TSO, RSS, source QPN or create flags:
/// those are `EOPNOTSUPP`, as roce's libibverbs lacks them).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        const SEND_OPS_FLAGS: u32 = 1 << 6;
        if a.comp_mask & !(IBV_QP_INIT_ATTR_PD | SEND_OPS_FLAGS) != 0 || a.create_flags != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 { a.pd } else { null_mut() };
        let mut plain = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        create_qp(obj, pd, &mut plain)?;
        a.send_cq = plain.send_cq;
        a.recv_cq = plain.recv_cq;
        a.srq = plain.srq;
        a.cap = plain.cap;
        a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        // SAFETY: the C part.
        a.pd = unsafe { (*obj.c()).pd };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    let _ = ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let c = obj.c();
        // SAFETY: the C part; the QP is the id's.
        unsafe {
            if !(*c).qp.is_null() {
                vfn!(ibv_destroy_qp)?((*c).qp);
                (*c).qp = null_mut();
            }
        }
        destroy_cqs(obj);
        Ok(())
    });
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        let d = device(obj)?;
        let c = obj.c();
        let pd = if pd.is_null() {
            // SAFETY: the C part.
            let own = unsafe { (*c).pd };
            if own.is_null() {
                d.pd()?
            } else {
                own
            }
        } else {
            pd
        };
        // SAFETY: a PD of the device; `a` valid for the call.
        let srq = unsafe { vfn!(ibv_create_srq)?(pd, a) };
        if srq.is_null() {
            return Err(errno_or(crate::sys::errno()));
        }
        // SAFETY: the C part.
        unsafe {
            (*c).pd = pd;
            (*c).srq = srq;
        }
        Ok(())
    })
}

/// `rdma_create_srq_ex`: basic SRQs only (no XRC or tag matching:
/// `EOPNOTSUPP`).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int {
    const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1;
    const IBV_SRQ_INIT_ATTR_PD: u32 = 2;
    const IBV_SRQT_BASIC: c_int = 0;
    let a = match unsafe { attr.as_ref() } {
        Some(a) => *a,
        None => return ret(|| Err(libc::EINVAL)),
    };
    if a.comp_mask & !(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD) != 0
        || (a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC)
    {
        return ret(|| Err(libc::EOPNOTSUPP));
    }
    let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 { a.pd } else { null_mut() };
    let mut plain = ibv_srq_init_attr { srq_context: a.srq_context, attr: a.attr };
    unsafe { rdma_create_srq(id, pd, &mut plain) }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    let _ = ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let c = obj.c();
        // SAFETY: the C part; the SRQ is the id's.
        unsafe {
            if !(*c).srq.is_null() {
                vfn!(ibv_destroy_srq)?((*c).srq);
                (*c).srq = null_mut();
            }
        }
        Ok(())
    });
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret(|| {
        let out = unsafe { id.as_mut() }.ok_or(libc::EINVAL)?;
        let res = unsafe { res.as_ref() }.ok_or(libc::EINVAL)?;
        let obj_p = super::ids::create_id(null_mut(), null_mut(), res.ai_port_space, res.ai_qp_type)?;
        let cid: *mut rdma_cm_id = obj_p.cast();
        // SAFETY: just made.
        let obj = unsafe { &*obj_p };
        let r = (|| -> R<()> {
            if res.ai_flags & RAI_PASSIVE != 0 {
                if unsafe { super::ids::rdma_bind_addr(cid, res.ai_src_addr) } != 0 {
                    return Err(crate::sys::errno());
                }
                if !pd.is_null() {
                    // SAFETY: the C part.
                    unsafe { (*obj.c()).pd = pd };
                }
                if let Some(a) = unsafe { qp_init_attr.as_ref() } {
                    let mut a = *a;
                    a.qp_type = res.ai_qp_type;
                    lock(&obj.shared.st).qp_init_attr = Some(crate::id::QpInit(a));
                }
                return Ok(());
            }
            if unsafe { super::ids::rdma_resolve_addr(cid, res.ai_src_addr, res.ai_dst_addr, 2000) } != 0 {
                return Err(crate::sys::errno());
            }
            if unsafe { super::ids::rdma_resolve_route(cid, 2000) } != 0 {
                return Err(crate::sys::errno());
            }
            if let Some(a) = unsafe { qp_init_attr.as_mut() } {
                a.qp_type = res.ai_qp_type;
                create_qp(obj, pd, a)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                *out = cid;
                Ok(())
            }
            Err(e) => {
                unsafe { rdma_destroy_ep(cid) };
                Err(e)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    if id.is_null() {
        return;
    }
    unsafe {
        if !(*id).qp.is_null() {
            rdma_destroy_qp(id);
        }
        if !(*id).srq.is_null() {
            rdma_destroy_srq(id);
        }
        super::ids::rdma_destroy_id(id);
    }
}

/// `rdma_get_request`: the next connection request on a synchronous
/// listener, its new id given a QP like the listener's `rdma_create_ep`
/// asked for.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(listen) }?;
        let out = unsafe { id.as_mut() }.ok_or(libc::EINVAL)?;
        let (sync, chan, qp_attr) = {
            let st = lock(&obj.shared.st);
            (st.sync, st.channel_obj, st.qp_init_attr)
        };
        if !sync {
            return Err(libc::EINVAL);
        }
        let c = obj.c();
        // SAFETY: the C part on a call naming the id.
        unsafe {
            if !(*c).event.is_null() {
                crate::events::ack((*c).event);
                (*c).event = null_mut();
            }
        }
        // SAFETY: the listener's private channel, alive with it.
        let ev = crate::events::get_event(unsafe { &*(chan as *const crate::id::ChannelObj) })?;
        // SAFETY: a live event.
        let (kind, status, new) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        let fail = |e: c_int| {
            // SAFETY: the C part; the event is kept as rdma-core keeps it.
            unsafe { (*c).event = ev };
            Err(e)
        };
        if kind == RDMA_CM_EVENT_REJECTED {
            return fail(libc::ECONNREFUSED);
        }
        if status != 0 {
            return fail(status.abs());
        }
        if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
            return fail(libc::EINVAL);
        }
        if let Some(crate::id::QpInit(mut a)) = qp_attr {
            // SAFETY: the new id (just made by the event) and the
            // listener's C part.
            let nobj = unsafe { id_obj(new) }?;
            if let Err(e) = create_qp(nobj, unsafe { (*c).pd }, &mut a) {
                return fail(e);
            }
        }
        // SAFETY: the new id's C part: it keeps the event.
        unsafe { (*new).event = ev };
        *out = new;
        Ok(())
    })
}
