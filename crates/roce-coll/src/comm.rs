//! The communicator: the collectives on real processes over `roce`.
//!
//! A [`Communicator`] is one rank's end of a job: its rendezvous (the
//! store on rank 0, which also watches the ranks' liveness), its
//! [`RoceTransport`] (QPs to every peer, `channels` per peer) and the
//! sans-IO [`Engine`] that runs the algorithms over it. A call starts the
//! engine and drives it: `progress`, and while it is pending, wait on the
//! transport (spin, then sleep) until a completion, the call's deadline or
//! the next look at the liveness monitor. So a call ends in one of three
//! ways: done; failed by the engine (a typed [`crate::Error`]: timeout
//! naming the peer waited for, the ranks disagreeing on the call, a
//! transport error); or failed because the store announced a rank lost
//! (its process exited, was killed, or stopped sending heartbeats), which
//! names that rank and is reported in preference to the timeout it causes
//! elsewhere.
//!
//! ```
//! use roce_coll::{Communicator, CommConfig, RedOp, RendezvousConfig};
//! use std::time::Duration;
//!
//! // Two ranks as threads here; real jobs run one rank per process (see
//! // `launch`), with the same code.
//! let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
//! let ranks: Vec<_> = (0..2)
//!     .map(|rank| {
//!         std::thread::spawn(move || -> Result<Vec<f32>, roce_coll::CommError> {
//!             let rdv = RendezvousConfig {
//!                 addr: format!("127.0.0.1:{port}"),
//!                 rank,
//!                 world: 2,
//!                 timeout: Duration::from_secs(10),
//!             };
//!             let mut comm = Communicator::new(rdv, CommConfig::default())?;
//!             let mut x = vec![rank as f32 + 1.0; 1000];
//!             comm.all_reduce(&mut x, RedOp::Sum)?;
//!             comm.finish()?;
//!             Ok(x)
//!         })
//!     })
//!     .collect();
//! for r in ranks {
//!     assert!(r.join().unwrap()?.iter().all(|&v| v == 3.0));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::cost::Params;
use crate::engine::{Buffers, Config, Engine, Poll};
use crate::error::Error;
use crate::launch::{self, LaunchError, Placement};
use crate::net::{NetConfig, NetError, RoceTransport, WaitPolicy, WaitStats};
use crate::rendezvous::{Monitor, Rendezvous, RendezvousConfig, RendezvousError};
use crate::transport::{Layout, Transport};
use crate::types::{Algo, DataType, OpDesc, OpKind, RedOp};

/// How often a waiting call looks at the liveness monitor.
const LOOK: Duration = Duration::from_millis(20);

/// Errors of the communicator.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// The call failed in the engine (timeout, mismatch, protocol,
    /// transport), with the peer it names.
    #[error(transparent)]
    Call(#[from] Error),
    /// The store announced a rank lost while this rank was in `op`.
    #[error("{op}: rank {rank} failed: {reason}")]
    PeerLost { op: OpKind, rank: usize, reason: String },
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    #[error("setting up the transport: {0}")]
    Net(#[from] NetError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// Buffers of the wrong length for the call.
    #[error("{op}: {detail}")]
    Buffer { op: OpKind, detail: String },
}

impl CommError {
    /// The rank the error blames, if any.
    pub fn rank(&self) -> Option<usize> {
        match self {
            CommError::Call(e) => e.peer(),
            CommError::PeerLost { rank, .. } => Some(*rank),
            CommError::Rendezvous(RendezvousError::Lost { rank, .. }) => Some(*rank),
            _ => None,
        }
    }
}

/// How to build a communicator. Every rank must use the same layout and
/// cost parameters (the algorithm `Auto` picks must be the same everywhere).
#[derive(Debug, Clone)]
pub struct CommConfig {
    pub layout: Layout,
    /// A call fails when nothing arrives for it this long; a rank silent
    /// for half of it is declared lost by the store.
    pub timeout: Duration,
    /// This rank's QPs paced at this rate, bits/s.
    pub rate_bps: Option<u64>,
    /// How long a waiting rank spins before it sleeps (`roce coll
    /// --spin-us`). `None` (the default): [`crate::net::AUTO_SPIN`] when
    /// the ranks on this host have a core each, else none, since a rank
    /// spinning on a shared core holds it from the peer it waits for.
    pub spin: Option<Duration>,
    /// The cost model that resolves `Algo::Auto`.
    pub cost: Params,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig {
            layout: Layout::DEFAULT,
            timeout: Duration::from_secs(30),
            rate_bps: None,
            spin: None,
            cost: Params::default(),
        }
    }
}

/// Element types of the typed calls.
pub trait Element: IntoBytes + FromBytes + Immutable + Copy + 'static {
    const DTYPE: DataType;
}
impl Element for f32 {
    const DTYPE: DataType = DataType::F32;
}
impl Element for f64 {
    const DTYPE: DataType = DataType::F64;
}
impl Element for half::f16 {
    const DTYPE: DataType = DataType::F16;
}
impl Element for half::bf16 {
    const DTYPE: DataType = DataType::Bf16;
}
impl Element for i32 {
    const DTYPE: DataType = DataType::I32;
}
impl Element for i64 {
    const DTYPE: DataType = DataType::I64;
}
impl Element for u8 {
    const DTYPE: DataType = DataType::U8;
}

/// One rank of a job.
pub struct Communicator {
    rdv: Rendezvous,
    t: RoceTransport,
    engine: Engine,
    monitor: Arc<Monitor>,
    algo: Algo,
}

impl Communicator {
    /// Joins the job at the rendezvous and connects to every peer.
    pub fn new(rdv: RendezvousConfig, cfg: CommConfig) -> Result<Communicator, CommError> {
        let mut rdv = Rendezvous::join(rdv)?;
        let net = NetConfig { layout: cfg.layout, rate_bps: cfg.rate_bps, spin: cfg.spin };
        let t = RoceTransport::connect(&mut rdv, net)?;
        let ecfg = Config {
            rank: rdv.rank(),
            size: rdv.world(),
            layout: cfg.layout,
            timeout_ns: cfg.timeout.as_nanos() as u64,
            cost: cfg.cost,
        };
        let engine = Engine::new(ecfg)?;
        let monitor = rdv.monitor();
        Ok(Communicator { rdv, t, engine, monitor, algo: Algo::Auto })
    }

    /// Joins the job the launcher describes ([`launch::detect_env`]:
    /// mpirun, srun, torchrun or `ROCE_COLL_*`); without one, a world of
    /// one rank on a private store.
    pub fn from_env(cfg: CommConfig) -> Result<Communicator, CommError> {
        let p = match launch::detect_env()? {
            Some(p) => p,
            None => Placement {
                rank: 0,
                world: 1,
                rendezvous: format!("127.0.0.1:{}", launch::free_local_port()?),
                source: "single process",
            },
        };
        let timeout = cfg.timeout;
        Communicator::new(RendezvousConfig { addr: p.rendezvous, rank: p.rank, world: p.world, timeout }, cfg)
    }

    pub fn rank(&self) -> usize {
        self.rdv.rank()
    }
    pub fn world(&self) -> usize {
        self.rdv.world()
    }
    /// The transport (its addresses, its waiting statistics).
    pub fn transport(&self) -> &RoceTransport {
        &self.t
    }
    /// What waiting has cost so far.
    pub fn wait_stats(&self) -> WaitStats {
        self.t.stats
    }
    /// How this rank waits (the spin budget and what chose it).
    pub fn wait_policy(&self) -> WaitPolicy {
        self.t.wait_policy()
    }
    /// The algorithm the typed calls use (`Auto`: the cost model's pick).
    pub fn set_algo(&mut self, algo: Algo) {
        self.algo = algo;
    }

    /// Every rank's `blob`, in rank order, through the store (not the
    /// RDMA path: for setup and reports, not data).
    pub fn exchange(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        Ok(self.rdv.all_gather(blob)?)
    }

    /// Runs one call on byte buffers described by `desc` (what the typed
    /// calls and the CLI use).
    pub fn run(&mut self, desc: OpDesc, mut bufs: Buffers<'_>) -> Result<(), CommError> {
        if let Some(l) = self.monitor.lost() {
            return Err(CommError::PeerLost { op: desc.op, rank: l.rank, reason: l.reason });
        }
        let r = self.drive(desc, &mut bufs);
        r.map_err(|e| match (&e, self.monitor.lost()) {
            // A lost rank explains timeouts and transport errors
            // elsewhere: name it rather than the neighbour waited for.
            (CommError::Call(Error::Timeout { .. } | Error::Transport { .. }), Some(l)) => {
                CommError::PeerLost { op: desc.op, rank: l.rank, reason: l.reason }
            }
            _ => e,
        })
    }

    fn drive(&mut self, desc: OpDesc, bufs: &mut Buffers<'_>) -> Result<(), CommError> {
        self.engine.start(&mut self.t, desc, bufs)?;
        loop {
            match self.engine.progress(&mut self.t, bufs)? {
                Poll::Done => return Ok(()),
                Poll::Pending { deadline_ns } => {
                    let look = self.t.now_ns() + LOOK.as_nanos() as u64;
                    let until = deadline_ns.min(look);
                    if let Err(source) = self.t.wait(until) {
                        return Err(Error::Transport { op: desc.op, seq: 0, source }.into());
                    }
                    if let Some(l) = self.monitor.lost() {
                        return Err(CommError::PeerLost { op: desc.op, rank: l.rank, reason: l.reason });
                    }
                }
            }
        }
    }

    fn desc<T: Element>(&self, op: OpKind, count: usize) -> OpDesc {
        OpDesc::new(op, T::DTYPE, count).algo(self.algo)
    }

    fn check(op: OpKind, what: &str, got: usize, want: usize) -> Result<(), CommError> {
        if got != want {
            return Err(CommError::Buffer {
                op,
                detail: format!("{what} holds {got} elements, the call needs {want}"),
            });
        }
        Ok(())
    }

    /// All-reduce in place: every rank ends with the reduction of every
    /// rank's `buf`.
    pub fn all_reduce<T: Element>(&mut self, buf: &mut [T], op: RedOp) -> Result<(), CommError> {
        let d = self.desc::<T>(OpKind::AllReduce, buf.len()).redop(op);
        self.run(d, Buffers::InPlace(buf.as_mut_bytes()))
    }

    /// All-reduce out of place (`send` and `recv` the same length).
    pub fn all_reduce_into<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: RedOp,
    ) -> Result<(), CommError> {
        Self::check(OpKind::AllReduce, "the receive buffer", recv.len(), send.len())?;
        let d = self.desc::<T>(OpKind::AllReduce, send.len()).redop(op);
        self.run(d, Buffers::OutOfPlace { send: send.as_bytes(), recv: recv.as_mut_bytes() })
    }

    /// Reduce-scatter: `send` holds `n` blocks of `recv.len()`; rank r
    /// receives the reduction of block r.
    pub fn reduce_scatter<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: RedOp,
    ) -> Result<(), CommError> {
        let n = self.world();
        Self::check(OpKind::ReduceScatter, "the send buffer", send.len(), recv.len() * n)?;
        let d = self.desc::<T>(OpKind::ReduceScatter, recv.len()).redop(op);
        self.run(d, Buffers::OutOfPlace { send: send.as_bytes(), recv: recv.as_mut_bytes() })
    }

    /// Reduce-scatter in place: `buf` holds `n` blocks; the result lands in
    /// block `rank` (NCCL's in-place convention).
    pub fn reduce_scatter_in_place<T: Element>(&mut self, buf: &mut [T], op: RedOp) -> Result<(), CommError> {
        let n = self.world();
        if buf.len() % n != 0 {
            return Err(CommError::Buffer {
                op: OpKind::ReduceScatter,
                detail: format!("{} elements are not {n} equal blocks", buf.len()),
            });
        }
        let d = self.desc::<T>(OpKind::ReduceScatter, buf.len() / n).redop(op);
        self.run(d, Buffers::InPlace(buf.as_mut_bytes()))
    }

    /// All-gather: rank r's `send` lands in block r of every rank's `recv`.
    pub fn all_gather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let n = self.world();
        Self::check(OpKind::AllGather, "the receive buffer", recv.len(), send.len() * n)?;
        let d = self.desc::<T>(OpKind::AllGather, send.len());
        self.run(d, Buffers::OutOfPlace { send: send.as_bytes(), recv: recv.as_mut_bytes() })
    }

    /// All-gather in place: each rank's input is already in block `rank`.
    pub fn all_gather_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<(), CommError> {
        let n = self.world();
        if buf.len() % n != 0 {
            return Err(CommError::Buffer {
                op: OpKind::AllGather,
                detail: format!("{} elements are not {n} equal blocks", buf.len()),
            });
        }
        let d = self.desc::<T>(OpKind::AllGather, buf.len() / n);
        self.run(d, Buffers::InPlace(buf.as_mut_bytes()))
    }

    /// Broadcast of `root`'s `buf` into every rank's.
    pub fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        let d = self.desc::<T>(OpKind::Broadcast, buf.len()).root(root);
        self.run(d, Buffers::InPlace(buf.as_mut_bytes()))
    }

    /// Reduce into `root`'s `buf` (the others' buffers are inputs only).
    pub fn reduce<T: Element>(&mut self, buf: &mut [T], op: RedOp, root: usize) -> Result<(), CommError> {
        let d = self.desc::<T>(OpKind::Reduce, buf.len()).redop(op).root(root);
        self.run(d, Buffers::InPlace(buf.as_mut_bytes()))
    }

    /// All-to-all: block j of `send` goes to rank j, block i of `recv`
    /// comes from rank i (`n` equal blocks each).
    pub fn all_to_all<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let n = self.world();
        Self::check(OpKind::AllToAll, "the receive buffer", recv.len(), send.len())?;
        if send.len() % n != 0 {
            return Err(CommError::Buffer {
                op: OpKind::AllToAll,
                detail: format!("{} elements are not {n} equal blocks", send.len()),
            });
        }
        let d = self.desc::<T>(OpKind::AllToAll, send.len() / n);
        self.run(d, Buffers::OutOfPlace { send: send.as_bytes(), recv: recv.as_mut_bytes() })
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&mut self) -> Result<(), CommError> {
        let d = OpDesc::new(OpKind::Barrier, DataType::U8, 0);
        self.run(d, Buffers::InPlace(&mut []))
    }

    /// Leaves the job cleanly: waits (up to the timeout) until every rank
    /// has finished, so that no rank's exit looks like a failure to the
    /// others. Dropping a communicator without it is how a failing rank
    /// leaves: the others are told it is gone.
    pub fn finish(mut self) -> Result<(), CommError> {
        // Let the last ACKs and credits out while the others finish.
        self.rdv.finish()?;
        Ok(())
    }
}
