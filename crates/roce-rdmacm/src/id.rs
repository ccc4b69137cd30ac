//! What stands behind an `rdma_cm_id` and an `rdma_event_channel`, and
//! how roce's CM events reach them.
//!
//! An id is an [`IdObj`]: the C structure the program sees, first (so the
//! program's `struct rdma_cm_id *` is the object's address), and a
//! reference-counted [`Shared`] state, which the CM's handler (on the
//! driver's thread) and queued events hold. Events travel as [`Pending`]
//! items on the id's channel; `rdma_get_cm_event` turns each into an
//! `rdma_cm_event` (`events`).
//!
//! # Safety argument
//! The C part is written by the library only through raw pointers, on
//! the program's thread in a call naming the id, or (for a connection
//! request's new id) before the program has its pointer; the program may
//! read and write it (`context`, and the QP fields rdma_cm programs set)
//! between calls, as with rdma-core. An `IdObj` is freed only by
//! `rdma_destroy_id`, after which the program must not use it and no
//! event refers to it (its handles are closed, its queued events dropped
//! and its delivered ones acknowledged first).

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::abi::*;
use crate::backend::{self, CmEvent};
use crate::queue::{lock, EventQueue};

/// The addresses of the ids and channels made and not yet destroyed.
///
/// A program may hand back an id or channel it destroyed: perftest 4.5's
/// `-R` client, when a connection is rejected, destroys its ids and
/// channel and frees their array, then retries `rdma_resolve_addr` on the
/// same pointers. rdma-core then passes a stale handle to the kernel,
/// which refuses it; here the pointer is checked against these sets
/// before it is read, and refused with `EINVAL`, instead of this library
/// reading freed memory (a crash). A destroyed object's address may be
/// reused by a new one, which the check then lets through, as rdma-core's
/// reused handle would.
pub struct Live {
    ids: Mutex<std::collections::HashSet<usize>>,
    channels: Mutex<std::collections::HashSet<usize>>,
}

pub static LIVE: std::sync::LazyLock<Live> = std::sync::LazyLock::new(|| Live {
    ids: Mutex::new(std::collections::HashSet::new()),
    channels: Mutex::new(std::collections::HashSet::new()),
});

impl Live {
    pub fn id_made(&self, p: *const IdObj) {
        lock(&self.ids).insert(p as usize);
    }
    /// Whether `p` is an id not yet destroyed.
    pub fn id(&self, p: *const IdObj) -> bool {
        lock(&self.ids).contains(&(p as usize))
    }
    /// Forgets `p`; false if it was not live.
    pub fn id_gone(&self, p: *const IdObj) -> bool {
        lock(&self.ids).remove(&(p as usize))
    }
    pub fn channel_made(&self, p: *const ChannelObj) {
        lock(&self.channels).insert(p as usize);
    }
    pub fn channel(&self, p: *const ChannelObj) -> bool {
        lock(&self.channels).contains(&(p as usize))
    }
    pub fn channel_gone(&self, p: *const ChannelObj) -> bool {
        lock(&self.channels).remove(&(p as usize))
    }
}

/// What waits on a channel for `rdma_get_cm_event`.
pub enum Raw {
    /// An event the library makes itself (address and route resolution).
    Local { event: c_int, status: c_int },
    /// An event of roce's CM.
    Wire(Box<CmEvent>),
}

pub struct Pending {
    pub id: Arc<Shared>,
    pub raw: Raw,
}

pub struct Channel {
    pub queue: EventQueue<Pending>,
}

/// An `rdma_event_channel`: the C part first.
#[repr(C)]
pub struct ChannelObj {
    pub c: UnsafeCell<rdma_event_channel>,
    pub ch: Arc<Channel>,
}

impl ChannelObj {
    pub fn new() -> std::io::Result<*mut ChannelObj> {
        use std::os::fd::AsRawFd;
        let ch = Arc::new(Channel { queue: EventQueue::new()? });
        let fd = ch.queue.fd.as_raw_fd();
        let p = Box::into_raw(Box::new(ChannelObj { c: UnsafeCell::new(rdma_event_channel { fd }), ch }));
        LIVE.channel_made(p);
        Ok(p)
    }
}

/// The connection values negotiated with the peer, from its REQ or REP.
#[derive(Clone, Copy, Default)]
pub struct Remote {
    pub qpn: u32,
    pub psn: u32,
    pub path_mtu: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

/// The QP attributes a passive endpoint keeps for `rdma_get_request`.
#[derive(Clone, Copy)]
pub struct QpInit(pub ibv_qp_init_attr);

// SAFETY: the pointers inside (the program's CQs and SRQ) are only copied,
// and passed back to libibverbs on the program's thread; nothing here
// dereferences them.
unsafe impl Send for QpInit {}

/// An id's state, under `Shared::st`.
pub struct State {
    pub channel: Arc<Channel>,
    /// The C channel the id names (`ChannelObj *`, as usize).
    pub channel_obj: usize,
    /// A synchronous id (made with no channel): its calls wait for their
    /// own events, on a private channel.
    pub sync: bool,
    /// Events handed out and not yet acknowledged.
    pub outstanding: u64,
    /// The CM connection (0: none).
    pub conn: u64,
    /// The CM listeners (one per device for a wildcard address).
    pub listeners: Vec<u64>,
    /// The device (index in `addr::devices`).
    pub dev: Option<usize>,
    pub psn: u32,
    pub remote: Remote,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub tos: u8,
    pub ack_timeout: Option<u8>,
    /// `rdma_create_ep` on a passive id: what `rdma_get_request` makes a
    /// QP with.
    pub qp_init_attr: Option<QpInit>,
    /// The CQs and channels were made by `rdma_create_qp`.
    pub own_cqs: bool,
    /// A REP could not be processed: later REJ/DISCONNECTED events are
    /// not reported (as rdma-core's `connect_error`).
    pub connect_error: bool,
    /// The id sent the REQ (its ESTABLISHED comes from the REP, or none
    /// after `rdma_establish`, as from the kernel's `cma_rep_recv`).
    pub active: bool,
    pub local_ece: ibv_ece,
    pub remote_ece: ibv_ece,
    pub dead: bool,
}

pub struct Shared {
    /// The `IdObj` (as usize); 0 until a connection request's id is made.
    pub obj: AtomicUsize,
    pub st: Mutex<State>,
    pub cond: Condvar,
}

impl Shared {
    pub fn new(channel: Arc<Channel>, channel_obj: usize, sync: bool) -> Arc<Shared> {
        Arc::new(Shared {
            obj: AtomicUsize::new(0),
            st: Mutex::new(State {
                channel,
                channel_obj,
                sync,
                outstanding: 0,
                conn: 0,
                listeners: Vec::new(),
                dev: None,
                psn: 0,
                remote: Remote::default(),
                responder_resources: 0,
                initiator_depth: 0,
                tos: 0,
                ack_timeout: None,
                qp_init_attr: None,
                own_cqs: false,
                connect_error: false,
                active: false,
                local_ece: ibv_ece::default(),
                remote_ece: ibv_ece::default(),
                dead: false,
            }),
            cond: Condvar::new(),
        })
    }

    /// An event handed out to the program was acknowledged.
    pub fn complete(&self) {
        let mut st = lock(&self.st);
        st.outstanding = st.outstanding.saturating_sub(1);
        self.cond.notify_all();
    }
}

/// An `rdma_cm_id`: the C part first, then its path record (which
/// `route.path_rec` points at) and the shared state.
#[repr(C)]
pub struct IdObj {
    pub c: UnsafeCell<rdma_cm_id>,
    pub path: UnsafeCell<ibv_sa_path_rec>,
    pub shared: Arc<Shared>,
}

impl IdObj {
    /// A new id on `channel_obj` (a `ChannelObj *`).
    pub fn new(
        shared: Arc<Shared>,
        channel_obj: *mut ChannelObj,
        context: *mut c_void,
        ps: c_int,
        qp_type: c_int,
    ) -> *mut IdObj {
        // SAFETY: all-zero is valid for these C structures (NULL pointers,
        // zero numbers, AF_UNSPEC addresses).
        let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
        c.channel = channel_obj.cast();
        c.context = context;
        c.ps = ps;
        c.qp_type = qp_type;
        // SAFETY: as above.
        let path = UnsafeCell::new(unsafe { std::mem::zeroed() });
        let p = Box::into_raw(Box::new(IdObj { c: UnsafeCell::new(c), path, shared: shared.clone() }));
        shared.obj.store(p as usize, Ordering::Release);
        LIVE.id_made(p);
        p
    }

    pub fn c(&self) -> *mut rdma_cm_id {
        self.c.get()
    }

    /// Sets the route's addresses and GIDs, and its path record when
    /// `resolved`.
    pub fn set_route(&self, src: Option<SocketAddr>, dst: Option<SocketAddr>, resolved: bool) {
        let c = self.c();
        // SAFETY: the module's argument: our C part, on a call naming it.
        unsafe {
            if let Some(s) = src {
                (*c).route.addr.src_addr = crate::addr::to_storage(s).0;
                (*c).route.addr.ibaddr.sgid = ibv_gid { raw: crate::addr::ip_to_gid(s.ip()) };
                (*c).route.addr.ibaddr.pkey = 0xFFFF_u16.to_be();
            }
            if let Some(d) = dst {
                (*c).route.addr.dst_addr = crate::addr::to_storage(d).0;
                (*c).route.addr.ibaddr.dgid = ibv_gid { raw: crate::addr::ip_to_gid(d.ip()) };
            }
            if resolved {
                let (Some(s), Some(d)) = (self.src(), self.dst()) else { return };
                let tos = lock(&self.shared.st).tos;
                *self.path.get() = crate::addr::path_record(s, d, tos);
                (*c).route.path_rec = self.path.get();
                (*c).route.num_paths = 1;
            }
        }
    }

    pub fn src(&self) -> Option<SocketAddr> {
        // SAFETY: the module's argument.
        crate::addr::from_storage(unsafe { &(*self.c()).route.addr.src_addr })
    }

    pub fn dst(&self) -> Option<SocketAddr> {
        // SAFETY: the module's argument.
        crate::addr::from_storage(unsafe { &(*self.c()).route.addr.dst_addr })
    }
}

/// The CM's handles and whose they are.
#[derive(Default)]
pub struct Registry {
    pub conns: HashMap<u64, Arc<Shared>>,
    /// A listener's id and device index.
    pub listeners: HashMap<u64, (Arc<Shared>, usize)>,
    /// Events for a handle not registered yet: the CM may answer (or a
    /// request may come) before `rdma_connect` or `rdma_listen` has
    /// registered the handle it returned.
    pub orphans: HashMap<u64, Vec<CmEvent>>,
}

impl Registry {
    /// Registers a connection of `id`, queueing the events that came first.
    pub fn add_conn(&mut self, h: u64, id: &Arc<Shared>) {
        self.conns.insert(h, id.clone());
        for ev in self.orphans.remove(&h).unwrap_or_default() {
            post(id, Raw::Wire(Box::new(ev)));
        }
    }

    /// Registers a listener of `id` on device `dev`.
    pub fn add_listener(&mut self, h: u64, id: &Arc<Shared>, dev: usize) {
        self.listeners.insert(h, (id.clone(), dev));
        for ev in self.orphans.remove(&h).unwrap_or_default() {
            self.dispatch(Box::new(ev));
        }
    }

    /// Sends an event to the id its handle belongs to.
    fn dispatch(&mut self, ev: Box<CmEvent>) {
        if matches!(ev.kind, backend::EV_REQ | backend::EV_SIDR_REQ) {
            let Some((lid, _)) = self.listeners.get(&ev.listener) else {
                self.orphans.entry(ev.listener).or_default().push(*ev);
                return;
            };
            let lid = lid.clone();
            let (ch, cobj, sync) = {
                let st = lock(&lid.st);
                (st.channel.clone(), st.channel_obj, st.sync)
            };
            // The new id's state; its C part is made when the program
            // takes the event (on a private channel if the listener's is
            // a synchronous id's).
            let new = Shared::new(ch, cobj, sync);
            lock(&new.st).conn = ev.conn;
            self.conns.insert(ev.conn, new);
            post(&lid, Raw::Wire(ev));
        } else if let Some(id) = self.conns.get(&ev.conn) {
            let id = id.clone();
            post(&id, Raw::Wire(ev));
        } else {
            self.orphans.entry(ev.conn).or_default().push(*ev);
        }
    }

    /// Forgets a closed handle's early events; returns the connections
    /// of the requests among them, which the caller closes.
    pub fn forget(&mut self, h: u64) -> Vec<u64> {
        let evs = self.orphans.remove(&h).unwrap_or_default();
        evs.iter()
            .filter(|e| matches!(e.kind, backend::EV_REQ | backend::EV_SIDR_REQ))
            .map(|e| e.conn)
            .collect()
    }
}

pub static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// Runs `f` on the registry (made on first use).
pub fn registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = lock(&REGISTRY);
    f(g.get_or_insert_with(Registry::default))
}

/// Queues an event for `id` on its current channel.
pub fn post(id: &Arc<Shared>, raw: Raw) {
    let ch = lock(&id.st).channel.clone();
    ch.queue.push(Pending { id: id.clone(), raw });
}

/// The handler roce's CM calls with each event (on its thread): the event
/// goes to the id its handle belongs to; a connection request to its
/// listener's id, with a new id's state registered for the connection at
/// once so that its later events are kept. The registry's lock is held
/// while queueing, so that once an id's handles are out of the registry
/// nothing more is queued for it.
///
/// # Safety
/// `ev` points to a valid event for the call.
pub unsafe extern "C" fn on_cm_event(ev: *const CmEvent) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the caller's promise; copied at once.
        let Some(ev) = (unsafe { ev.as_ref() }) else { return };
        let ev = Box::new(*ev);
        registry(|r| r.dispatch(ev));
    });
}
