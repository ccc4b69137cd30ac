//! Shared receive queues.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{EBUSY, EINVAL, EOPNOTSUPP};

use super::wr::post_recv_chain;
use super::{ctx_obj, err, free_in_pd, handle, obj, ret_errno, ret_ptr};
use crate::abi::*;
use crate::handle::{CPart, Handle};
use crate::objects::*;

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
        let context = c_field!(p, context);
        let h = Handle::new(SrqObj {
            ibv: CPart::new(ibv_srq {
                context,
                srq_context: a.srq_context,
                pd,
                handle: 0,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            }),
            srq,
            pd: unsafe { handle(pd) }?,
            max_wr: a.attr.max_wr,
            max_sge: a.attr.max_sge,
            limit: Mutex::new(a.attr.srq_limit),
            users: AtomicUsize::new(0),
        });
        p.users.fetch_add(1, Ordering::AcqRel);
        let c = unsafe { ctx_obj(context) }?;
        lock(&c.events.srqs).insert(id, h);
        Ok(h.to_c())
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
        let c = unsafe { ctx_obj(c_field!(s, context)) }?;
        lock(&c.events.srqs).remove(&s.srq.id().0);
        // SAFETY: the program's SRQ, unused, destroyed once.
        unsafe { free_in_pd::<SrqObj>(srq) }
    })
}

pub(super) unsafe extern "C" fn post_srq_recv(
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
