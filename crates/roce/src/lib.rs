//! RoCEv2 over real UDP sockets: the driver that runs the `roce-proto`
//! engine on a socket, and the verbs API applications use.
//!
//! ```no_run
//! use roce::*;
//! let dev = Device::open(DeviceConfig::new("127.0.0.1:4791".parse().unwrap()))?;
//! let pd = dev.alloc_pd()?;
//! let cq = dev.create_cq(256)?;
//! let qp = pd.create_qp(QpBuilder::rc(&cq))?;
//! let mr = pd.reg_mr(MemBuf::new(4096), Access::ALL)?;
//! mr.write(0, b"hello")?; // safe whatever the NIC does: under the device lock
//! # Ok::<(), roce::Error>(())
//! ```

mod buffer;
mod capture;
pub mod cm;
mod cm_events;
mod config;
mod cq;
pub mod crypto;
mod device;
mod driver;
mod error;
mod mr;
mod netif;
mod pd;
mod qp;
mod stats;
mod thread;
mod timer;
/// Batched UDP I/O. Not part of the public API: public only for the
/// raw-UDP baseline of the `vs_udp` benchmark.
#[doc(hidden)]
pub mod udp;
mod wait;

pub use buffer::{alloc_buffer, try_alloc_buffer, HUGE_PAGE_SIZE};
pub use config::{DeviceConfig, RxIcrcCheck};
pub use cq::{Cq, WaitCompletions, WC_ZERO};
pub use device::Device;
pub use driver::{DriverStats, SendError};
pub use error::{Error, Result};
pub use mr::Mr;
pub use pd::{Ah, Pd, Srq};
pub use qp::{ConnectOptions, Endpoint, Qp, QpBuilder};
pub use roce_proto::cc::{CcAlgorithm, DcqcnParams};
pub use roce_proto::{
    gid_from_bytes, gid_to_bytes, Access, AddressVector, AsyncEvent, AttrMask, CnpConfig, Counters, CqId,
    DirectionKey, MemBuf, MrAddressing, PathMtu, QpAttr, QpCap, QpKeys, QpRateState, QpState, QpType, RecvWr,
    SendOp, SendWr, Sge, SrqId, UdDest, VerbsError, Wc, WcOpcode, WcStatus, WorkQueue, WC_GRH, WC_WITH_IMM,
    WC_WITH_INV,
};
pub use roce_wire::Psn;
pub use udp::SocketBuffers;
