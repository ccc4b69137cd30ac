//! Completion queues and completion channels: polling, arming, and the
//! events a channel hands out.

use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use libc::{EBUSY, EINVAL, EIO, EOPNOTSUPP};

use super::{boxed, ctx_obj, err, handle, obj, ret_errno, ret_minus1, ret_ptr};
use crate::abi::*;
use crate::handle::{CPart, Handle};
use crate::objects::*;

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    ret_ptr(|| {
        unsafe { ctx_obj(ctx) }?;
        let events = crate::objects::EventQueue::new().map_err(|e| e.raw_os_error().unwrap_or(EIO))?;
        let fd = events.fd.as_raw_fd();
        let ch = Arc::new(Channel { events });
        let ibv = CPart::new(ibv_comp_channel { context: ctx, fd, refcnt: 0 });
        Ok(boxed(ChannelObj { ibv, ch, users: AtomicUsize::new(0) }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    ret_errno(|| {
        let c: &ChannelObj = unsafe { obj(ch) }?;
        if c.users.load(Ordering::Acquire) > 0 {
            return Err(EBUSY);
        }
        // SAFETY: the program's channel, unused, destroyed once (point 1).
        unsafe { handle::<ChannelObj>(ch)?.free() };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    ret_ptr(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        if cqe < 1 {
            return Err(EINVAL);
        }
        let ch: Option<Handle<ChannelObj>> =
            if channel.is_null() { None } else { Some(unsafe { handle(channel) }?) };
        // SAFETY: the program's live channel (point 1).
        let ch_obj = ch.map(|h| unsafe { h.get() });
        let cq = c.dev.create_cq(cqe as usize).map_err(err)?;
        let id = cq.id().0;
        let notify = CqNotify::new(Some(cq.clone()), ch_obj.map(|c| c.ch.clone()));
        let ibv = CPart::new(ibv_cq {
            context: ctx,
            channel,
            cq_context,
            handle: 0,
            cqe,
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            cond: libc::PTHREAD_COND_INITIALIZER,
            comp_events_completed: 0,
            async_events_completed: 0,
        });
        let h = Handle::new(CqObj {
            ibv,
            cq,
            notify: notify.clone(),
            channel: ch,
            users: AtomicUsize::new(0),
            senders: Mutex::default(),
        });
        notify.cq.set(h).expect("a new CQ's notification state");
        if let Some(ch) = ch_obj {
            ch.users.fetch_add(1, Ordering::AcqRel);
        }
        lock(&c.events.cqs).insert(id, h);
        Ok(h.to_c())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    ret_errno(|| {
        // SAFETY: the program's CQ (point 1).
        let h = unsafe { handle::<CqObj>(cq) }?;
        // SAFETY: alive until freed below.
        let q = unsafe { h.get() };
        if q.users.load(Ordering::Acquire) > 0 {
            return Err(EBUSY);
        }
        // Its undelivered events leave the channel with it; those handed
        // out must be acknowledged first (rdma-core's contract).
        q.notify.retire();
        let c = unsafe { ctx_obj(c_field!(q, context)) }?;
        lock(&c.events.cqs).remove(&q.cq.id().0);
        if let Some(ch) = q.channel {
            // SAFETY: a channel outlives its CQs (destroy fails while used).
            unsafe { ch.get() }.users.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: destroyed once; nothing refers to it any more (its
        // context's record is gone, its notification state is dead).
        unsafe { h.free() };
        Ok(())
    })
}

/// `ibv_resize_cq`: the engine's CQs keep their size.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    EOPNOTSUPP
}

/// The `sl` of a UD receive over RoCE, as mlx5 devices report it (their
/// programming manual gives SL no meaning on RoCE and reuses it): bit 3
/// set for a UDP-encapsulated (RoCEv2) packet, bits 2:0 the network header
/// (1 IPv6, 2 IPv4). UCX's `ud_verbs` reads it to find the destination GID
/// in the GRH area, and drops what it cannot match. Peers are of the
/// device's own address family (the engine refuses mixed ones).
fn roce_pkt_type(ipv4: bool) -> u8 {
    0x8 | if ipv4 { 0x2 } else { 0x1 }
}

fn wc_to_c(w: &roce::Wc, ipv4: bool) -> ibv_wc {
    let imm = if w.wc_flags & roce::WC_WITH_IMM != 0 { w.imm_data.to_be() } else { w.imm_data };
    let sl = if w.wc_flags & roce::WC_GRH != 0 { roce_pkt_type(ipv4) } else { 0 };
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode: w.opcode as c_int,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags,
        pkey_index: 0,
        slid: 0,
        sl,
        dlid_path_bits: 0,
    }
}

/// Send WRs outstanding on a CQ from which an empty poll drives the
/// network (`Cq::poll_or_drive`): a pipeline, not one message in flight.
const DRIVE_BUSY: usize = 2;

/// `ops.poll_cq`: completions, or a negative number on error.
pub(super) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num: c_int, wc: *mut ibv_wc) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        let Ok(q) = (unsafe { obj::<CqObj>(cq) }) else { return -EINVAL };
        if num <= 0 {
            return 0;
        }
        if wc.is_null() {
            return -EINVAL;
        }
        let mut buf = [roce::Wc::EMPTY; 32];
        let mut done = 0usize;
        let ipv4 = q.cq.device().gid().is_ipv4();
        while done < num as usize {
            let want = (num as usize - done).min(buf.len());
            // Programs spin on an empty CQ (perftest, the pingpong
            // examples, UCX's progress loop): an empty first poll makes
            // progress from the program's thread, taking over from the
            // driver thread while a pipeline of sends that complete here is
            // outstanding (DRIVE_BUSY WRs or more).
            let r = if done == 0 {
                // Held while polling: creating or destroying a QP on this
                // CQ waits for it.
                let senders = lock(&q.senders);
                q.cq.poll_or_drive(&mut buf[..want], &senders, DRIVE_BUSY)
            } else {
                q.cq.poll(&mut buf[..want])
            };
            let n = match r {
                Ok(n) => n,
                Err(e) if done == 0 => return -err(e),
                Err(_) => break,
            };
            for (i, w) in buf[..n].iter().enumerate() {
                // SAFETY: `wc` holds `num` entries (module docs, point 2).
                unsafe { wc.add(done + i).write(wc_to_c(w, ipv4)) };
            }
            done += n;
            if n < want {
                break;
            }
        }
        done as c_int
    }))
    .unwrap_or(-EIO)
}

/// `ops.req_notify_cq`. An event follows the next completion, or at once
/// if the CQ holds one already (a spurious event a program's poll loop
/// handles); `solicited_only` is treated as any completion, so it may
/// wake the program early, never late.
pub(super) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    ret_errno(|| {
        let q: &CqObj = unsafe { obj(cq) }?;
        if q.notify.channel.is_none() {
            return Err(EINVAL);
        }
        lock(&q.notify.arm).armed = true;
        q.notify.poke();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    ret_minus1(|| {
        let c: &ChannelObj = unsafe { obj(ch) }?;
        if cq.is_null() || cq_context.is_null() {
            return Err(EINVAL);
        }
        // An event whose CQ was destroyed since it was taken is gone with
        // it: take the next.
        let h = loop {
            let n = c.ch.events.take().map_err(|e| e.raw_os_error().unwrap_or(EIO))?;
            if let Some(h) = n.deliver() {
                break h;
            }
        };
        // SAFETY: delivered and not yet acknowledged, so not destroyed
        // (`CqNotify::deliver`).
        let q = unsafe { h.get() };
        // SAFETY: the caller's out-parameters.
        unsafe {
            *cq = h.to_c();
            *cq_context = c_field!(q, cq_context);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Ok(q) = unsafe { obj::<CqObj>(cq) } {
            q.notify.ack(nevents);
        }
    }));
}
