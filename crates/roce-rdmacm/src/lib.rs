//! A librdmacm-compatible C library: unmodified rdma_cm programs (rping,
//! ucmatose, udaddy, perftest's `-R`, rdma_server/rdma_client ...) connect
//! by IP address over roce's CM, with no kernel `rdma_cm` and no
//! `/dev/infiniband`.
//!
//! The cdylib is linked as `librdmacm.so.1` with rdma-core 44's version
//! nodes RDMACM_1.0 to 1.3 and every symbol in them (`build.rs`,
//! `symbols.txt`); `roce exec` loads it with roce's libibverbs. The CM
//! itself (the IB CM messages on QP 1 of the device's UDP socket) runs in
//! roce's libibverbs, which owns the devices; this library keeps the ids
//! and their events and moves the QPs, as rdma-core's does over the
//! kernel's CM.
//!
//! * `abi`: the C structures (checked against the headers by `layout`);
//! * `verbs`: the libibverbs entry points, found at run time; `backend`:
//!   roce's private CM calls among them;
//! * `addr`: devices by IP address, sockaddrs, RoCE paths;
//! * `id`: ids, channels and the CM's event handler; `events`: turning CM
//!   events into `rdma_cm_event`s; `qp`: the QP attributes of a
//!   connection; `queue`: the pollable event queue;
//! * `ffi`: the entry points (the crate's C boundary);
//! * `sys`: eventfds, errno, random bytes.

mod abi;
mod addr;
mod backend;
mod events;
mod ffi;
mod id;
mod qp;
mod queue;
mod sys;
mod verbs;

#[cfg(test)]
mod layout;

// The symbol versions programs linked against rdma-core ask for.
#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/symver.rs"));
