//! roce's CM as this library sees it: the private entry points of roce's
//! libibverbs (version node `ROCE_PRIVATE`, `crates/roce-ibverbs/src/ffi/cm.rs`)
//! and the two structures they share with it. The CM there speaks the IB
//! CM on the wire (REQ/REP/RTU/REJ/DREQ/DREP, SIDR for UD, with RDMA CM's
//! IP header); this library keeps the `rdma_cm_id`s, their events and
//! their QPs, as rdma-core's librdmacm does over the kernel's CM.
//!
//! Handles are numbers (never pointers): a listener or a connection,
//! valid until `roce_cm_close`, after which no event names it.

use std::ffi::c_int;

use crate::abi::{ibv_context, ibv_qp_attr};
pub use crate::abi::{CmEvent, CmHandler, CmParam};
use crate::verbs::vfn;

/// A REQ came to a listener (`conn` is the new connection).
pub const EV_REQ: u32 = 1;
/// The REP answering our REQ.
pub const EV_REP: u32 = 2;
/// The RTU (or the first packet on the QP) after our REP.
pub const EV_RTU: u32 = 3;
/// A REJ (`status` = the reason).
pub const EV_REJ: u32 = 4;
/// The peer's DREQ.
pub const EV_DREQ: u32 = 5;
/// Our DREQ's DREP (or its timeout): the connection is down.
pub const EV_DREP: u32 = 6;
/// Our REQ or REP went unanswered after every retry.
pub const EV_TIMEOUT: u32 = 7;
/// A SIDR_REQ came to a listener.
pub const EV_SIDR_REQ: u32 = 8;
/// The SIDR_REP answering our SIDR_REQ.
pub const EV_SIDR_REP: u32 = 9;

type R<T> = Result<T, c_int>;

fn rc(e: c_int) -> R<()> {
    if e == 0 {
        Ok(())
    } else {
        Err(e)
    }
}

pub fn set_handler(h: CmHandler) -> R<()> {
    // SAFETY: the prototype of `verbs`' table.
    rc(unsafe { vfn!(roce_cm_set_handler)?(Some(h)) })
}

/// Listens on `port` of the device behind `ctx`: at `ip` (16 bytes, the
/// IPv4 ones last) or any address of the device (`None`).
pub fn listen(ctx: *mut ibv_context, ps: u16, family: u8, ip: Option<&[u8; 16]>, port: u16) -> R<u64> {
    let mut h = 0u64;
    let ip = ip.map_or(std::ptr::null(), |i| i.as_ptr());
    // SAFETY: `ctx` is an open context of that library; `ip` is NULL or 16
    // readable bytes; `h` is writable.
    rc(unsafe { vfn!(roce_cm_listen)?(ctx, ps, family, ip, port, &mut h) })?;
    Ok(h)
}

/// Sends a REQ (RC) or SIDR_REQ (UD port space) from `src` to `dst`.
#[allow(clippy::too_many_arguments)]
pub fn connect(
    ctx: *mut ibv_context,
    ps: u16,
    family: u8,
    src: &[u8; 16],
    src_port: u16,
    dst: &[u8; 16],
    dst_port: u16,
    p: &CmParam,
) -> R<u64> {
    let mut h = 0u64;
    // SAFETY: as `listen`; `p` and its private data are readable for the
    // call (the CM copies them).
    rc(unsafe {
        vfn!(roce_cm_connect)?(ctx, ps, family, src.as_ptr(), src_port, dst.as_ptr(), dst_port, p, &mut h)
    })?;
    Ok(h)
}

/// Sends the REP (or SIDR_REP) answering the REQ of `conn`.
pub fn accept(conn: u64, p: &CmParam) -> R<()> {
    // SAFETY: as `connect`.
    rc(unsafe { vfn!(roce_cm_accept)?(conn, p) })
}

pub fn reject(conn: u64, reason: u16, data: &[u8]) -> R<()> {
    let len = u8::try_from(data.len()).map_err(|_| libc::EINVAL)?;
    // SAFETY: `data` is readable for `len` bytes during the call.
    rc(unsafe { vfn!(roce_cm_reject)?(conn, reason, data.as_ptr(), len) })
}

/// Sends the RTU after the REP.
pub fn establish(conn: u64) -> R<()> {
    // SAFETY: plain values.
    rc(unsafe { vfn!(roce_cm_establish)?(conn) })
}

/// Sends the DREQ, or the DREP if the peer's DREQ came first.
pub fn disconnect(conn: u64) -> R<()> {
    // SAFETY: plain values.
    rc(unsafe { vfn!(roce_cm_disconnect)?(conn) })
}

/// The attributes the CM gives a connection's QP in `attr.qp_state`
/// (INIT, RTR, RTS), with their mask.
pub fn qp_attr(conn: u64, attr: &mut ibv_qp_attr) -> R<c_int> {
    let mut mask = 0;
    // SAFETY: `attr` and `mask` are writable for the call.
    rc(unsafe { vfn!(roce_cm_qp_attr)?(conn, attr.qp_state, attr, &mut mask) })?;
    Ok(mask)
}

/// Forgets a listener or a connection; no event names it afterwards.
pub fn close(h: u64) {
    if let Ok(f) = vfn!(roce_cm_close) {
        // SAFETY: plain values.
        unsafe { f(h) }
    }
}
