//! rc_pingpong's completion accounting.

use roce::WcStatus;

use crate::oob::{Error, Result};

/// The work request id of every receive, and a bit of [`Tally`]'s
/// `pending`.
pub(super) const RECV_WRID: u64 = 1;
/// The work request id of every SEND, and a bit of [`Tally`]'s `pending`.
pub(super) const SEND_WRID: u64 = 2;

/// What a completion of the ping-pong was.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
    Send,
    Recv,
    /// The client's last SEND failed for want of an ACK after every answer
    /// had arrived: the run is complete (see [`Tally::take`]).
    LastAckLost,
}

/// rc_pingpong's completion accounting: sends and receives counted, and the
/// next SEND due once both the previous SEND and a receive completed.
#[derive(Debug)]
pub(super) struct Tally {
    iters: u64,
    client: bool,
    pub(super) scnt: u64,
    pub(super) rcnt: u64,
    /// The work requests (`SEND_WRID`, `RECV_WRID` bits) still awaited
    /// before the next SEND.
    pending: u64,
}

impl Tally {
    pub(super) fn new(iters: u64, client: bool) -> Self {
        let pending = if client { RECV_WRID | SEND_WRID } else { RECV_WRID };
        Tally { iters, client, scnt: 0, rcnt: 0, pending }
    }

    pub(super) fn done(&self) -> bool {
        self.scnt >= self.iters && self.rcnt >= self.iters
    }

    /// Counts one completion. Any error fails the run but one: the server
    /// sends answer k only after receiving message k, so a client holding
    /// all `iters` answers knows every message arrived, and its last SEND
    /// failing with a retry error means only that the ACK was lost and the
    /// server has already destroyed its QP.
    pub(super) fn take(&mut self, wr_id: u64, status: WcStatus) -> Result<Seen> {
        if status != WcStatus::Success {
            if self.client
                && self.rcnt >= self.iters
                && self.scnt + 1 == self.iters
                && wr_id == SEND_WRID
                && status == WcStatus::RetryExcErr
            {
                self.scnt = self.iters;
                return Ok(Seen::LastAckLost);
            }
            return Err(Error::Failed(format!(
                "Failed status {status:?} ({}) for wr_id {wr_id}",
                status as u32
            )));
        }
        let seen = match wr_id {
            SEND_WRID => {
                self.scnt += 1;
                Seen::Send
            }
            RECV_WRID => {
                self.rcnt += 1;
                Seen::Recv
            }
            other => return Err(Error::Failed(format!("completion for unknown wr_id {other}"))),
        };
        self.pending &= !wr_id;
        Ok(seen)
    }

    /// Whether the next SEND is due now; if so, it is counted as awaited.
    pub(super) fn send_due(&mut self) -> bool {
        if self.scnt < self.iters && self.pending == 0 {
            self.pending = RECV_WRID | SEND_WRID;
            true
        } else {
            false
        }
    }
}
