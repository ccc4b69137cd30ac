//! Listen, connect, accept, reject, disconnect, establish; the QP
//! attributes of a connection; ECE.

use std::ffi::{c_int, c_void};

use super::{cm_ready, id_obj, ret, R};
use crate::abi::*;
use crate::addr;
use crate::backend::{self, CmParam};
use crate::id::{registry, IdObj};
use crate::queue::lock;

/// The IB CM's REJ reason for a consumer reject (IBTA table 112), which
/// the kernel sends for `rdma_reject`.
pub const REJ_CONSUMER: u16 = 28;
/// IBTA's "vendor option not supported", `rdma_reject_ece`'s reason.
pub const REJ_VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;

/// Private data a REQ can carry after RDMA CM's 36-byte IP header
/// (92 - 36), a SIDR_REQ (216 - 36), a REP (196) and a SIDR_REP (136).
const REQ_DATA: usize = 56;
const SIDR_REQ_DATA: usize = 180;
const REP_DATA: usize = 196;
const SIDR_REP_DATA: usize = 136;

fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    crate::sys::random(&mut b);
    u32::from_ne_bytes(b) & 0xFF_FFFF
}

fn ps16(obj: &IdObj) -> u16 {
    // SAFETY: the C part on a call naming the id.
    u16::try_from(unsafe { (*obj.c()).ps }).unwrap_or(0)
}

fn is_ud(obj: &IdObj) -> bool {
    // SAFETY: as above.
    unsafe { (*obj.c()).qp_type == IBV_QPT_UD }
}

/// The program's private data, within `max` bytes.
///
/// # Safety
/// `p` is NULL or valid for `p.private_data_len` bytes.
unsafe fn private_data(p: Option<&rdma_conn_param>, max: usize) -> R<(*const u8, u8)> {
    match p {
        Some(p) if !p.private_data.is_null() && p.private_data_len > 0 => {
            if usize::from(p.private_data_len) > max {
                return Err(libc::EINVAL);
            }
            Ok((p.private_data.cast(), p.private_data_len))
        }
        _ => Ok((std::ptr::null(), 0)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        cm_ready()?;
        let src = obj.src().ok_or(libc::EINVAL)?;
        let bound = lock(&obj.shared.st).dev;
        let devs: Vec<usize> = match bound {
            Some(i) => vec![i],
            None => (0..addr::devices().len())
                .filter(|&i| src.ip().is_ipv6() || addr::devices()[i].ip.is_ipv4())
                .collect(),
        };
        if devs.is_empty() {
            return Err(libc::ENODEV);
        }
        let mut hs = Vec::new();
        for i in devs {
            let d = &addr::devices()[i];
            let ip = (!src.ip().is_unspecified()).then(|| addr::ip_to_wire(src.ip()));
            let fam = ip.map_or(addr::ip_to_wire(d.ip).0, |w| w.0);
            match backend::listen(d.ctx(), ps16(obj), fam, ip.as_ref().map(|w| &w.1), src.port()) {
                Ok(h) => hs.push((h, i)),
                Err(e) => {
                    for (h, _) in hs {
                        backend::close(h);
                    }
                    return Err(e);
                }
            }
        }
        registry(|r| {
            for &(h, i) in &hs {
                r.add_listener(h, &obj.shared, i);
            }
        });
        lock(&obj.shared.st).listeners.extend(hs.iter().map(|h| h.0));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        cm_ready()?;
        let param = unsafe { param.as_ref() };
        // SAFETY: the C part.
        let qp = unsafe { (*obj.c()).qp };
        let ud = is_ud(obj);
        if !ud && qp.is_null() && param.is_none() {
            return Err(libc::EINVAL);
        }
        let (src, dst) = (obj.src().ok_or(libc::EINVAL)?, obj.dst().ok_or(libc::EINVAL)?);
        let di = lock(&obj.shared.st).dev.ok_or(libc::EINVAL)?;
        let d = &addr::devices()[di];
        let (qpn, srq) = match unsafe { qp.as_ref() } {
            Some(q) => (q.qp_num, u8::from(!q.srq.is_null())),
            None => param.map_or((0, 0), |p| (p.qp_num, p.srq)),
        };
        let (pd, pd_len) = unsafe { private_data(param, if ud { SIDR_REQ_DATA } else { REQ_DATA }) }?;
        let init = match param {
            Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
            _ => d.max_initiator_depth,
        };
        let resp = match param {
            Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
            _ => d.max_responder_resources,
        };
        let psn = random_psn();
        let (retry, rnr) = param.map_or((7, 7), |p| (p.retry_count.min(7), p.rnr_retry_count.min(7)));
        let ack = {
            let mut st = lock(&obj.shared.st);
            st.psn = psn;
            st.initiator_depth = init;
            st.responder_resources = resp;
            st.remote.retry_count = retry;
            st.ack_timeout.unwrap_or(crate::qp::DEFAULT_ACK_TIMEOUT)
        };
        let tos = lock(&obj.shared.st).tos;
        let p = CmParam {
            qpn,
            responder_resources: resp,
            initiator_depth: init,
            retry_count: retry,
            rnr_retry_count: rnr,
            srq,
            flow_control: param.map_or(1, |p| p.flow_control),
            path_mtu: IBV_MTU_1024 as u8,
            ack_timeout: ack,
            tos,
            private_data_len: pd_len,
            private_data: pd,
            ..CmParam::default()
        };
        let (fam, sip) = addr::ip_to_wire(src.ip());
        let (_, dip) = addr::ip_to_wire(dst.ip());
        let h = backend::connect(d.ctx(), ps16(obj), fam, &sip, src.port(), &dip, dst.port(), &p)?;
        {
            let mut st = lock(&obj.shared.st);
            st.conn = h;
            st.active = true;
        }
        registry(|r| r.add_conn(h, &obj.shared));
        super::ids::complete(obj)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let param = unsafe { param.as_ref() };
        // SAFETY: the C part.
        let qp = unsafe { (*obj.c()).qp };
        let ud = is_ud(obj);
        if !ud && qp.is_null() && param.is_none() {
            return Err(libc::EINVAL);
        }
        let (conn, di) = {
            let st = lock(&obj.shared.st);
            (st.conn, st.dev)
        };
        if conn == 0 {
            return Err(libc::EINVAL);
        }
        let d = &addr::devices()[di.ok_or(libc::EINVAL)?];
        let (qpn, srq) = match unsafe { qp.as_ref() } {
            Some(q) => (q.qp_num, u8::from(!q.srq.is_null())),
            None => param.map_or((0, 0), |p| (p.qp_num, p.srq)),
        };
        let (pd, pd_len) = unsafe { private_data(param, if ud { SIDR_REP_DATA } else { REP_DATA }) }?;
        if ud {
            let p = CmParam {
                qpn,
                qkey: RDMA_UDP_QKEY,
                private_data_len: pd_len,
                private_data: pd,
                ..CmParam::default()
            };
            return backend::accept(conn, &p);
        }
        let (init, resp) = {
            let mut st = lock(&obj.shared.st);
            st.initiator_depth = match param {
                Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
                _ => st.initiator_depth.min(d.max_initiator_depth),
            };
            st.responder_resources = match param {
                Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
                _ => st.responder_resources.min(d.max_responder_resources),
            };
            (st.initiator_depth, st.responder_resources)
        };
        // roce's CM brings the QP to RTS before the REP leaves (rdma-core's
        // order), with the PSN it puts in the REP.
        let p = CmParam {
            qpn,
            responder_resources: resp,
            initiator_depth: init,
            retry_count: 7,
            rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count.min(7)),
            srq,
            flow_control: param.map_or(1, |p| p.flow_control),
            path_mtu: IBV_MTU_1024 as u8,
            private_data_len: pd_len,
            private_data: pd,
            ..CmParam::default()
        };
        if let Err(e) = backend::accept(conn, &p) {
            let _ = crate::qp::qp_error(obj);
            return Err(e);
        }
        super::ids::complete(obj)
    })
}

fn reject_with(id: *mut rdma_cm_id, data: *const c_void, len: u8, reason: u16) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let conn = lock(&obj.shared.st).conn;
        if conn == 0 {
            return Err(libc::EINVAL);
        }
        let data: &[u8] = if data.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: the program's buffer of `len` bytes.
            unsafe { std::slice::from_raw_parts(data.cast(), usize::from(len)) }
        };
        backend::reject(conn, reason, data)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    reject_with(id, data, len, REJ_CONSUMER)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    reject_with(id, data, len, REJ_VENDOR_OPTION_NOT_SUPPORTED)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        // SAFETY: the C part.
        if unsafe { (*obj.c()).verbs.is_null() } {
            return Err(libc::EINVAL);
        }
        crate::qp::qp_error(obj)?;
        let conn = lock(&obj.shared.st).conn;
        if conn == 0 {
            return Err(libc::EINVAL);
        }
        backend::disconnect(conn)?;
        super::ids::complete(obj)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        // SAFETY: the C part.
        if unsafe { !(*obj.c()).qp.is_null() } {
            return Err(libc::EINVAL);
        }
        let conn = lock(&obj.shared.st).conn;
        if conn == 0 {
            return Err(libc::EINVAL);
        }
        backend::establish(conn)
    })
}

/// `IBV_EVENT_COMM_EST`: the passive side saw the first packet before the
/// RTU. roce's CM takes a connection's first valid packet as its RTU
/// itself, so there is nothing to do; other events are the kernel's
/// `EINVAL`.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    const IBV_EVENT_COMM_EST: c_int = 6;
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        if event != IBV_EVENT_COMM_EST || lock(&obj.shared.st).conn == 0 {
            return Err(libc::EINVAL);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        let m = unsafe { mask.as_mut() }.ok_or(libc::EINVAL)?;
        *m = crate::qp::init_qp_attr(obj, a)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let e = unsafe { ece.as_ref() }.ok_or(libc::EINVAL)?;
        // SAFETY: the C part.
        if unsafe { !(*obj.c()).qp.is_null() } || e.vendor_id == 0 || e.comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        lock(&obj.shared.st).local_ece = *e;
        Ok(())
    })
}

/// The peer's ECE: roce's CM carries none (vendor 0, as from a peer
/// without ECE).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    ret(|| {
        let obj = unsafe { id_obj(id) }?;
        let e = unsafe { ece.as_mut() }.ok_or(libc::EINVAL)?;
        // SAFETY: the C part.
        if unsafe { !(*obj.c()).qp.is_null() } {
            return Err(libc::EINVAL);
        }
        *e = lock(&obj.shared.st).remote_ece;
        Ok(())
    })
}
