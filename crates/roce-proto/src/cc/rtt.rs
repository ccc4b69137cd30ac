//! Round-trip time of a QP's requests, one sample in flight at a time.

use crate::time::{Duration, Instant};
use roce_wire::Psn;

/// Times one request packet to the response that acknowledges it, as TCP
/// times one segment: a probe starts on a packet that asks for an ACK
/// (AckReq, IBTA §9.2.1) when none is in flight, and ends when the oldest
/// unacknowledged PSN moves past it (an ACK, a coalesced ACK, READ response
/// or atomic ACK covering it). Karn's rule: a retransmission of the probed
/// PSN (a go-back-N rewind to it or before it) drops the probe, since its
/// response could answer either copy. The estimate is smoothed as TCP's
/// SRTT (RFC 6298: 7/8 old + 1/8 new).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RttProbe {
    probe: Option<(Psn, Instant)>,
    /// One past the highest PSN sent (`None` before the first packet).
    next_new: Option<Psn>,
    last: Option<Duration>,
    smoothed: Option<Duration>,
    samples: u64,
}

impl RttProbe {
    pub const fn new() -> RttProbe {
        RttProbe { probe: None, next_new: None, last: None, smoothed: None, samples: 0 }
    }

    /// A request packet with `psn` left at `now`; `ack_req` if it asks for
    /// an ACK.
    pub fn on_sent(&mut self, psn: Psn, ack_req: bool, now: Instant) {
        let resent = self.next_new.is_some_and(|n| psn.is_before(n));
        if resent {
            if self.probe.is_some_and(|(p, _)| !p.is_before(psn)) {
                self.probe = None;
            }
            return;
        }
        self.next_new = Some(psn.next());
        if ack_req && self.probe.is_none() {
            self.probe = Some((psn, now));
        }
    }

    /// The oldest unacknowledged PSN is now `unacked` (everything before it
    /// was answered) at `now`. Returns the sample it completed, if any.
    pub fn on_acked(&mut self, unacked: Psn, now: Instant) -> Option<Duration> {
        let (p, at) = self.probe?;
        if !unacked.is_after(p) {
            return None;
        }
        self.probe = None;
        let rtt = now.saturating_duration_since(at);
        self.last = Some(rtt);
        self.smoothed = Some(match self.smoothed {
            None => rtt,
            Some(s) => Duration((s.as_nanos() * 7 + rtt.as_nanos()) / 8),
        });
        self.samples += 1;
        Some(rtt)
    }

    /// The smoothed estimate, once there is a sample.
    pub fn smoothed(&self) -> Option<Duration> {
        self.smoothed
    }

    pub fn last(&self) -> Option<Duration> {
        self.last
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    #[test]
    fn times_the_first_ack_requesting_packet_to_its_ack() {
        let mut r = RttProbe::new();
        // 10 and 11 ask for no ACK (a message's middle), 12 does.
        r.on_sent(Psn::new(10), false, t(0));
        r.on_sent(Psn::new(11), false, t(1));
        r.on_sent(Psn::new(12), true, t(2));
        r.on_sent(Psn::new(13), true, t(3));
        // ACK of 11: not yet.
        assert_eq!(r.on_acked(Psn::new(12), t(20)), None);
        // ACK of 12 (oldest unacked now 13): 20 us after it left at 2.
        assert_eq!(r.on_acked(Psn::new(13), t(22)), Some(Duration::from_micros(20)));
        assert_eq!(r.smoothed(), Some(Duration::from_micros(20)));
        // 13 was sent while the probe was in flight: not probed. The next
        // probe is the next new AckReq packet.
        assert_eq!(r.on_acked(Psn::new(14), t(23)), None);
        r.on_sent(Psn::new(14), true, t(30));
        assert_eq!(r.on_acked(Psn::new(15), t(58)), Some(Duration::from_micros(28)));
        // 7/8 x 20 + 1/8 x 28 = 21 us.
        assert_eq!(r.smoothed(), Some(Duration::from_micros(21)));
        assert_eq!((r.last(), r.samples()), (Some(Duration::from_micros(28)), 2));
    }

    #[test]
    fn a_retransmission_of_the_probe_drops_it() {
        let mut r = RttProbe::new();
        r.on_sent(Psn::new(100), true, t(0));
        r.on_sent(Psn::new(101), true, t(1));
        // Go-back-N to 100: the probe's response could answer either copy.
        r.on_sent(Psn::new(100), true, t(500));
        assert_eq!(r.on_acked(Psn::new(101), t(510)), None);
        // Resent packets never start a probe; the next new one does.
        r.on_sent(Psn::new(101), true, t(511));
        assert_eq!(r.on_acked(Psn::new(102), t(520)), None);
        r.on_sent(Psn::new(102), true, t(600));
        // A rewind to after the probe leaves it alone.
        r.on_sent(Psn::new(103), true, t(601));
        r.on_sent(Psn::new(103), true, t(700));
        assert_eq!(r.on_acked(Psn::new(104), t(710)), Some(Duration::from_micros(110)));
        assert_eq!(r.samples(), 1);
    }

    #[test]
    fn psns_wrap() {
        let mut r = RttProbe::new();
        let top = Psn::new(0xff_ffff);
        r.on_sent(top, true, t(0));
        r.on_sent(Psn::new(0), true, t(1));
        assert_eq!(r.on_acked(Psn::new(0), t(9)), Some(Duration::from_micros(9)));
        r.on_sent(Psn::new(1), true, t(10));
        r.on_sent(top, true, t(11)); // a rewind across the wrap
        assert_eq!(r.on_acked(Psn::new(2), t(12)), None);
    }
}
