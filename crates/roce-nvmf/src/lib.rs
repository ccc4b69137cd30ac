//! NVMe over Fabrics on roce (NVMe RDMA Transport 1.0 over RoCEv2).
//!
//! * [`wire`]: the NVMe and NVMe-oF structures (SQE, CQE, SGL, Connect,
//!   Identify, the discovery log page, the RDMA CM private data).
//! * [`target`]: the controller side as a sans-IO state machine: a
//!   [`target::Target`] of subsystems, a [`target::Queue`] per connection.
//! * [`namespace`]: where a namespace's blocks live.

#[cfg(feature = "udp")]
pub mod initiator;
pub mod namespace;
#[cfg(feature = "udp")]
mod rdma;
#[cfg(feature = "udp")]
pub mod server;
pub mod target;
pub mod wire;
