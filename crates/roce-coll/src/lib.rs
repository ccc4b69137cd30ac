//! Collectives (all-reduce, reduce-scatter, all-gather, broadcast, reduce,
//! all-to-all, barrier) as sans-IO state machines over a small verbs-shaped
//! [`Transport`]: no threads, sockets or clocks inside; time comes from the
//! transport, so the same code runs over real `roce` devices and inside
//! the fabric simulator.
//!
//! # Pieces
//! * [`Transport`] ([`transport`](Transport)): per peer, `channels` RC QPs
//!   and fixed receive/staging slots registered once; RDMA WRITE WITH
//!   IMMEDIATE for data, zero-length ones for credits; `poll`; a clock.
//! * [`Engine`]: one rank's state machine. [`Engine::start`] a call
//!   ([`OpDesc`]: operation, [`DataType`], [`RedOp`], count, root,
//!   [`Algo`]), then [`Engine::progress`] until [`Poll::Done`]. `progress`
//!   never blocks: it consumes completions, reduces what arrived straight
//!   from the receive slots, posts what may be posted, and says until when
//!   to wait at most ([`Poll::Pending`]). A real driver loops "progress;
//!   wait for completions"; a simulator calls `progress` on events.
//! * The algorithms, as per-rank schedules run chunk by chunk (so large
//!   messages stream, several chunks in flight spread over the channels):
//!   ring (NCCL), Rabenseifner and recursive doubling (Thakur, Rabenseifner
//!   and Gropp 2005), NCCL's double binary tree (Sanders, Speck and Träff
//!   2009; [`tree`]), pairwise all-to-all, dissemination barrier.
//! * [`cost`]: the model that picks an algorithm for [`Algo::Auto`] and
//!   explains its pick.
//! * [`reduce`]: the vectorisable reduction kernels.
//! * [`testkit`]: `n` ranks in one process over a seeded, reordering,
//!   in-memory transport, for tests here and in the driver and simulator.
//!
//! # Agreement between ranks
//! Every data message starts with a [`HEADER_BYTES`]-byte header that
//! carries the whole call (operation, type, reduction, count, root,
//! resolved algorithm, sequence number): ranks that disagree on the call
//! fail with [`Error::Mismatch`] naming the field at the first message
//! that crosses between them, and a message of another call is never
//! reduced into this one ([`Error::Protocol`]). A call with count 0 sends
//! nothing (as NCCL), so a disagreement that involves one shows up at the
//! next call or as a timeout. A rank that stops answering makes its peers
//! fail after [`Config::timeout_ns`] with [`Error::Timeout`], which names
//! the peer waited for and the operation.
//!
//! # Example
//! Four ranks in one process over the in-memory transport:
//! ```
//! use roce_coll::testkit::{Cluster, NetConfig, RankBuffers};
//! use roce_coll::{Config, DataType, Layout, OpDesc, OpKind, RedOp};
//!
//! let n = 4;
//! let mut cfg = Config::new(0, n); // rank and size are set per rank
//! cfg.layout = Layout { channels: 2, slots: 4, slot_bytes: 4096 };
//! let mut cluster = Cluster::new(n, &cfg, NetConfig::new(42))?;
//! let call = OpDesc::new(OpKind::AllReduce, DataType::F32, 1000).redop(RedOp::Sum);
//! let mut bufs: Vec<RankBuffers> = (0..n)
//!     .map(|r| RankBuffers::InPlace((0..1000).flat_map(|i| ((r * i) as f32).to_ne_bytes()).collect()))
//!     .collect();
//! let outcome = cluster.run(&vec![call; n], &mut bufs);
//! assert!(outcome.iter().all(|o| matches!(o, Some(Ok(())))));
//! let x7 = f32::from_ne_bytes(bufs[2].result()[28..32].try_into().unwrap());
//! assert_eq!(x7, (0 + 7 + 14 + 21) as f32);
//! # Ok::<(), roce_coll::Error>(())
//! ```
//! What [`testkit::Cluster::run`] does for each rank, and what a driver
//! over real devices does:
//! ```ignore
//! engine.start(&mut transport, call, &mut buffers)?;
//! loop {
//!     match engine.progress(&mut transport, &mut buffers)? {
//!         Poll::Done => break,
//!         Poll::Pending { deadline_ns } => transport.wait_for_completions_until(deadline_ns),
//!     }
//! }
//! ```

pub mod cost;
mod deps;
mod engine;
mod error;
mod header;
pub mod reduce;
mod schedule;
pub mod testkit;
mod transport;
pub mod tree;
mod types;

// The driver side: real processes over `roce` devices.
#[cfg(feature = "udp")]
mod comm;
pub mod launch;
#[cfg(feature = "udp")]
pub mod net;
pub mod rendezvous;

#[cfg(feature = "udp")]
pub use comm::{CommConfig, CommError, Communicator, Element};
pub use engine::{Buffers, Config, Engine, Poll};
pub use error::{Error, TransportError, Waiting};
pub use rendezvous::RendezvousConfig;
pub use transport::{data_slot, Completion, Layout, Transport};
pub use types::ParseError;
pub use types::{Algo, DataType, OpDesc, OpKind, RedOp};

/// Bytes of the header at the start of every data message.
pub const HEADER_BYTES: usize = 64;
