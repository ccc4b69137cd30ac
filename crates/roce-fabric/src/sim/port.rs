//! A port: one side of a link, with its eight priority queues (and a
//! control queue for PFC frames, sent first), its serialiser, and its PFC
//! state: which priorities the peer has paused, the XOFFs it sent and their
//! refresh, and the PFC watchdog that drains a queue paused too long.
//! PFC is IEEE 802.1Qbb: an XOFF pauses one priority for a number of
//! 512-bit-time quanta (or until XON), and is refreshed while its cause
//! remains.

use std::collections::VecDeque;

use super::frame::Hop;
use super::{Ev, Sim};
use crate::faults::Faults;
use crate::hooks::LinkHooks;
use crate::report::{PfcRecord, QueueRef};
use crate::scenario::{pause_quantum_ps, serialisation_ps, NodeId, Time, PRIORITIES};

/// The PFC frames a port sends for a priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PfcSend {
    /// XOFF: a pause starts.
    Xoff,
    /// XOFF again before the last one's quanta run out.
    Refresh,
    /// XON: the pause ends.
    Xon,
}

/// One side of a link. `repr(C)` keeps the declaration order: what every
/// hop reads comes first, in the first two cache lines (a port is some
/// 800 bytes, and a fabric's ports do not all stay in cache).
#[repr(C)]
pub(crate) struct Port {
    /// The end of the frame on the wire (the port is busy before it).
    pub(super) busy_until: Time,
    pub(super) delay: Time,
    pub(super) ps_per_byte: Option<u64>,
    pub(crate) node: NodeId,
    pub(crate) peer: usize,
    pub(super) link: usize,
    /// Its node is a host (read at every hop: cheaper here than in the
    /// large host records).
    pub(super) at_host: bool,
    /// A `TxDone` is queued for `busy_until`: only when more waits to go,
    /// so an idle fabric spends no event on the end of each frame.
    pub(super) txdone_queued: bool,
    /// Priorities the peer has paused (bit mask).
    pub(super) paused: u8,
    /// Priorities whose queue holds frames (bit mask): what a hop asks of
    /// the eight queues, without reading them.
    pub(super) queued: u8,
    /// Priorities whose queue the watchdog is dropping.
    pub(super) wd_active: u8,
    pub(super) ctrl: VecDeque<Hop>,
    /// The link's faults (loss included), if it has any; most links have
    /// none, and the box keeps them out of the hot lines.
    pub(super) faults: Option<Box<Faults>>,
    pub(super) qbytes: [u64; PRIORITIES],
    pub(super) queues: [VecDeque<Hop>; PRIORITIES],
    /// Frames sent per priority (progress, for the deadlock detector).
    pub(super) sent: [u64; PRIORITIES],
    /// Time spent serialising frames (the link's busy time, this way).
    pub(super) busy_ps: Time,
    /// The latest in-order arrival on the link (jitter keeps order).
    pub(super) last_fifo: Time,
    pub(super) rate_bps: u64,
    /// 1-based number within its node.
    pub(super) number: u32,
    pub(super) pause_epoch: [u32; PRIORITIES],
    /// When the XOFF this port sent for a priority is due for refresh
    /// (with pause quanta).
    pub(super) refresh_at: [Option<Time>; PRIORITIES],
    /// Bumped only when a priority's paused state changes (not on a refresh).
    pub(super) wd_epoch: [u32; PRIORITIES],
    pub(super) deficit: [i64; PRIORITIES],
    pub(super) rr_next: usize,
}

impl Port {
    #[inline]
    pub(super) fn ser(&self, wire: u32) -> Time {
        match self.ps_per_byte {
            Some(p) => wire as u64 * p,
            None => serialisation_ps(wire as u64, self.rate_bps),
        }
    }
    #[inline]
    pub(super) fn total_bytes(&self) -> u64 {
        self.qbytes.iter().sum()
    }

    #[inline]
    pub(super) fn enqueue(&mut self, q: usize, hop: Hop) {
        self.queues[q].push_back(hop);
        self.queued |= 1 << q;
    }

    #[inline]
    pub(super) fn dequeue(&mut self, q: usize) -> Option<Hop> {
        let f = self.queues[q].pop_front();
        if self.queues[q].is_empty() {
            self.queued &= !(1 << q);
        }
        f
    }

    /// The highest priority in `mask`, if any.
    #[inline]
    pub(super) fn highest(mask: u8) -> Option<usize> {
        (mask != 0).then(|| 7 - mask.leading_zeros() as usize)
    }

    /// Sets the line rate, with the picoseconds per byte when exact.
    pub(crate) fn set_rate(&mut self, rate_bps: u64, ps_per_byte: Option<u64>) {
        self.rate_bps = rate_bps;
        self.ps_per_byte = ps_per_byte;
    }

    /// Sets the propagation delay.
    pub(crate) fn set_delay(&mut self, delay: Time) {
        self.delay = delay;
    }

    pub(crate) fn set_faults(&mut self, f: Faults) {
        self.faults = f.any().then(|| Box::new(f));
    }
}

impl<H: LinkHooks> Sim<H> {
    /// Starts the next frame on port `p` if it is idle.
    pub(super) fn start_tx(&mut self, p: usize) {
        if self.now < self.ports[p].busy_until {
            self.wake_at_tx_end(p);
            return;
        }
        let (node, host) = (self.ports[p].node, self.ports[p].at_host);
        let hop = if host { self.host_dequeue(node, p) } else { self.switch_dequeue(p) };
        if let Some(hop) = hop {
            self.transmit(p, hop);
        }
    }

    /// Queues a `TxDone` for the end of port `p`'s frame if none is.
    pub(super) fn wake_at_tx_end(&mut self, p: usize) {
        let port = &mut self.ports[p];
        if !port.txdone_queued {
            port.txdone_queued = true;
            let at = port.busy_until;
            self.push(at, Ev::TxDone(p as u32));
        }
    }

    /// Sends a PFC frame out of port `p` (ahead of any data): an XOFF
    /// (`pause`) or an XON. With pause quanta, an XOFF is refreshed every
    /// half of its pause while its cause remains; an XON cancels that.
    pub(super) fn send_pfc(&mut self, p: usize, prio: u8, what: PfcSend) {
        let pause = what != PfcSend::Xon;
        let quanta = match (pause, self.scn.switch.pause_quanta) {
            (false, _) => 0,
            (true, Some(q)) => q.max(1),
            (true, None) => u16::MAX,
        };
        let f = self.pfc_frame(prio, quanta);
        let c = &mut self.report.counters;
        match what {
            PfcSend::Xoff => c.pfc_pause_sent += 1,
            PfcSend::Refresh => c.pfc_refresh_sent += 1,
            PfcSend::Xon => c.pfc_resume_sent += 1,
        }
        self.ports[p].refresh_at[prio as usize] = None;
        if pause {
            if let Some(q) = self.scn.switch.pause_quanta {
                let half = pause_quantum_ps(self.ports[p].rate_bps) * q.max(1) as Time / 2;
                let at = self.now + half.max(1);
                self.ports[p].refresh_at[prio as usize] = Some(at);
                self.push(at, Ev::PauseRefresh(p as u32, prio));
            }
        }
        self.ports[p].ctrl.push_back(f);
        self.start_tx(p);
    }

    /// The refresh of the XOFF sent on port `p` for `prio` is due: sent
    /// again if its cause remains (a congested switch ingress, a stalled
    /// NIC). A refresh cancelled by an XON, or replaced by a later XOFF's,
    /// does nothing.
    pub(super) fn pause_refresh(&mut self, p: usize, prio: u8) {
        if self.ports[p].refresh_at[prio as usize] != Some(self.now) {
            return;
        }
        let node = self.ports[p].node;
        let still = match (&self.mmu[node], &self.hosts[node]) {
            (Some(mmu), _) => mmu.is_paused(p - self.first_port[node], prio),
            (None, Some(h)) => h.xoff_sent,
            _ => false,
        };
        if still {
            self.send_pfc(p, prio, PfcSend::Refresh);
        }
    }

    /// A PFC frame reached port `p`: its sender stops or resumes `prio`
    /// (XOFF/XON: the pause time is not used as a timer).
    pub(super) fn pfc_received(&mut self, p: usize, prio: u8, quanta: u16) {
        let pause = quanta > 0;
        let bit = 1u8 << prio;
        if pause && self.scn.switch.pause_quanta.is_some() {
            // The pause lasts `quanta` from now, whether it starts or
            // refreshes one.
            let port = &mut self.ports[p];
            port.pause_epoch[prio as usize] = port.pause_epoch[prio as usize].wrapping_add(1);
            let epoch = port.pause_epoch[prio as usize];
            let until = self.now + pause_quantum_ps(port.rate_bps) * quanta as Time;
            self.push(until, Ev::PauseExpire(p as u32, prio, epoch));
        }
        let port = &mut self.ports[p];
        let was = port.paused & bit != 0;
        if was == pause {
            return;
        }
        if pause {
            port.paused |= bit;
            self.paused_queues += 1;
        } else {
            port.paused &= !bit;
            self.paused_queues -= 1;
        }
        if !(pause && self.scn.switch.pause_quanta.is_some()) {
            port.pause_epoch[prio as usize] = port.pause_epoch[prio as usize].wrapping_add(1);
        }
        port.wd_epoch[prio as usize] = port.wd_epoch[prio as usize].wrapping_add(1);
        let epoch = port.wd_epoch[prio as usize];
        let (node, number) = (port.node, port.number);
        let wd_active = port.wd_active & bit != 0;
        self.report.pfc.push(PfcRecord {
            time_ps: self.now,
            node,
            is_switch: self.hosts[node].is_none(),
            port: number,
            priority: prio,
            pause,
        });
        if let Some(wd) = self.scn.watchdog {
            if self.hosts[node].is_none() {
                if pause {
                    self.push(self.now + wd.timeout_ps, Ev::WatchdogCheck(p as u32, prio, epoch));
                } else if wd_active {
                    self.push(self.now + wd.restore_ps, Ev::WatchdogRestore(p as u32, prio, epoch));
                }
            }
        }
        if !pause {
            self.start_tx(p);
        }
    }

    /// A pause received on port `p` for `q` runs out (with pause quanta),
    /// unless refreshed since (`epoch`).
    pub(super) fn pause_expire(&mut self, p: usize, q: u8, epoch: u32) {
        let port = &mut self.ports[p];
        if port.pause_epoch[q as usize] == epoch && port.paused & (1 << q) != 0 {
            port.paused &= !(1 << q);
            self.paused_queues -= 1;
            port.pause_epoch[q as usize] = epoch.wrapping_add(1);
            port.wd_epoch[q as usize] = port.wd_epoch[q as usize].wrapping_add(1);
            self.start_tx(p);
        }
    }

    pub(super) fn watchdog_check(&mut self, p: usize, q: u8, epoch: u32) {
        let Some(wd) = self.scn.watchdog else { return };
        let port = &self.ports[p];
        if port.wd_epoch[q as usize] != epoch || port.paused & (1 << q) == 0 {
            return;
        }
        if port.queues[q as usize].is_empty() {
            // Paused but holding nothing yet: look again later.
            self.push(self.now + wd.timeout_ps, Ev::WatchdogCheck(p as u32, q, epoch));
            return;
        }
        if port.wd_active & (1 << q) != 0 {
            return;
        }
        let qref = QueueRef { node: port.node, port: port.number, priority: q };
        self.ports[p].wd_active |= 1 << q;
        self.report.counters.watchdog_fired += 1;
        self.report.watchdog_log.push((self.now, qref));
        while let Some(mut hop) = self.ports[p].dequeue(q as usize) {
            self.switch_release(p, q as usize, &mut hop, false);
            self.report.counters.dropped_watchdog += 1;
            self.drop_frame(hop);
        }
        self.start_tx(p);
    }

    pub(super) fn watchdog_restore(&mut self, p: usize, q: u8, epoch: u32) {
        let port = &mut self.ports[p];
        if port.wd_epoch[q as usize] == epoch && port.paused & (1 << q) == 0 {
            port.wd_active &= !(1 << q);
        }
    }
}
