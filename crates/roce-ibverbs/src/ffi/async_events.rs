//! The async events of a context.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::Mutex;

use libc::{EINVAL, EIO};

use super::{ctx_obj, ret_minus1};
use crate::abi::*;
use crate::handle::{CObject, Handle};
use crate::objects::*;

#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(ctx: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    ret_minus1(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        let out = unsafe { event.as_mut() }.ok_or(EINVAL)?;
        loop {
            let e = c.events.queue.take().map_err(|e| e.raw_os_error().unwrap_or(EIO))?;
            let ev = &c.events;
            fn look<W: CObject>(m: &Mutex<HashMap<u32, Handle<W>>>, k: u32) -> Option<*mut W::C> {
                lock(m).get(&k).map(|h| h.to_c())
            }
            use roce::AsyncEvent as E;
            let (ty, el) = match e {
                E::CqErr(id) => {
                    (IBV_EVENT_CQ_ERR, look(&ev.cqs, id.0).map(|cq| ibv_async_event_element { cq }))
                }
                E::QpFatal(n) => {
                    (IBV_EVENT_QP_FATAL, look(&ev.qps, n).map(|qp| ibv_async_event_element { qp }))
                }
                E::QpReqErr(n) => {
                    (IBV_EVENT_QP_REQ_ERR, look(&ev.qps, n).map(|qp| ibv_async_event_element { qp }))
                }
                E::QpAccessErr(n) => {
                    (IBV_EVENT_QP_ACCESS_ERR, look(&ev.qps, n).map(|qp| ibv_async_event_element { qp }))
                }
                E::SqDrained(n) => {
                    (IBV_EVENT_SQ_DRAINED, look(&ev.qps, n).map(|qp| ibv_async_event_element { qp }))
                }
                E::SrqLimitReached(id) => (
                    IBV_EVENT_SRQ_LIMIT_REACHED,
                    look(&ev.srqs, id.0).map(|srq| ibv_async_event_element { srq }),
                ),
                _ => continue,
            };
            // An event of an object destroyed since it was routed here is
            // dropped, as the kernel drops a destroyed object's events.
            let Some(el) = el else { continue };
            out.event_type = ty;
            out.element = el;
            return Ok(());
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}
