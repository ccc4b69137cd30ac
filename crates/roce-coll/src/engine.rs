//! The per-communicator state machine: one collective at a time, driven by
//! `start` then `progress` until [`Poll::Done`].

use crate::cost::Params;
use crate::error::Error;
use crate::transport::{Layout, Transport};
use crate::types::OpDesc;

/// Configuration of one rank's engine. Every rank of a communicator must
/// use the same `size`, `layout` and `cost` (so `Algo::Auto` resolves the
/// same everywhere).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub rank: usize,
    pub size: usize,
    pub layout: Layout,
    /// A call fails with [`Error::Timeout`] when nothing arrives for it
    /// during this long (transport clock).
    pub timeout_ns: u64,
    /// Parameters of the cost model that resolves `Algo::Auto`.
    pub cost: Params,
}

impl Config {
    pub fn new(rank: usize, size: usize) -> Config {
        Config { rank, size, layout: Layout::DEFAULT, timeout_ns: 30_000_000_000, cost: Params::default() }
    }
}

/// The user's buffers for one call, passed to `start` and to every
/// `progress` of that call (the engine keeps no borrow between calls, so a
/// simulator can own them and a driver can lend them).
pub enum Buffers<'a> {
    /// One buffer, [`OpDesc::inplace_bytes`] long.
    InPlace(&'a mut [u8]),
    /// Separate buffers, [`OpDesc::send_bytes`] and [`OpDesc::recv_bytes`]
    /// long.
    OutOfPlace { send: &'a [u8], recv: &'a mut [u8] },
}

/// What `progress` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// The call finished; the result is in the buffers.
    Done,
    /// The call waits for completions. Call `progress` again when the
    /// transport has some, or at `deadline_ns` at the latest (the call then
    /// fails with [`Error::Timeout`] if still nothing came).
    Pending { deadline_ns: u64 },
}

/// One rank's collectives engine.
pub struct Engine {
    cfg: Config,
}

impl Engine {
    /// Checks the configuration.
    pub fn new(cfg: Config) -> Result<Engine, Error> {
        if cfg.size == 0 || cfg.rank >= cfg.size {
            return Err(Error::InvalidArgument(format!(
                "rank {} out of a communicator of {}",
                cfg.rank, cfg.size
            )));
        }
        cfg.layout.validate().map_err(Error::InvalidArgument)?;
        Ok(Engine { cfg })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Starts a call. Checks the buffers against `desc`, resolves
    /// `Algo::Auto`, builds the schedule and does the local copies.
    pub fn start<T: Transport>(
        &mut self,
        t: &mut T,
        desc: OpDesc,
        bufs: &mut Buffers<'_>,
    ) -> Result<(), Error> {
        let _ = (t, desc, bufs);
        Err(Error::State("not implemented yet"))
    }

    /// Posts what can be posted and consumes completions, without
    /// blocking.
    pub fn progress<T: Transport>(&mut self, t: &mut T, bufs: &mut Buffers<'_>) -> Result<Poll, Error> {
        let _ = (t, bufs);
        Err(Error::State("not implemented yet"))
    }
}
