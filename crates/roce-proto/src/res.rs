//! What a QP's roles share with the rest of the device: the configuration,
//! memory regions, completion queues, SRQs, counters and pending events.
//! The roles take it as `&mut Res`; it knows nothing of QPs or roles.

use std::collections::{BTreeMap, VecDeque};

use crate::config::EngineConfig;
use crate::counters::Counters;
use crate::cq::Cq;
use crate::mr::MrTable;
use crate::verbs::{AsyncEvent, CqId, PdId, Wc};
use crate::wqe::RecvWqe;

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: PdId,
    pub max_wr: u32,
    pub max_sge: u32,
    pub wqes: VecDeque<RecvWqe>,
    /// Raise `SrqLimitReached` when the queue drops below this (0 = disarmed).
    pub limit: u32,
    pub users: usize,
}

/// Everything a QP's roles share: memory, completion queues, counters.
pub(crate) struct Res {
    pub cfg: EngineConfig,
    /// The MRs, QPs and SRQs in each PD, which keep it from being freed.
    pub pds: BTreeMap<u32, usize>,
    pub mrs: MrTable,
    pub cqs: BTreeMap<u32, Cq>,
    pub srqs: BTreeMap<u32, Srq>,
    pub counters: Counters,
    pub events: VecDeque<AsyncEvent>,
    /// Completions delivered so far (wrapping): lets a driver tell whether
    /// work produced any, without looking at every CQ.
    pub completions_made: u64,
    /// READ-response bytes asked for and not yet received, across all QPs
    /// (the sum of every send WQE's `read_charged`), held under
    /// `cfg.rx_budget_bytes` by the requesters.
    pub read_outstanding: u64,
    /// QPs whose next READ request waits for room under the READ budget;
    /// the engine schedules them again when responses free some.
    pub read_waiters: VecDeque<u32>,
    /// QPs whose next new request packet waits for room under
    /// `cfg.tx_budget_bytes`, first come first served: the engine
    /// schedules as many from the front as ACKs freed room for, so an ACK
    /// costs work in the QPs it lets send, not in all that wait.
    pub tx_waiters: VecDeque<u32>,
    /// Room under `cfg.tx_budget_bytes` set aside for QPs taken off
    /// `tx_waiters` whose turn has not come yet (each QP's ticket): a QP
    /// scheduled for another reason cannot take it from them.
    pub tx_reserved: u64,
    /// Request bytes sent and not acknowledged across the RC QPs (each
    /// QP's `tx_charged`), held near `cfg.tx_budget_bytes`.
    pub tx_unacked: u64,
    /// Where a producing role leaves payload in registered memory rather
    /// than copy it (`Engine::poll_transmit_batch_refs`): `None` while
    /// packets are to be whole. A hole's `at` counts from the start of
    /// the datagram being produced.
    pub holes: Option<Vec<crate::datagram::Hole>>,
}

impl Res {
    /// Delivers a completion; a full CQ overflows (and raises CQ_ERR once).
    pub fn complete(&mut self, cq: CqId, wc: Wc) {
        if let Some(c) = self.cqs.get_mut(&cq.0) {
            self.completions_made = self.completions_made.wrapping_add(1);
            let was = c.overflowed;
            if !c.push(wc) && !was {
                self.events.push_back(AsyncEvent::CqErr(cq));
            }
        }
    }
}
