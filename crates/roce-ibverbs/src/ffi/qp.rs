//! Queue pairs: creation, state changes, queries.

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use libc::{EINVAL, EOPNOTSUPP};
use roce::{Access, AttrMask, PathMtu, QpAttr, QpState, QpType};
use roce_proto::limits;

use super::ah::{ah_attr_of, av_of};
use super::{ctx_obj, err, free_in_pd, handle, obj, ret_errno, ret_ptr, R};
use crate::abi::*;
use crate::handle::{CPart, Handle};
use crate::objects::*;
use crate::sys::set_errno;

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
        let (scq_h, rcq_h) = unsafe { (handle::<CqObj>(a.send_cq)?, handle::<CqObj>(a.recv_cq)?) };
        let srq_h = if a.srq.is_null() { None } else { Some(unsafe { handle::<SrqObj>(a.srq) }?) };
        // SAFETY: the program's live objects (point 1).
        let (scq, rcq, srq) = unsafe { (scq_h.get(), rcq_h.get(), srq_h.map(|h| h.get())) };
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
        let context = c_field!(p, context);
        let h = Handle::new(QpObj {
            ibv: CPart::new(ibv_qp {
                context,
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
            }),
            qp,
            cap,
            sq_sig_all: a.sq_sig_all != 0,
            pd: unsafe { handle(pd) }?,
            send_cq: scq_h,
            recv_cq: rcq_h,
            srq: srq_h,
        });
        p.users.fetch_add(1, Ordering::AcqRel);
        scq.users.fetch_add(1, Ordering::AcqRel);
        lock(&scq.senders).push(qpn);
        rcq.users.fetch_add(1, Ordering::AcqRel);
        if let Some(s) = srq {
            s.users.fetch_add(1, Ordering::AcqRel);
        }
        let c = unsafe { ctx_obj(context) }?;
        lock(&c.events.qps).insert(qpn, h);
        Ok(h.to_c())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    ret_errno(|| {
        let q: &QpObj = unsafe { obj(qp) }?;
        let c = unsafe { ctx_obj(c_field!(q, context)) }?;
        lock(&c.events.qps).remove(&q.qp.qpn());
        let (scq, rcq, srq) = (q.send_cq, q.recv_cq, q.srq);
        let qpn = q.qp.qpn();
        // SAFETY: the program's QP, destroyed once; `q` is not used again.
        unsafe { free_in_pd::<QpObj>(qp) }?;
        // SAFETY: what a QP uses outlives it (their destroys fail while used).
        let (scq, rcq, srq) = unsafe { (scq.get(), rcq.get(), srq.map(|s| s.get())) };
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
            let port = unsafe { ctx_obj(c_field!(q, context)) }?.dev.local_addr().port();
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
            // SAFETY: the QP's C part, written through its raw pointer
            // (programs read `state`); no reference to it is held.
            unsafe { (*q.ibv.get()).state = a.qp_state };
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
            i.qp_context = c_field!(q, qp_context);
            i.send_cq = c_field!(q, send_cq);
            i.recv_cq = c_field!(q, recv_cq);
            i.srq = c_field!(q, srq);
            i.cap = q.cap;
            i.qp_type = c_field!(q, qp_type);
            i.sq_sig_all = q.sq_sig_all as c_int;
        }
        Ok(())
    })
}

/// `ibv_qp_to_qp_ex`: QPs are made by `ibv_create_qp`, never extended.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    set_errno(EOPNOTSUPP);
    null_mut()
}
