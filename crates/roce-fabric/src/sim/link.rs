//! Links: a frame put on a port's wire is serialised at the port's rate and
//! reaches the far end a propagation delay after its last bit left (store
//! and forward). A link that is down drops what is sent on it; a faulty or
//! watched one hands each frame to the client's hooks and the link's faults,
//! which decide what copies arrive, when, and with what bit flipped.

use super::frame::Hop;
use super::{Ev, Sim};
use crate::faults;
use crate::hooks::{self, Fate, LinkHooks, Verdict};
use crate::scenario::Time;

impl<H: LinkHooks> Sim<H> {
    /// Puts a frame on idle port `p`'s wire, now.
    pub(super) fn transmit(&mut self, p: usize, hop: Hop) {
        let (node, host) = (self.ports[p].node, self.ports[p].at_host);
        let wire = hop.wire as u32;
        let port = &mut self.ports[p];
        let ser = port.ser(wire);
        port.busy_until = self.now + ser;
        port.busy_ps += ser;
        let (delay, link, faulty) = (port.delay, port.link, port.faults.is_some());
        let more = !port.ctrl.is_empty()
            || port.queued != 0
            || (host && self.hosts[node].as_ref().is_some_and(|h| h.engine.has_transmit()));
        if more {
            self.wake_at_tx_end(p);
        }
        self.report.counters.packet_hops += 1;
        let arrive = self.now + ser + delay;
        if !self.link_up[link] {
            self.report.counters.dropped_link += 1;
            self.drop_frame(hop);
            return;
        }
        // A client watches the datagrams its hosts put on their links (on
        // a mesh every link; on a switched fabric the first hop only).
        let hooked = H::ACTIVE && !hop.pfc() && self.ports[p].at_host;
        if !faulty && !hooked {
            self.on_the_wire(p, arrive, hop);
            return;
        }
        self.send_copies(p, hop, arrive, hooked);
    }

    /// Puts a frame on port `p`'s faulty or watched link, due to arrive at
    /// `arrive` were the link perfect: the client's verdict, else the
    /// link's faults, decide what copies arrive when.
    pub(super) fn send_copies(&mut self, p: usize, hop: Hop, arrive: Time, hooked: bool) {
        let fid = hop.fid;
        // The hooks name the sending host and the destination host (on a
        // mesh, the link's far end).
        let (from, to) = (self.ports[p].node, hop.dst as usize);
        let n = self.slots[fid as usize].bytes.len();
        let mut verdict = Verdict::Pass;
        // The frame whose bytes `scratch` holds, as they are now.
        let mut in_scratch = None;
        if hooked {
            self.slots[fid as usize].bytes.write_to(&mut self.scratch);
            in_scratch = Some(fid);
            verdict = self.hooks.judge(self.now, from, to, &self.scratch[..n]);
        }
        let intact = |at| faults::Copy { arrive: Some(at), flip_bit: None };
        // Each copy: when it arrives (if it does), and a flipped bit.
        let copies: [Option<faults::Copy>; 2] = match verdict {
            Verdict::Drop => [Some(faults::Copy { arrive: None, flip_bit: None }), None],
            Verdict::Delay(d) => [Some(intact(arrive + d)), None],
            Verdict::Duplicate => [Some(intact(arrive)), Some(intact(arrive))],
            Verdict::Pass => match self.ports[p].faults.as_deref().copied() {
                None => [Some(intact(arrive)), None],
                Some(faults) => {
                    let mut last_fifo = self.ports[p].last_fifo;
                    let dealt = faults.deal(&mut self.rng_links, arrive, n, &mut last_fifo);
                    self.ports[p].last_fifo = last_fifo;
                    dealt
                }
            },
        };
        // Arriving copies: the first is the frame, a second its copy (made
        // before any bit of the first is flipped). A lost copy takes none.
        let arriving = copies.iter().flatten().filter(|c| c.arrive.is_some()).count();
        let second = (arriving == 2).then(|| self.clone_frame(fid));
        let mut next = [fid, second.unwrap_or(fid)].into_iter();
        for (i, copy) in copies.into_iter().flatten().enumerate() {
            if i == 1 {
                self.report.counters.duplicated += 1;
            }
            let id =
                if copy.arrive.is_some() { next.next().expect("one frame per arriving copy") } else { fid };
            if let Some(bit) = copy.flip_bit {
                self.slots[id as usize].bytes.flip_bit(bit as usize, &mut self.bufs);
                self.report.counters.corrupted += 1;
                if in_scratch == Some(id) {
                    in_scratch = None;
                }
            }
            if hooked {
                let fate = match (copy.arrive, copy.flip_bit) {
                    (None, _) => Fate::Lost,
                    (Some(_), Some(bit)) => Fate::Corrupted { bit },
                    (Some(_), None) => Fate::Delivered,
                };
                if in_scratch != Some(id) {
                    self.slots[id as usize].bytes.write_to(&mut self.scratch);
                    in_scratch = Some(id);
                }
                let tx = self.txs[id as usize].as_ref().expect("a host's frame has its transmit");
                self.hooks.on_copy(&hooks::Copy {
                    sent: self.now,
                    arrive: copy.arrive,
                    from,
                    to: Some(to),
                    copy: i as u8,
                    fate,
                    tx,
                    bytes: &self.scratch[..n],
                });
            }
            let Some(at) = copy.arrive else {
                self.report.counters.dropped_link += 1;
                if !hop.pfc() {
                    self.report.counters.dropped_bytes += hop.wire as u64;
                }
                continue;
            };
            self.on_the_wire(p, at, Hop { fid: id, ..hop });
        }
        if arriving == 0 {
            self.free_frame(fid);
        }
    }

    /// A frame reaches the far end of port `p`'s link at `at`: an event of
    /// its own (one per frame on the wire; the queue reads its events in
    /// order, cheaper than a per-link queue read at random).
    pub(super) fn on_the_wire(&mut self, p: usize, at: Time, hop: Hop) {
        let port = self.ports[p].peer as u16;
        let Hop { fid, hash, dst, wire, bits, .. } = hop;
        self.push(at, Ev::Arrive { port, dst, wire, bits, fid, hash });
    }

    pub(super) fn arrive(&mut self, p: usize, hop: Hop) {
        if hop.pfc() {
            self.free_frame(hop.fid);
            self.pfc_received(p, hop.prio(), hop.hash as u16);
            return;
        }
        let (node, host) = (self.ports[p].node, self.ports[p].at_host);
        if host {
            self.host_receive(node, hop);
        } else {
            self.switch_receive(p, hop);
        }
    }
}
