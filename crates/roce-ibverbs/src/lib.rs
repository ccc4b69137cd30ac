//! A libibverbs-compatible C library: unmodified verbs programs (perftest,
//! rdma-core's examples, middleware written against `<infiniband/verbs.h>`)
//! run over the roce engine inside their own process, with no RDMA
//! hardware and no kernel module.
//!
//! The cdylib is linked as `libibverbs.so.1` with rdma-core's symbol
//! versions (`build.rs`, `symbols.txt`); `roce exec` runs a program over
//! it, or `LD_PRELOAD` it by hand. Devices come from `ROCE_DEVICES` or a
//! small file (`config`), not sysfs.
//!
//! * `abi`: rdma-core 44's structures, checked against the C header by the
//!   layout test;
//! * `objects`: what stands behind each C object; `handle`: the typed
//!   handles between the program's pointers and those wrappers;
//! * `ffi`: the entry points and the ops tables, a file per object family
//!   (the crate's `unsafe` boundary, with its safety argument);
//! * `compat`: the symbols rdma-core's providers and librdmacm import,
//!   which must resolve for a program to load at all; `compat_1_0`: the
//!   IBVERBS_1.0 entry points rdma-core keeps for pre-1.1 binaries;
//! * `devnode`: the `/dev/infiniband/uverbsN` node UCX stats, answered
//!   for the library's devices;
//! * `sys`: eventfds and errno; `regions`: one device per registered byte.

pub mod abi;
mod compat;
mod compat_1_0;
pub mod config;
mod devnode;
mod ffi;
mod handle;
mod objects;
mod regions;
mod sys;

#[cfg(test)]
mod layout;

// The symbol versions programs linked against rdma-core ask for.
#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/symver.rs"));
