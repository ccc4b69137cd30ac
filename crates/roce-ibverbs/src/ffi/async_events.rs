//! The async events of a context.

use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use libc::{EINVAL, EIO};

use super::{ctx_obj, ret_minus1};
use crate::abi::*;
use crate::objects::*;

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
