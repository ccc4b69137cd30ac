//! Forwarding in a switch: a data frame is routed (flow-hash ECMP over the
//! equal-cost ports), admitted by the shared buffer with per-(ingress,
//! priority) accounting (PFC XOFF when over the threshold), queued at its
//! egress priority, scheduled (strict or DWRR) and, leaving, marked with
//! ECN by RED (kmin/kmax/pmax of the port's rate); its release from the
//! buffer may send XON to its ingress.

use super::frame::Hop;
use super::port::{PfcSend, Port};
use super::Sim;
use crate::hooks::LinkHooks;
use crate::scenario::{NodeId, Scheduling, PRIORITIES};

impl<H: LinkHooks> Sim<H> {
    pub(super) fn switch_receive(&mut self, p: usize, mut hop: Hop) {
        let node = self.ports[p].node;
        let (dst, hash, prio, wire) = (hop.dst as NodeId, hop.hash, hop.prio(), hop.wire);
        let Some(k) = self.routes.next_hop(node, dst, hash) else {
            self.report.counters.dropped_unroutable += 1;
            self.drop_frame(hop);
            return;
        };
        let eg = self.first_port[node] + k;
        let ip = p - self.first_port[node];
        let lossless = self.scn.switch.pfc_enabled && self.scn.switch.lossless_mask & (1 << prio) != 0;
        let mmu = self.mmu[node].as_mut().expect("switch");
        if !mmu.admit(ip, prio, wire as u64, lossless) {
            mmu.refuse(ip);
            self.report.counters.dropped_buffer += 1;
            self.drop_frame(hop);
            return;
        }
        mmu.charge(ip, prio, wire as u64);
        let pause = lossless && mmu.should_pause(ip, prio);
        if pause {
            mmu.set_paused(ip, prio, true);
        }
        hop.in_port = ip as u16;
        if pause {
            self.send_pfc(p, prio, PfcSend::Xoff);
        }
        let port = &mut self.ports[eg];
        port.qbytes[prio as usize] += wire as u64;
        // An idle port with nothing queued and the priority free sends the
        // frame at once: what queueing it and taking it back would do.
        let free = (port.paused & !port.wd_active) & (1 << prio) == 0;
        let strict = matches!(self.scn.switch.scheduling, Scheduling::Strict);
        if strict && free && port.queued == 0 && port.ctrl.is_empty() && self.now >= port.busy_until {
            self.switch_release(eg, prio as usize, &mut hop, true);
            self.transmit(eg, hop);
            return;
        }
        port.enqueue(prio as usize, hop);
        self.start_tx(eg);
    }

    /// The next frame switch port `p` sends: PFC frames first, then the
    /// scheduler's pick among the priorities the peer has not paused.
    pub(super) fn switch_dequeue(&mut self, p: usize) -> Option<Hop> {
        if let Some(f) = self.ports[p].ctrl.pop_front() {
            return Some(f);
        }
        let q = self.pick_queue(p)?;
        let mut hop = self.ports[p].dequeue(q).expect("non-empty");
        self.switch_release(p, q, &mut hop, true);
        Some(hop)
    }

    pub(super) fn pick_queue(&mut self, p: usize) -> Option<usize> {
        let port = &mut self.ports[p];
        // Holding frames, and not paused (or paused but being drained).
        let sendable = port.queued & !(port.paused & !port.wd_active);
        let ready = |q: usize| sendable & (1 << q) != 0;
        match &self.scn.switch.scheduling {
            Scheduling::Strict => Port::highest(sendable),
            Scheduling::Dwrr { weights } => {
                if let Some(q) = (0..PRIORITIES).rev().find(|&q| weights[q] == 0 && ready(q)) {
                    return Some(q);
                }
                if !(0..PRIORITIES).any(|q| weights[q] > 0 && ready(q)) {
                    return None;
                }
                loop {
                    let q = port.rr_next;
                    if weights[q] > 0 && ready(q) {
                        let wire = port.queues[q][0].wire as i64;
                        if port.deficit[q] >= wire {
                            port.deficit[q] -= wire;
                            return Some(q);
                        }
                        port.deficit[q] += weights[q] as i64;
                    } else {
                        port.deficit[q] = 0;
                    }
                    port.rr_next = (q + 1) % PRIORITIES;
                }
            }
        }
    }

    /// Takes a frame (priority `q`) out of switch port `p`'s queue
    /// accounting: the buffer, ECN marking (when `transmit`), and an XON to
    /// its ingress port when that port's queue has drained enough.
    pub(super) fn switch_release(&mut self, p: usize, q: usize, hop: &mut Hop, transmit: bool) {
        let node = self.ports[p].node;
        let (wire, in_port) = (hop.wire as u64, hop.in_port as usize);
        self.ports[p].qbytes[q] -= wire;
        let k = p - self.first_port[node];
        let qbytes = self.ports[p].qbytes[q];
        let mmu = self.mmu[node].as_mut().expect("switch");
        mmu.discharge(in_port, q as u8, wire);
        let resume = mmu.is_paused(in_port, q as u8) && mmu.should_resume(in_port, q as u8);
        if resume {
            mmu.set_paused(in_port, q as u8, false);
        }
        if transmit {
            self.ports[p].sent[q] += 1;
            let sw = &self.scn.switch;
            if sw.ecn_enabled && sw.lossless_mask & (1 << q) != 0 {
                let mmu = self.mmu[node].as_ref().expect("switch");
                let (kmin, kmax, pmax) = mmu.ecn[k];
                let ect = hop.ecn() != 0;
                let mark = ect
                    && (qbytes > kmax
                        || (qbytes > kmin
                            && self.rng_ecn.chance(pmax * (qbytes - kmin) as f64 / (kmax - kmin) as f64)));
                if mark {
                    hop.set_ecn(3);
                    self.report.counters.ecn_marked += 1;
                }
            }
        }
        if resume {
            let ip = self.first_port[node] + in_port;
            self.send_pfc(ip, q as u8, PfcSend::Xon);
        }
    }
}
