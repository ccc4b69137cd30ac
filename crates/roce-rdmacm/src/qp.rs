//! QP attributes an id gives its QP at each state (`rdma_init_qp_attr`),
//! and the transitions librdmacm makes itself: INIT when the QP is made,
//! RTR and RTS when the connection's values are known, ERR on reject or
//! disconnect. The values follow the kernel's `cma_ib_init_qp_attr` and
//! `ib_cm_init_qp_attr` (IBTA 12.9: the CM gives each side the peer's QPN
//! and starting PSN; the path gives MTU and the address vector).

use std::ffi::c_int;

use crate::abi::*;
use crate::id::IdObj;
use crate::queue::lock;
use crate::verbs::vfn;

type R<T> = Result<T, c_int>;

/// Our QP's local ACK timeout (4.096 µs · 2^14 ≈ 67 ms) unless the program
/// sets `RDMA_OPTION_ID_ACK_TIMEOUT`: what the REQ carries, and so what a
/// kernel peer's QP uses too (notes A4 R3: 14 to 19 work with rxe).
pub const DEFAULT_ACK_TIMEOUT: u8 = 14;
/// Our receive side's RNR NAK timer (IBTA table 45: 12 = 0.64 ms). The
/// kernel's CM gives 0 (655 ms); a shorter one keeps a peer that sends
/// before a RECV is posted from stalling for most of a second.
pub const MIN_RNR_TIMER: u8 = 12;

/// `rdma_init_qp_attr`: the attributes and mask for `attr.qp_state`.
pub fn init_qp_attr(id: &IdObj, attr: &mut ibv_qp_attr) -> R<c_int> {
    let st = lock(&id.shared.st);
    // SAFETY: the C part, on a call naming the id (`id`'s argument).
    let (qp_type, qp) = unsafe { ((*id.c()).qp_type, (*id.c()).qp) };
    let state = attr.qp_state;
    let ud = matches!(qp_type, IBV_QPT_UD);
    let connected = st.conn != 0 && st.remote.qpn != 0;
    if connected && !ud && matches!(state, IBV_QPS_RTR | IBV_QPS_RTS) {
        // The CM's own values (its PSNs, the negotiated depths, the path).
        let (conn, ack) = (st.conn, st.ack_timeout);
        drop(st);
        let mask = crate::backend::qp_attr(conn, attr)?;
        if let (IBV_QPS_RTS, Some(t)) = (state, ack) {
            attr.timeout = t;
        }
        return Ok(mask);
    }
    match state {
        IBV_QPS_INIT => {
            attr.pkey_index = 0;
            attr.port_num = 1;
            if ud {
                attr.qkey = RDMA_UDP_QKEY;
                Ok(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
            } else {
                attr.qp_access_flags = if connected {
                    let mut a = IBV_ACCESS_REMOTE_WRITE;
                    if st.responder_resources > 0 {
                        a |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
                    }
                    a
                } else {
                    0
                };
                Ok(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
            }
        }
        IBV_QPS_RTR if ud => Ok(IBV_QP_STATE),
        IBV_QPS_RTS if ud => {
            attr.sq_psn = 0;
            Ok(IBV_QP_STATE | IBV_QP_SQ_PSN)
        }
        IBV_QPS_RTR => {
            if !connected {
                return Err(libc::EINVAL);
            }
            let (Some(src), Some(dst)) = (id.src(), id.dst()) else { return Err(libc::EINVAL) };
            attr.path_mtu = c_int::from(st.remote.path_mtu.clamp(1, 5));
            attr.dest_qp_num = st.remote.qpn;
            attr.rq_psn = st.remote.psn;
            attr.max_dest_rd_atomic = st.responder_resources;
            attr.min_rnr_timer = MIN_RNR_TIMER;
            // SAFETY: the id's own path record (set when the route was).
            let path = unsafe { *id.path.get() };
            attr.ah_attr = ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: ibv_gid { raw: crate::addr::ip_to_gid(dst.ip()) },
                    flow_label: u32::from_be(path.flow_label),
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: st.tos,
                },
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                static_rate: 0,
                is_global: 1,
                port_num: 1,
            };
            let _ = src;
            let _ = qp;
            Ok(IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER)
        }
        IBV_QPS_RTS => {
            if !connected {
                return Err(libc::EINVAL);
            }
            attr.sq_psn = st.psn;
            attr.timeout = st.ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT);
            attr.retry_cnt = st.remote.retry_count.min(7);
            attr.rnr_retry = st.remote.rnr_retry_count.min(7);
            attr.max_rd_atomic = st.initiator_depth;
            Ok(IBV_QP_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC)
        }
        _ => Err(libc::EINVAL),
    }
}

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: c_int) -> R<()> {
    // SAFETY: `qp` is the id's QP, live while the id has it; `attr` is
    // a valid attribute structure for the call.
    match unsafe { vfn!(ibv_modify_qp)?(qp, attr, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}

fn zero_attr() -> ibv_qp_attr {
    // SAFETY: integers only: all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// Moves the id's QP (if it has one) to `state` with the id's attributes.
pub fn move_qp(id: &IdObj, state: c_int) -> R<()> {
    // SAFETY: the C part, on a call naming the id.
    let qp = unsafe { (*id.c()).qp };
    if qp.is_null() {
        return Ok(());
    }
    let mut a = zero_attr();
    a.qp_state = state;
    let mask = init_qp_attr(id, &mut a)?;
    modify(qp, &mut a, mask)
}

/// A connected id's QP to RTR then RTS (librdmacm's
/// `ucma_modify_qp_rtr`/`_rts`; the INIT step first refreshes the
/// access flags for the negotiated responder resources).
pub fn connect_qp(id: &IdObj) -> R<()> {
    move_qp(id, IBV_QPS_INIT)?;
    move_qp(id, IBV_QPS_RTR)?;
    move_qp(id, IBV_QPS_RTS)
}

/// The QP to ERR (reject, disconnect), if there is one.
pub fn qp_error(id: &IdObj) -> R<()> {
    // SAFETY: the C part, on a call naming the id.
    let qp = unsafe { (*id.c()).qp };
    if qp.is_null() {
        return Ok(());
    }
    let mut a = zero_attr();
    a.qp_state = IBV_QPS_ERR;
    modify(qp, &mut a, IBV_QP_STATE)
}

/// A new QP's first steps: INIT for a connected type; INIT, RTR and RTS
/// for UD, which needs no peer (librdmacm's `ucma_init_ud_qp`).
pub fn init_new_qp(id: &IdObj, qp: *mut ibv_qp, ud: bool) -> R<()> {
    let mut a = zero_attr();
    a.qp_state = IBV_QPS_INIT;
    let m = init_qp_attr(id, &mut a)?;
    modify(qp, &mut a, m)?;
    if ud {
        for s in [IBV_QPS_RTR, IBV_QPS_RTS] {
            let mut a = zero_attr();
            a.qp_state = s;
            let m = init_qp_attr(id, &mut a)?;
            modify(qp, &mut a, m)?;
        }
    }
    Ok(())
}
