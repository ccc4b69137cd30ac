//! `rdma_get_cm_event`'s work: each queued item becomes an
//! `rdma_cm_event`, after the steps librdmacm takes itself (cma.c v44's
//! `rdma_get_cm_event`): a connection request gets its new id; a REP on
//! an id with a QP moves the QP to RTR and RTS, sends the RTU and is
//! reported ESTABLISHED (CONNECT_RESPONSE without a QP, for
//! `rdma_establish`); a REJ moves the QP to ERR and reports REJECTED with
//! the reason as status (the IB CM's, as the kernel reports it on RoCE).
//!
//! Events are boxed [`EventBox`]es (the C event first, then the private
//! data it points into) until `rdma_ack_cm_event` frees them.

use std::ffi::c_int;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::abi::*;
use crate::backend::{self, CmEvent};
use crate::id::{registry, ChannelObj, IdObj, Pending, Raw, Remote, Shared};
use crate::queue::lock;

type R<T> = Result<T, c_int>;

#[repr(C)]
pub struct EventBox {
    pub ev: rdma_cm_event,
    pub data: [u8; 256],
    /// The id whose count of unacknowledged events this is in (the
    /// listener's, for a connection request, as in rdma-core).
    pub owner: Arc<Shared>,
}

/// The C part of the id `sh` stands for.
fn obj_of<'a>(sh: &Shared) -> Option<&'a IdObj> {
    let p = sh.obj.load(Ordering::Acquire) as *const IdObj;
    // SAFETY: set to a live IdObj, and cleared before it is freed, which
    // happens only in rdma_destroy_id once its events are gone (id's
    // argument); callers use it within the event's processing.
    unsafe { p.as_ref() }
}

fn new_event(owner: Arc<Shared>, id: &IdObj, event: c_int, status: c_int) -> Box<EventBox> {
    // SAFETY: all-zero is valid for `rdma_cm_event` (NULL pointers).
    let mut ev: rdma_cm_event = unsafe { std::mem::zeroed() };
    ev.id = id.c();
    ev.event = event;
    ev.status = status;
    Box::new(EventBox { ev, data: [0; 256], owner })
}

fn copy_conn(b: &mut EventBox, w: &CmEvent) {
    let pd = w.private_data();
    b.data[..pd.len()].copy_from_slice(pd);
    let p = rdma_conn_param {
        private_data: if pd.is_empty() { std::ptr::null() } else { b.data.as_ptr().cast() },
        private_data_len: w.private_data_len,
        responder_resources: w.responder_resources,
        initiator_depth: w.initiator_depth,
        flow_control: w.flow_control,
        retry_count: w.retry_count,
        rnr_retry_count: w.rnr_retry_count,
        srq: w.srq,
        qp_num: w.remote_qpn,
    };
    b.ev.param.conn = p;
}

fn copy_ud(b: &mut EventBox, w: &CmEvent, id: &IdObj) {
    let pd = w.private_data();
    b.data[..pd.len()].copy_from_slice(pd);
    // The peer: the id's destination (a SIDR_REP names no address), else
    // the request's source.
    let peer = id.dst().map_or_else(|| crate::addr::wire_to_ip(w.family, &w.remote_ip), |d| d.ip());
    let dgid = crate::addr::ip_to_gid(peer);
    let p = rdma_ud_param {
        private_data: if pd.is_empty() { std::ptr::null() } else { b.data.as_ptr().cast() },
        private_data_len: w.private_data_len,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: dgid },
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        },
        qp_num: w.remote_qpn,
        qkey: w.qkey,
    };
    b.ev.param.ud = p;
}

fn remote_of(w: &CmEvent) -> Remote {
    Remote {
        qpn: w.remote_qpn,
        psn: w.remote_psn,
        path_mtu: w.path_mtu,
        retry_count: w.retry_count,
        rnr_retry_count: w.rnr_retry_count,
    }
}

/// A connection request: the new id (its state was registered when the
/// request came), on the listener's channel or, for a synchronous
/// listener, a private one.
fn conn_request(listener: Arc<Shared>, w: &CmEvent) -> Option<Box<EventBox>> {
    let lobj = obj_of(&listener)?;
    let new = registry(|r| r.conns.get(&w.conn).cloned())?;
    let dev = registry(|r| r.listeners.get(&w.listener).map(|l| l.1));
    let sync = lock(&listener.st).sync;
    let dev = dev?;
    let d = crate::addr::devices().get(dev)?;
    // SAFETY: the listener's C part, on the program's thread in a call on
    // its channel (as rdma-core reads it in `ucma_process_conn_req`).
    let (context, ps, qp_type, lchan) = unsafe {
        let c = lobj.c();
        ((*c).context, (*c).ps, (*c).qp_type, (*c).channel)
    };
    let chan = if sync {
        let Ok(c) = ChannelObj::new() else {
            backend::close(w.conn);
            return None;
        };
        c
    } else {
        lchan.cast::<ChannelObj>()
    };
    {
        let mut st = lock(&new.st);
        st.dev = Some(dev);
        st.sync = sync;
        if sync {
            // SAFETY: just made.
            st.channel = unsafe { (*chan).ch.clone() };
            st.channel_obj = chan as usize;
        }
        st.remote = remote_of(w);
        st.responder_resources = w.initiator_depth.min(d.max_responder_resources);
        st.initiator_depth = w.responder_resources.min(d.max_initiator_depth);
    }
    let id_ptr = IdObj::new(new.clone(), chan, context, ps, qp_type);
    // SAFETY: just made; the program has no pointer to it yet.
    let id = unsafe { &*id_ptr };
    // SAFETY: as above.
    unsafe {
        (*id.c()).verbs = d.ctx();
        (*id.c()).port_num = 1;
    }
    let local = SocketAddr::new(crate::addr::wire_to_ip(w.family, &w.local_ip), w.local_port);
    let remote = SocketAddr::new(crate::addr::wire_to_ip(w.family, &w.remote_ip), w.remote_port);
    id.set_route(Some(local), Some(remote), true);
    let mut b = new_event(listener, id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    b.ev.listen_id = lobj.c();
    if w.kind == backend::EV_SIDR_REQ {
        copy_ud(&mut b, w, id);
    } else {
        copy_conn(&mut b, w);
    }
    Some(b)
}

/// Turns a queued item into the event the program gets, or `None` if the
/// item is not reported (its id is gone, or rdma-core would drop it).
pub fn process(p: Pending) -> Option<Box<EventBox>> {
    if lock(&p.id.st).dead {
        return None;
    }
    let w = match p.raw {
        Raw::Local { event, status } => {
            let id = obj_of(&p.id)?;
            return Some(new_event(p.id.clone(), id, event, status));
        }
        Raw::Wire(w) => w,
    };
    if matches!(w.kind, backend::EV_REQ | backend::EV_SIDR_REQ) {
        return conn_request(p.id, &w);
    }
    let id = obj_of(&p.id)?;
    // SAFETY: the C part, on the program's thread (id's argument).
    let (has_qp, qp_type) = unsafe { (!(*id.c()).qp.is_null(), (*id.c()).qp_type) };
    let ud = qp_type == IBV_QPT_UD;
    let mut b;
    match w.kind {
        backend::EV_REP => {
            {
                // Our QP retries as our REQ said; the rest is the REP's.
                let mut st = lock(&p.id.st);
                let retry = st.remote.retry_count;
                st.remote = remote_of(&w);
                st.remote.retry_count = retry;
            }
            if !has_qp {
                b = new_event(p.id.clone(), id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
            } else {
                let conn = lock(&p.id.st).conn;
                let done = crate::qp::connect_qp(id).and_then(|_| backend::establish(conn));
                b = match done {
                    Ok(()) => new_event(p.id.clone(), id, RDMA_CM_EVENT_ESTABLISHED, 0),
                    Err(e) => {
                        let _ = crate::qp::qp_error(id);
                        lock(&p.id.st).connect_error = true;
                        new_event(p.id.clone(), id, RDMA_CM_EVENT_CONNECT_ERROR, -e)
                    }
                };
            }
            copy_conn(&mut b, &w);
        }
        backend::EV_RTU => {
            if lock(&p.id.st).active {
                return None;
            }
            b = new_event(p.id.clone(), id, RDMA_CM_EVENT_ESTABLISHED, 0);
            copy_conn(&mut b, &w);
        }
        backend::EV_REJ => {
            if lock(&p.id.st).connect_error {
                return None;
            }
            let _ = crate::qp::qp_error(id);
            b = new_event(p.id.clone(), id, RDMA_CM_EVENT_REJECTED, w.status);
            copy_conn(&mut b, &w);
        }
        backend::EV_DREQ | backend::EV_DREP => {
            if lock(&p.id.st).connect_error {
                return None;
            }
            b = new_event(p.id.clone(), id, RDMA_CM_EVENT_DISCONNECTED, 0);
            copy_conn(&mut b, &w);
        }
        backend::EV_TIMEOUT => {
            let _ = crate::qp::qp_error(id);
            let status = if w.status > 0 { -w.status } else { -libc::ETIMEDOUT };
            b = new_event(p.id.clone(), id, RDMA_CM_EVENT_UNREACHABLE, status);
        }
        backend::EV_SIDR_REP => {
            if w.status != 0 {
                b = new_event(p.id.clone(), id, RDMA_CM_EVENT_UNREACHABLE, -libc::EINVAL);
            } else {
                lock(&p.id.st).remote = remote_of(&w);
                b = new_event(p.id.clone(), id, RDMA_CM_EVENT_ESTABLISHED, 0);
            }
            copy_ud(&mut b, &w, id);
        }
        _ => return None,
    }
    let _ = ud;
    Some(b)
}

/// `rdma_get_cm_event` on a channel: the next reported event, waiting
/// unless the channel's fd is non-blocking.
pub fn get_event(ch: &ChannelObj) -> R<*mut rdma_cm_event> {
    loop {
        let p = ch.ch.queue.take().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let owner = p.id.clone();
        // Counted before processing, so a destroy that starts meanwhile
        // waits for this event.
        {
            let mut st = lock(&owner.st);
            if st.dead {
                continue;
            }
            st.outstanding += 1;
        }
        match process(p) {
            Some(b) => {
                if !Arc::ptr_eq(&b.owner, &owner) {
                    owner.complete();
                    lock(&b.owner.st).outstanding += 1;
                }
                return Ok(Box::into_raw(b).cast());
            }
            None => owner.complete(),
        }
    }
}

/// `rdma_ack_cm_event`.
///
/// # Safety
/// `ev` was returned by `get_event` and is acknowledged once.
pub unsafe fn ack(ev: *mut rdma_cm_event) {
    // SAFETY: the caller's promise: a boxed EventBox, whose first field
    // this is.
    let b = unsafe { Box::from_raw(ev.cast::<EventBox>()) };
    b.owner.complete();
}
