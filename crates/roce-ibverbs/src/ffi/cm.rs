//! roce's CM for the drop-in librdmacm (`crates/roce-rdmacm`): private
//! entry points in version node `ROCE_PRIVATE`, which that library finds
//! with `dlsym`. The CM runs in the device's engine (`roce::cm`: the IB CM
//! on QP 1 of the device's socket); these calls are `roce::Device`'s
//! `cm_*` calls by number handles. Each device's CM events arrive on one
//! `roce::cm::EventChannel`, which a thread of this library drains into
//! the one handler the library registers. The engine brings a passive
//! QP up before its REP (`cm_accept`); the active side's QP is moved by
//! the library with the attributes `roce_cm_qp_attr` gives, as rdma-core's
//! librdmacm moves it around the kernel's CM.
//!
//! A handle is `device index << 32 | CM id`. The two structures below are
//! `struct roce_cm_param` and `struct roce_cm_event` of roce-rdmacm's
//! `abi` (its `backend` documents each field): the layouts must agree.

use std::collections::HashMap;
use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use libc::EINVAL;
use roce::cm::{AcceptOpts, CmEvent, CmId, ConnectOpts, EventChannel, PortSpace, ReqInfo};

use super::{ctx_obj, ret_errno, R};
use crate::abi::*;
use crate::objects::lock;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct roce_cm_param {
    pub qpn: u32,
    pub psn: u32,
    pub qkey: u32,
    pub status: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub flow_control: u8,
    pub path_mtu: u8,
    pub ack_timeout: u8,
    pub tos: u8,
    pub private_data_len: u8,
    pub _pad: [u8; 6],
    pub private_data: *const u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct roce_cm_event {
    pub kind: u32,
    pub status: i32,
    pub listener: u64,
    pub conn: u64,
    pub remote_qpn: u32,
    pub remote_psn: u32,
    pub qkey: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub flow_control: u8,
    pub path_mtu: u8,
    pub ack_timeout: u8,
    pub family: u8,
    pub private_data_len: u8,
    pub local_port: u16,
    pub remote_port: u16,
    pub _pad: [u8; 2],
    pub local_ip: [u8; 16],
    pub remote_ip: [u8; 16],
    pub private_data: [u8; 256],
}

const EV_REQ: u32 = 1;
const EV_REP: u32 = 2;
const EV_RTU: u32 = 3;
const EV_REJ: u32 = 4;
const EV_DREQ: u32 = 5;
const EV_TIMEOUT: u32 = 7;
const EV_SIDR_REQ: u32 = 8;
const EV_SIDR_REP: u32 = 9;

pub type Handler = unsafe extern "C" fn(*const roce_cm_event);

/// A device's CM as these calls use it: the device, the channel all its
/// identifiers report to, and the requests seen (an accept needs the
/// REQ's values).
struct CmDev {
    dev: roce::Device,
    index: usize,
    ch: EventChannel,
    reqs: Mutex<HashMap<u32, ReqInfo>>,
}

#[derive(Default)]
struct State {
    handler: Option<Handler>,
    devs: HashMap<usize, Arc<CmDev>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    f(lock(&STATE).get_or_insert_with(State::default))
}

/// The errno of a CM call's failure: the CM's own refusals (unknown id,
/// wrong state, a port in use, ...) as the kernel's rdma_cm gives them.
fn cm_err(e: roce::Error) -> c_int {
    use roce::cm::CmError as C;
    match e {
        roce::Error::Cm(C::AddressInUse(_)) => libc::EADDRINUSE,
        roce::Error::Cm(C::AddressFamily(_)) => libc::EAFNOSUPPORT,
        roce::Error::Cm(_) => EINVAL,
        e => super::errno_of(&e),
    }
}

fn handle(dev: usize, id: CmId) -> u64 {
    (dev as u64) << 32 | u64::from(id.0)
}

fn split(h: u64) -> R<(Arc<CmDev>, CmId)> {
    let d = state(|s| s.devs.get(&((h >> 32) as usize)).cloned()).ok_or(EINVAL)?;
    Ok((d, CmId(h as u32)))
}

/// The CM of the device behind `ctx`, its events pumped to the handler.
fn cm_dev(ctx: *mut ibv_context) -> R<Arc<CmDev>> {
    // SAFETY: the caller passes a context of this library (the private
    // interface's contract, as for any ibv_context).
    let c = unsafe { ctx_obj(ctx) }?;
    let index = c.device.index;
    let made = state(|s| -> R<(Arc<CmDev>, bool)> {
        if let Some(d) = s.devs.get(&index) {
            return Ok((d.clone(), false));
        }
        let ch = EventChannel::new().map_err(cm_err)?;
        let d = Arc::new(CmDev { dev: c.dev.clone(), index, ch, reqs: Mutex::default() });
        s.devs.insert(index, d.clone());
        Ok((d, true))
    })?;
    if made.1 {
        let d = made.0.clone();
        // The device's CM events for the library's handler, for the life
        // of the process (librdmacm keeps its devices open as long).
        std::thread::Builder::new()
            .name(format!("roce-cm-{index}"))
            .spawn(move || loop {
                if let Some(ev) = d.ch.next(None) {
                    d.deliver(ev);
                }
            })
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EAGAIN))?;
    }
    Ok(made.0)
}

fn wire(ip: IpAddr) -> (u8, [u8; 16]) {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            (4, b)
        }
        IpAddr::V6(v6) => (6, v6.octets()),
    }
}

fn ip_of(family: u8, b: &[u8; 16]) -> IpAddr {
    if family == 4 {
        IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*b))
    }
}

fn ps_of(ps: u16) -> R<PortSpace> {
    match ps {
        0x0106 => Ok(PortSpace::Tcp),
        0x0111 => Ok(PortSpace::Udp),
        _ => Err(libc::EAFNOSUPPORT),
    }
}

fn blank() -> roce_cm_event {
    // SAFETY: integers and byte arrays: all-zero is valid.
    unsafe { std::mem::zeroed() }
}

fn set_data(e: &mut roce_cm_event, pd: &[u8]) {
    let n = pd.len().min(255);
    e.private_data[..n].copy_from_slice(&pd[..n]);
    e.private_data_len = n as u8;
}

impl CmDev {
    fn deliver(&self, ev: CmEvent) {
        let mut e = blank();
        let (fam, local) = wire(self.dev.gid());
        e.family = fam;
        e.local_ip = local;
        match ev {
            CmEvent::ConnectRequest { listener, id, req } => {
                e.kind = EV_REQ;
                e.listener = handle(self.index, listener);
                e.conn = handle(self.index, id);
                e.remote_qpn = req.remote_qpn;
                e.remote_psn = req.starting_psn;
                e.responder_resources = req.responder_resources;
                e.initiator_depth = req.initiator_depth;
                e.retry_count = req.retry_count;
                e.rnr_retry_count = req.rnr_retry_count;
                e.srq = u8::from(req.srq);
                e.flow_control = 1;
                e.path_mtu = req.path_mtu;
                e.ack_timeout = req.local_ack_timeout;
                let (f, l) = wire(req.dst_ip);
                let (_, r) = wire(req.src_ip);
                (e.family, e.local_ip, e.remote_ip) = (f, l, r);
                (e.local_port, e.remote_port) = (req.dst_port, req.src_port);
                set_data(&mut e, &req.private_data);
                lock(&self.reqs).insert(id.0, req);
            }
            CmEvent::ConnectResponse { id, rep } => {
                e.kind = EV_REP;
                e.conn = handle(self.index, id);
                e.remote_qpn = rep.remote_qpn;
                e.remote_psn = rep.starting_psn;
                e.responder_resources = rep.responder_resources;
                e.initiator_depth = rep.initiator_depth;
                e.rnr_retry_count = rep.rnr_retry_count;
                e.srq = u8::from(rep.srq);
                e.flow_control = 1;
                e.path_mtu = 3;
                e.ack_timeout = rep.ack_timeout;
                set_data(&mut e, &rep.private_data);
            }
            CmEvent::Established { id } => {
                e.kind = EV_RTU;
                e.conn = handle(self.index, id);
            }
            CmEvent::Rejected { id, reason, private_data } => {
                e.kind = EV_REJ;
                e.conn = handle(self.index, id);
                e.status = i32::from(reason);
                set_data(&mut e, &private_data);
            }
            CmEvent::Unreachable { id } | CmEvent::SidrTimeout { id } => {
                e.kind = EV_TIMEOUT;
                e.conn = handle(self.index, id);
                e.status = libc::ETIMEDOUT;
            }
            CmEvent::Disconnected { id, private_data } => {
                e.kind = EV_DREQ;
                e.conn = handle(self.index, id);
                set_data(&mut e, &private_data);
            }
            CmEvent::SidrRequest { listener, id, req } => {
                e.kind = EV_SIDR_REQ;
                e.listener = handle(self.index, listener);
                e.conn = handle(self.index, id);
                let (f, r) = wire(req.src_ip);
                (e.family, e.remote_ip) = (f, r);
                (e.local_port, e.remote_port) = (req.dst_port, req.src_port);
                set_data(&mut e, &req.private_data);
            }
            CmEvent::SidrReply { id, status, qpn, qkey, private_data } => {
                e.kind = EV_SIDR_REP;
                e.conn = handle(self.index, id);
                e.status = i32::from(status);
                e.remote_qpn = qpn;
                e.qkey = qkey;
                set_data(&mut e, &private_data);
            }
            // Not reported by librdmacm's users' CM either once the id is
            // gone; the library has nothing to do with it.
            _ => return,
        }
        if let Some(h) = state(|s| s.handler) {
            // SAFETY: the library's handler, given a valid event for the call.
            unsafe { h(&e) };
        }
    }
}

/// The program's private data of a parameter block.
///
/// # Safety
/// `p.private_data` is valid for `p.private_data_len` bytes (or NULL).
unsafe fn data(p: &roce_cm_param) -> Vec<u8> {
    if p.private_data.is_null() || p.private_data_len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(p.private_data, usize::from(p.private_data_len)) }.to_vec()
}

#[no_mangle]
pub extern "C" fn roce_cm_set_handler(h: Option<Handler>) -> c_int {
    state(|s| s.handler = h);
    0
}

#[no_mangle]
pub unsafe extern "C" fn roce_cm_listen(
    ctx: *mut ibv_context,
    ps: u16,
    _family: u8,
    _ip: *const u8,
    port: u16,
    out: *mut u64,
) -> c_int {
    ret_errno(|| {
        let d = cm_dev(ctx)?;
        let out = unsafe { out.as_mut() }.ok_or(EINVAL)?;
        let ps = ps_of(ps)?;
        let id = d.dev.cm_listen(&d.ch, ps, port).map_err(cm_err)?;
        *out = handle(d.index, id);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn roce_cm_connect(
    ctx: *mut ibv_context,
    ps: u16,
    family: u8,
    _src: *const u8,
    src_port: u16,
    dst: *const u8,
    dst_port: u16,
    p: *const roce_cm_param,
    out: *mut u64,
) -> c_int {
    ret_errno(|| {
        let d = cm_dev(ctx)?;
        let out = unsafe { out.as_mut() }.ok_or(EINVAL)?;
        let p = unsafe { p.as_ref() }.ok_or(EINVAL)?;
        let dst = unsafe { dst.cast::<[u8; 16]>().as_ref() }.ok_or(EINVAL)?;
        let dst_ip = ip_of(family, dst);
        let pd = unsafe { data(p) };
        let peer = SocketAddr::new(dst_ip, dst_port);
        let id = match ps_of(ps)? {
            PortSpace::Udp => d.dev.cm_sidr_resolve(&d.ch, peer, &pd).map_err(cm_err)?,
            PortSpace::Tcp => {
                let o = ConnectOpts {
                    private_data: pd,
                    responder_resources: p.responder_resources,
                    initiator_depth: p.initiator_depth,
                    retry_count: p.retry_count,
                    rnr_retry_count: p.rnr_retry_count,
                    src_port,
                    // A peer device on this device's UDP port (as the
                    // library's address vectors assume), if not 4791.
                    peer_udp_port: Some(d.dev.local_addr().port()).filter(|&p| p != 4791),
                    auto_establish: false,
                };
                d.dev.cm_connect(&d.ch, p.qpn, peer, &o).map_err(cm_err)?
            }
        };
        *out = handle(d.index, id);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn roce_cm_accept(h: u64, p: *const roce_cm_param) -> c_int {
    ret_errno(|| {
        let (d, id) = split(h)?;
        let p = unsafe { p.as_ref() }.ok_or(EINVAL)?;
        let pd = unsafe { data(p) };
        let Some(req) = lock(&d.reqs).remove(&id.0) else {
            // A SIDR request (no REQ kept): the UD service's answer.
            return d.dev.cm_sidr_reply(id, p.qpn, p.qkey, &pd).map_err(cm_err);
        };
        let o = AcceptOpts {
            private_data: pd,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            rnr_retry_count: p.rnr_retry_count,
        };
        // The engine brings the QP to RTS, then the REP leaves.
        d.dev.cm_accept(id, p.qpn, &req, &o).map_err(cm_err)
    })
}

#[no_mangle]
pub unsafe extern "C" fn roce_cm_reject(h: u64, _reason: u16, pd: *const u8, len: u8) -> c_int {
    ret_errno(|| {
        let (d, id) = split(h)?;
        let data = if pd.is_null() || len == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's buffer of `len` bytes.
            unsafe { std::slice::from_raw_parts(pd, usize::from(len)) }.to_vec()
        };
        lock(&d.reqs).remove(&id.0);
        d.dev.cm_reject(id, &data).map_err(cm_err)
    })
}

#[no_mangle]
pub extern "C" fn roce_cm_establish(h: u64) -> c_int {
    ret_errno(|| {
        let (d, id) = split(h)?;
        d.dev.cm_establish(id).map_err(cm_err)
    })
}

#[no_mangle]
pub extern "C" fn roce_cm_disconnect(h: u64) -> c_int {
    ret_errno(|| {
        let (d, id) = split(h)?;
        d.dev.cm_disconnect(id, &[]).map_err(cm_err)
    })
}

#[no_mangle]
pub extern "C" fn roce_cm_close(h: u64) {
    let _ = ret_errno(|| {
        let (d, id) = split(h)?;
        lock(&d.reqs).remove(&id.0);
        let _ = d.dev.cm_destroy(id);
        Ok(())
    });
}

/// `rdma_init_qp_attr` of a connection: the attributes the engine gives
/// its QP in `state` (INIT, RTR, RTS) once the REQ or REP is known.
#[no_mangle]
pub unsafe extern "C" fn roce_cm_qp_attr(
    h: u64,
    state: c_int,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    ret_errno(|| {
        let (d, id) = split(h)?;
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        let m = unsafe { mask.as_mut() }.ok_or(EINVAL)?;
        let st = match state {
            1 => roce::QpState::Init,
            2 => roce::QpState::Rtr,
            3 => roce::QpState::Rts,
            _ => return Err(EINVAL),
        };
        let (x, xm) = d.dev.cm_qp_attr(id, st).map_err(cm_err)?;
        a.qp_state = state;
        a.path_mtu = x.path_mtu as c_int;
        a.qkey = x.qkey;
        a.rq_psn = x.rq_psn.value();
        a.sq_psn = x.sq_psn.value();
        a.dest_qp_num = x.dest_qp_num;
        a.qp_access_flags = x.qp_access_flags.0;
        a.ah_attr = super::ah::ah_attr_of(&x.av);
        a.pkey_index = x.pkey_index;
        a.max_rd_atomic = x.max_rd_atomic;
        a.max_dest_rd_atomic = x.max_dest_rd_atomic;
        a.min_rnr_timer = x.min_rnr_timer;
        a.port_num = 1;
        a.timeout = x.timeout;
        a.retry_cnt = x.retry_cnt;
        a.rnr_retry = x.rnr_retry;
        *m = xm.0 as c_int;
        Ok(())
    })
}
