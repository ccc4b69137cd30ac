//! Work requests: reading the program's `ibv_send_wr`/`ibv_recv_wr`
//! chains and posting them.

use std::ffi::c_int;

use libc::EINVAL;
use roce::{QpType, RecvWr, SendOp, SendWr, Sge};
use roce_proto::limits;

use super::{err, obj, ret_errno, R};
use crate::abi::*;
use crate::objects::*;

/// Posts a chain of receive WRs (linked by `next`) with `post`, stopping
/// at the first that fails, which `*bad` then names (ibverbs' convention).
///
/// # Safety
/// `wr` is null or the head of a chain of valid `ibv_recv_wr`s, each with
/// `num_sge` readable SGEs; `bad` is null or writable.
pub(super) unsafe fn post_recv_chain(
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    mut post: impl FnMut(RecvWr) -> R<()>,
) -> R<()> {
    while let Some(w) = unsafe { wr.as_ref() } {
        if let Err(e) = unsafe { recv_wr(w) }.and_then(&mut post) {
            if !bad.is_null() {
                unsafe { *bad = wr };
            }
            return Err(e);
        }
        wr = w.next;
    }
    Ok(())
}

/// One receive WR as the engine's, its SGEs read from C.
unsafe fn recv_wr(wr: &ibv_recv_wr) -> R<RecvWr> {
    Ok(RecvWr { wr_id: wr.wr_id, sg_list: unsafe { sges(wr.sg_list, wr.num_sge) }? })
}

/// A WR's SGEs, read from C. More than the device's `max_sge` is refused
/// before anything is allocated or read (the engine then checks the QP's
/// own limit), as rdma-core's providers refuse a `num_sge` beyond it.
///
/// # Safety
/// `list` holds `n` readable `ibv_sge`s when `0 < n <= MAX_SGE`.
unsafe fn sges(list: *const ibv_sge, n: c_int) -> R<Vec<Sge>> {
    if n < 0 || n as u32 > limits::MAX_SGE || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: the WR's SGE array holds `num_sge` entries (point 2).
        let s = unsafe { *list.add(i) };
        v.push(Sge { addr: s.addr, length: s.length, lkey: s.lkey });
    }
    Ok(v)
}

/// The bytes of an inline send, read from the program's memory now.
/// `IBV_SEND_INLINE` lets the SGEs name any readable memory (their L_Keys
/// are not checked): the verbs contract is that `[addr, addr + length)` of
/// each is readable for the call (module docs, point 2), and it is copied
/// before the call returns.
unsafe fn inline_bytes(sg: &[Sge]) -> R<Vec<u8>> {
    let total: u64 = sg.iter().map(|s| u64::from(s.length)).sum();
    if total > u64::from(limits::MAX_INLINE) {
        return Err(EINVAL);
    }
    let mut v: Vec<u8> = Vec::with_capacity(total as usize);
    for s in sg.iter().filter(|s| s.length > 0) {
        let p = s.addr as usize as *const u8;
        if p.is_null() {
            return Err(EINVAL);
        }
        let at = v.len();
        // SAFETY: the program vouches for `length` readable bytes at `addr`
        // for this call; `v` has room for them (total reserved above).
        unsafe {
            std::ptr::copy_nonoverlapping(p, v.as_mut_ptr().add(at), s.length as usize);
            v.set_len(at + s.length as usize);
        }
    }
    Ok(v)
}

/// A send WR in the engine's terms, with its inline bytes if it has any.
unsafe fn send_wr(w: &ibv_send_wr, is_ud: bool) -> R<(SendWr, Option<Vec<u8>>)> {
    let sg = unsafe { sges(w.sg_list, w.num_sge) }?;
    // SAFETY: reading the union member the opcode selects (all are plain
    // integers and pointers, so any bytes are a valid value).
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let imm = u32::from_be(w.imm_data);
    let op = match w.opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm { imm },
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv { rkey: w.imm_data },
        IBV_WR_RDMA_WRITE => SendOp::Write { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        IBV_WR_RDMA_WRITE_WITH_IMM => {
            SendOp::WriteWithImm { remote_addr: rdma.remote_addr, rkey: rdma.rkey, imm }
        }
        IBV_WR_RDMA_READ => SendOp::Read { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => {
            SendOp::FetchAdd { remote_addr: atomic.remote_addr, rkey: atomic.rkey, add: atomic.compare_add }
        }
        _ => return Err(EINVAL),
    };
    let mut s = SendWr::new(w.wr_id, op, sg);
    s.signaled = w.send_flags & IBV_SEND_SIGNALED != 0;
    s.fence = w.send_flags & IBV_SEND_FENCE != 0;
    s.solicited = w.send_flags & IBV_SEND_SOLICITED != 0;
    s.inline = w.send_flags & IBV_SEND_INLINE != 0;
    if is_ud {
        // Only a UD QP's WRs hold `wr.ud`.
        let a: &AhObj = unsafe { obj(ud.ah) }?;
        s.ud = Some(a.ah.dest(ud.remote_qpn, ud.remote_qkey));
    }
    let data =
        if s.inline && !s.op.is_read_or_atomic() { Some(unsafe { inline_bytes(&s.sg_list) }?) } else { None };
    Ok((s, data))
}

pub(super) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    ret_errno(|| {
        let q: &QpObj = unsafe { obj(qp) }?;
        let is_ud = q.qp.qp_type() == QpType::Ud;
        let set_bad = |p: *mut ibv_send_wr| {
            if !bad.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad = p };
            }
        };
        // One WR, the common case: no lists to build.
        if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
            let r = unsafe { send_wr(w, is_ud) }.and_then(|(s, data)| {
                match data {
                    Some(d) => q.qp.post_send_inline(s, &d),
                    None => q.qp.post_send(s),
                }
                .map_err(err)
            });
            if r.is_err() {
                set_bad(wr);
            }
            return r;
        }
        let mut ptrs = Vec::new();
        let mut wrs = Vec::new();
        let mut p = wr;
        while let Some(w) = unsafe { p.as_ref() } {
            let s = match unsafe { send_wr(w, is_ud) } {
                Ok(s) => s,
                Err(e) => {
                    // Post what came before, as a provider would have; if
                    // one of those is refused, it is the failure to report.
                    if let Err((i, e)) = q.qp.post_send_each(wrs) {
                        set_bad(ptrs[i]);
                        return Err(err(e));
                    }
                    set_bad(p);
                    return Err(e);
                }
            };
            ptrs.push(p);
            wrs.push(s);
            p = w.next;
        }
        q.qp.post_send_each(wrs).map_err(|(i, e)| {
            set_bad(ptrs[i]);
            err(e)
        })
    })
}

pub(super) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    ret_errno(|| {
        let q: &QpObj = unsafe { obj(qp) }?;
        // SAFETY: `wr` and `bad` come from the caller as ibv_post_recv's.
        unsafe { post_recv_chain(wr, bad, |r| q.qp.post_recv(r).map_err(err)) }
    })
}
