//! The driver's transmit side: the engine's batches into `sendmmsg`
//! messages (GSO runs, payload sent from registered memory), the ICRC of
//! each GSO segment moved to the IPv4 ID it leaves with, and what happens
//! when the kernel refuses.

use super::*;

/// One `sendmmsg` message being assembled at `SLOT * index` in the
/// transmit buffer: a datagram, or a GSO run of datagrams of `seg` bytes
/// (the last may be shorter) with the same addresses and TOS.
#[derive(Clone, Copy)]
pub(super) struct Slot {
    meta: DatagramMeta,
    dst: SocketAddr,
    tos: u8,
    seg: usize,
    used: usize,
    /// Its holes: `Core::holes[holes.0..holes.1]`.
    holes: (usize, usize),
}

impl Slot {
    fn segments(&self) -> usize {
        self.used.div_ceil(self.seg)
    }
}

/// The pieces of bytes `[start, end)` of the transmit buffer: its own bytes
/// and, where `holes` (sorted, each inside one datagram) stand, registered
/// memory.
fn pieces<'a>(tx: &'a [u8], holes: &'a [Hole], start: usize, end: usize, out: &mut Vec<TxPiece<'a>>) {
    let mut at = start;
    for h in holes.iter().filter(|h| h.at >= start && h.end() <= end) {
        if h.at > at {
            out.push(TxPiece::Bytes(&tx[at..h.at]));
        }
        out.push(TxPiece::Mem(&h.src));
        at = h.end();
    }
    if end > at {
        out.push(TxPiece::Bytes(&tx[at..end]));
    }
}

/// Moves the ICRC of `pkt` (an IPv4 RoCE datagram, ICRC last) from the one
/// for IPv4 Identification `from` to the one for `to`.
fn move_icrc(ids: &mut Ipv4IdCache, pkt: &mut [u8], from: u16, to: u16) {
    if from == to {
        return;
    }
    let at = pkt.len() - ICRC_LEN;
    let lin = ids.get(at);
    let crc = u32::from_le_bytes(pkt[at..].try_into().expect("ICRC_LEN bytes")) ^ lin.delta(from ^ to);
    pkt[at..].copy_from_slice(&crc.to_le_bytes());
}

impl Core {
    /// Sends everything the engine has, in batches: consecutive packets of
    /// equal size to the same destination with the same TOS share one GSO
    /// send where the kernel supports it (a shorter packet may end a batch).
    ///
    /// Over IPv4 the kernel numbers a GSO send's segments 0, 1, 2, ... in
    /// the Identification field; the engine computed every ICRC for ID 0, so
    /// the k-th segment's ICRC is moved to ID k here. Failures do not stop
    /// the flush: a GSO send the kernel refuses (no checksum offload on the
    /// route's device gives EIO) turns GSO off and goes out datagram by
    /// datagram, with ICRCs moved back to ID 0; any other refusal is counted
    /// and kept for `Device::send_error`.
    pub fn flush(&mut self, now: Instant) {
        if !self.engine.has_transmit() {
            return;
        }
        // The slots live in `Core` so that a flush that finds nothing to
        // send (a post behind a full send window: one per work request of
        // a deep pipeline) costs no initialisation of a batch's worth.
        let mut slots = std::mem::take(&mut self.slots);
        loop {
            slots.clear();
            self.fill(now, &mut slots);
            if slots.is_empty() {
                break;
            }
            self.send_slots(now, &slots);
            self.holes.clear();
            if slots.len() < BATCH {
                break;
            }
        }
        self.slots = slots;
    }

    /// Polls the engine into up to `BATCH` slots (appended to `slots`).
    /// Each slot is one batch of equal-size datagrams of one QP (the
    /// engine forms them), sent with GSO where the kernel has it. Over IPv4
    /// the k-th datagram's ICRC is moved to IPv4 ID k, the ID the kernel's
    /// segmentation writes.
    fn fill(&mut self, now: Instant, slots: &mut Vec<Slot>) {
        let max_segments = if self.io.gso() { MAX_SEGS } else { 1 };
        let v4 = !self.io.is_ipv6();
        while slots.len() < BATCH {
            let n = slots.len();
            let buf = &mut self.tx[n * SLOT..(n + 1) * SLOT];
            // Payload goes from registered memory to the kernel without a
            // copy here; a capture needs the bytes themselves.
            let first = self.holes.len();
            let got = if self.capture.is_none() {
                self.engine.poll_transmit_batch_refs(now, buf, max_segments, &mut self.holes)
            } else {
                self.engine.poll_transmit_batch(now, buf, max_segments)
            };
            let Some(tx) = got else { break };
            self.holes[first..].iter_mut().for_each(|h| h.at += n * SLOT);
            let seg = tx.segment_size;
            if v4 {
                for k in 1..tx.segments() {
                    let end = ((k + 1) * seg).min(tx.len);
                    move_icrc(&mut self.ipv4_ids, &mut buf[k * seg..end], 0, k as u16);
                }
            }
            let dst = SocketAddr::new(tx.meta.dst, tx.meta.dst_port);
            let holes = (first, self.holes.len());
            slots.push(Slot { meta: tx.meta, dst, tos: tx.traffic_class, seg, used: tx.len, holes });
        }
    }

    /// Hands the slots to the kernel (`slots[j]` is slot number `j`).
    fn send_slots(&mut self, now: Instant, slots: &[Slot]) {
        let n = slots.len();
        let mut sent = 0;
        let mut spins = 0;
        while sent < n {
            let gso = self.io.gso();
            // Without GSO a run of segments cannot be one message.
            let end = (sent..n).find(|&j| !gso && slots[j].segments() > 1).unwrap_or(n);
            if end == sent {
                self.send_one_by_one(now, sent, &slots[sent]);
                sent += 1;
                continue;
            }
            let r = {
                // (no allocation when no slot leaves payload in memory:
                // small messages, the latency path)
                let mut all = Vec::new();
                let mut at = [(0, 0); BATCH];
                for (j, s) in slots.iter().enumerate().take(end).skip(sent) {
                    let from = all.len();
                    let holes = &self.holes[s.holes.0..s.holes.1];
                    if !holes.is_empty() {
                        pieces(&self.tx, holes, j * SLOT, j * SLOT + s.used, &mut all);
                    }
                    at[j - sent] = (from, all.len());
                }
                let mut msgs =
                    [TxMsg { dst: slots[0].dst, tos: 0, data: &[], pieces: &[], segment: None }; BATCH];
                for (j, s) in slots.iter().enumerate().take(end).skip(sent) {
                    let segment = (s.segments() > 1).then_some(s.seg as u16);
                    let (a, b) = at[j - sent];
                    msgs[j - sent] = TxMsg {
                        dst: s.dst,
                        tos: s.tos,
                        data: &self.tx[j * SLOT..j * SLOT + s.used],
                        pieces: &all[a..b],
                        segment,
                    };
                }
                self.io.send(&msgs[..end - sent])
            };
            match r {
                Ok(0) => {
                    // Socket buffer full: give the kernel a moment.
                    spins += 1;
                    if spins > FULL_SPINS {
                        self.stats.tx_dropped +=
                            slots[sent..].iter().map(|s| s.segments() as u64).sum::<u64>();
                        return;
                    }
                    std::thread::yield_now();
                }
                Ok(k) => {
                    for (j, s) in slots.iter().enumerate().skip(sent).take(k) {
                        self.capture_sent(now, j, s, true);
                    }
                    sent += k;
                    spins = 0;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if slots[sent].segments() > 1 && gso_refused(&e) => {
                    self.io.disable_gso();
                    self.stats.gso_refused = Some(e.to_string());
                    self.send_one_by_one(now, sent, &slots[sent]);
                    sent += 1;
                }
                Err(e) => {
                    let s = &slots[sent];
                    self.record_error(&e, s.dst, s.seg, s.segments());
                    sent += 1;
                }
            }
        }
    }

    /// Sends the datagrams of slot `j` one per message, their ICRCs moved
    /// back to IPv4 ID 0 (what an unsegmented send carries).
    fn send_one_by_one(&mut self, now: Instant, j: usize, s: &Slot) {
        let v4 = s.meta.src.is_ipv4();
        for k in 0..s.segments() {
            let start = j * SLOT + k * s.seg;
            let end = (start + s.seg).min(j * SLOT + s.used);
            if v4 {
                move_icrc(&mut self.ipv4_ids, &mut self.tx[start..end], k as u16, 0);
            }
            let mut own = Vec::new();
            pieces(&self.tx, &self.holes[s.holes.0..s.holes.1], start, end, &mut own);
            let mut spins = 0;
            loop {
                let msg = TxMsg { dst: s.dst, tos: s.tos, data: &[], pieces: &own, segment: None };
                match self.io.send(&[msg]) {
                    Ok(0) if spins < FULL_SPINS => {
                        spins += 1;
                        std::thread::yield_now();
                        continue;
                    }
                    Ok(0) => self.stats.tx_dropped += 1,
                    Ok(_) => {
                        if let Some(c) = &mut self.capture {
                            c.sent(now, &s.meta, IpFields::sent(s.tos), &self.tx[start..end]);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => self.record_error(&e, s.dst, end - start, 1),
                }
                break;
            }
        }
    }

    /// Records the datagrams of slot `j` in the capture, as sent.
    fn capture_sent(&mut self, now: Instant, j: usize, s: &Slot, segmented: bool) {
        let Some(c) = &mut self.capture else { return };
        for k in 0..s.segments() {
            let start = j * SLOT + k * s.seg;
            let end = (start + s.seg).min(j * SLOT + s.used);
            let id = if segmented && s.meta.src.is_ipv4() { k as u16 } else { 0 };
            let meta = DatagramMeta { ipv4_id: Some(id), ..s.meta };
            c.sent(now, &meta, IpFields::sent(s.tos), &self.tx[start..end]);
        }
    }
}

/// Errors with which Linux refuses a UDP GSO send that plain sends would
/// get through: EIO when the route's device cannot checksum (udp_send_skb),
/// EINVAL for a segment size the path does not allow, EOPNOTSUPP /
/// ENOPROTOOPT where UDP_SEGMENT is unknown.
fn gso_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT))
}
