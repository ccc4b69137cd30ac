//! The requests of a bandwidth test in flight: what each QP posted and
//! completed, the stall watchdog, and taking completions.

use std::time::{Duration, Instant};

use roce::{Cq, Wc, WcStatus, WC_ZERO};

use super::IDX_BITS;
use crate::oob::{Error, Result};

/// Gives up when nothing happened for a while.
pub(super) struct Stall {
    last: Instant,
    limit: Duration,
}

impl Stall {
    pub(super) fn new(limit: Duration) -> Stall {
        Stall { last: Instant::now(), limit }
    }
    pub(super) fn progress(&mut self) {
        self.last = Instant::now();
    }
    pub(super) fn left(&self) -> Duration {
        self.limit.saturating_sub(self.last.elapsed())
    }
    pub(super) fn check(&self, what: &str) -> Result<()> {
        if self.last.elapsed() >= self.limit {
            return Err(Error::Timeout {
                what: format!(
                    "{what}: nothing happened for {:.0} s (is the peer still running and reachable over UDP?)",
                    self.limit.as_secs_f64()
                ),
            });
        }
        Ok(())
    }
}

/// How often a long pass of posts stops to take completions.
pub(super) const REAP_EVERY: Duration = Duration::from_millis(1);

/// The sender's count of its requests in [`RdmaSide::run_bw`].
pub(super) struct Sends {
    /// Requests posted, per QP.
    pub(super) scnt: Vec<u64>,
    /// Requests completed (or flushed), per QP.
    pub(super) ccnt: Vec<u64>,
    pub(super) deadline: Option<Instant>,
    /// A timed run is over and QPs went to ERR: flush errors are
    /// expected.
    pub(super) flushed: bool,
    /// Which QPs went to ERR.
    pub(super) qp_flushed: Vec<bool>,
    /// Keep each request's completion time (for the peak).
    pub(super) record: bool,
    pub(super) completed: Vec<Instant>,
    /// Requests completed successfully (by the deadline of a timed run).
    pub(super) done: u64,
    pub(super) last_done: Instant,
}

impl Sends {
    pub(super) fn new(
        qps: usize,
        start: Instant,
        deadline: Option<Instant>,
        record: bool,
        cap: usize,
    ) -> Sends {
        Sends {
            scnt: vec![0; qps],
            ccnt: vec![0; qps],
            deadline,
            flushed: false,
            qp_flushed: vec![false; qps],
            record,
            completed: Vec::with_capacity(cap),
            done: 0,
            last_done: start,
        }
    }

    /// Counts completions taken at `now`. A signalled request's completion
    /// stands for the unsignalled ones before it (its id is its number).
    pub(super) fn absorb(&mut self, wcs: &[Wc], now: Instant) -> Result<()> {
        for wc in wcs {
            let flush = self.flushed && wc.status == WcStatus::WrFlushErr;
            if wc.status != WcStatus::Success && !flush {
                return Err(wc_error(wc, "a work request"));
            }
            let qi = (wc.wr_id >> IDX_BITS) as usize;
            let Some(c) = self.ccnt.get_mut(qi) else { continue };
            let upto = wc.wr_id & ((1 << IDX_BITS) - 1);
            let newly = upto.saturating_sub(*c);
            *c = (*c).max(upto);
            // A timed run counts what completed by the deadline.
            if flush || self.deadline.is_some_and(|d| now > d) {
                continue;
            }
            if self.record {
                self.completed.extend(std::iter::repeat_n(now, newly as usize));
            }
            self.done += newly;
            self.last_done = now;
        }
        Ok(())
    }
}

pub(super) fn wc_error(wc: &Wc, what: &str) -> Error {
    let hint = match wc.status {
        WcStatus::RetryExcErr => ": the peer does not answer (transport retries exhausted)",
        WcStatus::RnrRetryExcErr => ": the peer posted no receive (RNR retries exhausted)",
        WcStatus::RemAccessErr => ": the peer refused the access (R_Key, address or rights)",
        WcStatus::WrFlushErr => ": the QP is in the error state",
        _ => "",
    };
    Error::Failed(format!(
        "{what} completed with status {:?} (vendor error {:#x}) on QP {:#08x}{hint}",
        wc.status, wc.vendor_err, wc.qp_num
    ))
}

/// Takes ready completions; waits up to `wait` if there are none.
pub(super) fn take(cq: &Cq, wcs: &mut [Wc], wait: Duration) -> Result<usize> {
    let n = cq.poll(wcs)?;
    if n > 0 || wait.is_zero() {
        return Ok(n);
    }
    match cq.wait(wcs, wait) {
        Ok(n) => Ok(n),
        Err(roce::Error::Timeout(_)) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Waits for one successful completion on `cq`.
pub(super) fn wait_one(cq: &Cq, stall: &mut Stall, what: &str) -> Result<Wc> {
    let mut wc = [WC_ZERO];
    loop {
        if take(cq, &mut wc, stall.left().max(Duration::from_millis(1)))? == 1 {
            if wc[0].status != WcStatus::Success {
                return Err(wc_error(&wc[0], what));
            }
            stall.progress();
            return Ok(wc[0]);
        }
        stall.check(what)?;
    }
}
