//! Protection domains and memory regions.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{EBUSY, EINVAL};
use roce::{Access, MemBuf};

use super::{boxed, ctx_obj, err, free_in_pd, handle, obj, ret_errno, ret_ptr, R};
use crate::abi::*;
use crate::handle::CPart;
use crate::objects::*;

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    ret_ptr(|| {
        let c = unsafe { ctx_obj(ctx) }?;
        let pd = c.dev.alloc_pd().map_err(err)?;
        let ibv = CPart::new(ibv_pd { context: ctx, handle: 0 });
        Ok(boxed(PdObj { ibv, pd, users: AtomicUsize::new(0) }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    ret_errno(|| {
        let p: &PdObj = unsafe { obj(pd) }?;
        if p.users.load(Ordering::Acquire) > 0 {
            return Err(EBUSY);
        }
        // SAFETY: the program's PD, unused, deallocated once (point 1).
        unsafe { handle::<PdObj>(pd)?.free() };
        Ok(())
    })
}

/// `ibv_reg_mr` and its variants.
///
/// # Safety
/// `pd` is NULL or the program's live PD (point 1); `[addr, addr +
/// length)` is the program's memory, kept allocated until the MR is
/// deregistered (point 3).
unsafe fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: Option<u64>,
    access: c_uint,
) -> R<*mut ibv_mr> {
    let p: &PdObj = unsafe { obj(pd) }?;
    let ptr = NonNull::new(addr as *mut u8).ok_or(EINVAL)?;
    if length == 0 || length > isize::MAX as usize {
        return Err(EINVAL);
    }
    let context = c_field!(p, context);
    let c = unsafe { ctx_obj(context) }?;
    let device = c.device as *const DeviceObj as usize;
    let region = crate::regions::register(addr as usize, length, device).ok_or(EBUSY)?;
    // SAFETY: the registered memory's contract (module docs, point 3):
    // the program keeps `[addr, addr + length)` allocated until it
    // deregisters (which drops this `MemBuf`'s region), the library makes
    // no Rust reference to it, and `region` keeps it off other devices.
    let buf = unsafe { MemBuf::from_raw_parts(ptr, length, None) };
    let access = Access(access & !IBV_ACCESS_OPTIONAL_RANGE);
    let mr = p.pd.reg_mr_range(buf, 0, length, iova, access).map_err(err)?;
    p.users.fetch_add(1, Ordering::AcqRel);
    let ibv = CPart::new(ibv_mr { context, pd, addr, length, handle: 0, lkey: mr.lkey(), rkey: mr.rkey() });
    Ok(boxed(MrObj { ibv, mr, pd: unsafe { handle(pd) }?, region }))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    ret_ptr(|| unsafe { reg_mr(pd, addr, length, None, access as c_uint) })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    ret_ptr(|| unsafe { reg_mr(pd, addr, length, Some(iova), access as c_uint) })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    ret_ptr(|| unsafe { reg_mr(pd, addr, length, Some(iova), access) })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    ret_errno(|| unsafe { free_in_pd::<MrObj>(mr) })
}
