//! Address handles, and address vectors to and from `ibv_ah_attr`.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use libc::EINVAL;
use roce::AddressVector;

use super::{boxed, ctx_obj, err, free_in_pd, handle, obj, ret_errno, ret_minus1, ret_ptr, R};
use crate::abi::*;
use crate::handle::CPart;
use crate::objects::*;

/// An address vector from `ibv_ah_attr`: RoCE needs the GRH (the
/// destination GID is the IP address). The peer's device is taken to use
/// this device's UDP port (4791 unless configured otherwise): verbs
/// programs exchange no port.
pub(super) fn av_of(a: &ibv_ah_attr, udp_port: u16) -> R<AddressVector> {
    if a.is_global == 0 {
        return Err(EINVAL);
    }
    Ok(AddressVector {
        dgid: roce::gid_from_bytes(a.grh.dgid.raw),
        sgid_index: a.grh.sgid_index,
        traffic_class: a.grh.traffic_class,
        hop_limit: if a.grh.hop_limit == 0 { 64 } else { a.grh.hop_limit },
        flow_label: a.grh.flow_label,
        udp_port: Some(udp_port),
    })
}

pub(super) fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: roce::gid_to_bytes(av.dgid) },
            flow_label: av.flow_label,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

/// An AH in `pd` for `av`.
///
/// # Safety
/// `pd` is NULL or the program's live PD (point 1).
unsafe fn create_ah(pd: *mut ibv_pd, av: AddressVector) -> R<*mut ibv_ah> {
    let h = unsafe { handle::<PdObj>(pd) }?;
    // SAFETY: the program's live PD.
    let p = unsafe { h.get() };
    let ah = p.pd.create_ah(av).map_err(err)?;
    p.users.fetch_add(1, Ordering::AcqRel);
    let ibv = CPart::new(ibv_ah { context: c_field!(p, context), pd, handle: 0 });
    Ok(boxed(AhObj { ibv, ah, pd: h }))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ret_ptr(|| {
        let p: &PdObj = unsafe { obj(pd) }?;
        let port = unsafe { ctx_obj(c_field!(p, context)) }?.dev.local_addr().port();
        unsafe { create_ah(pd, av_of(attr.as_ref().ok_or(EINVAL)?, port)?) }
    })
}

/// The address a UD receive came from, read from the 40-byte GRH area at
/// the start of its buffer: RoCEv2 over IPv4 places the IPv4 header in its
/// last 20 bytes, over IPv6 the IPv6 header fills it.
fn grh_source(grh: &[u8; 40]) -> std::net::IpAddr {
    if grh[20] >> 4 == 4 && grh[..20].iter().all(|&b| b == 0) {
        let s: [u8; 4] = grh[32..36].try_into().expect("4 bytes");
        std::net::IpAddr::from(s)
    } else {
        let s: [u8; 16] = grh[8..24].try_into().expect("16 bytes");
        roce::gid_from_bytes(s)
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    attr: *mut ibv_ah_attr,
) -> c_int {
    ret_minus1(|| {
        unsafe { ctx_obj(ctx) }?;
        let w = unsafe { wc.as_ref() }.ok_or(EINVAL)?;
        if port != 1 || grh.is_null() || w.wc_flags & roce::WC_GRH == 0 {
            return Err(EINVAL);
        }
        // SAFETY: a UD receive buffer's first 40 bytes (point 2).
        let g: [u8; 40] = unsafe { *(grh as *const [u8; 40]) };
        let mut av = AddressVector::new(grh_source(&g));
        av.hop_limit = 64;
        *unsafe { attr.as_mut() }.ok_or(EINVAL)? = ah_attr_of(&av);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    port: u8,
) -> *mut ibv_ah {
    ret_ptr(|| {
        let p: &PdObj = unsafe { obj(pd) }?;
        let mut a = ah_attr_of(&AddressVector::new(std::net::IpAddr::from([0u8; 4])));
        if unsafe { ibv_init_ah_from_wc(c_field!(p, context), port, wc, grh, &mut a) } != 0 {
            return Err(EINVAL);
        }
        let port = unsafe { ctx_obj(c_field!(p, context)) }?.dev.local_addr().port();
        unsafe { create_ah(pd, av_of(&a, port)?) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    ret_errno(|| unsafe { free_in_pd::<AhObj>(ah) })
}
