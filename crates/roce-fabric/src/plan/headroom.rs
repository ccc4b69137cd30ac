//! PFC headroom of one switch ingress port and lossless priority, in the
//! terms of IEEE 802.1Qbb (Annex N, "buffer requirements") as Cisco's
//! "Priority Flow Control" white paper and its "How to compute headroom
//! for lossless Ethernet links" spell them out (MODEL-NOTES §5): after the
//! switch decides to pause its peer, bytes keep arriving for
//!
//! 1. the largest frame the switch has begun sending on that port: the
//!    PFC frame waits for it (`MTU_R`);
//! 2. the PFC frame itself (64 B, plus preamble and gap on Ethernet);
//! 3. the cable, both ways: the PFC frame's trip to the peer and the last
//!    bits the peer sent before it arrived (2 x delay x rate);
//! 4. the interface delays of the two ends' MAC and PHY (`D-Intf`, IEEE
//!    802.3's upper bounds in bit times);
//! 5. the peer's response time: how long its MAC may take from receiving
//!    the PFC frame to acting on it (`D-Resp`, IEEE 802.3 Annex 31D's
//!    bounds in pause quanta of 512 bit times, e.g. 394 quanta at 100 Gb/s);
//! 6. the largest frame the peer has begun sending when it stops
//!    (`MTU_S`): a frame is never cut.
//!
//! The bounds in bit times, by rate: `D-Resp` 30,720 (10G), 40,960 (25G),
//! 60,416 (40G), 201,728 (100G), 463,360 (400G); `D-Intf` 8,192 (10G),
//! 6,144 (25G), 24,576 (40G), 122,880 (100G). A rate without an entry
//! (e.g. 200G, or `D-Intf` at 400G, which our sources do not give) takes
//! the *time* of the nearest listed rate below it (slower PHYs are allowed
//! longer: this errs towards more headroom), the lowest listed one below
//! the table. The plan says which rate's bound each port used.
//!
//! The simulator's peer stops at its next frame boundary with no response
//! delay and its interfaces add none, so it needs only terms 1, 2, 3 and
//! 6; terms 4 and 5 are the margin a real NIC or switch needs.

use crate::scenario::{Framing, Time, PS_PER_S};

/// Bytes a RoCEv2 packet adds to its IB payload at most: BTH 12, RETH 16
/// and ImmDt 4 (an RDMA WRITE with immediate, only packet), ICRC 4, UDP 8,
/// IPv4 20.
pub const ROCE_IP_OVERHEAD: u32 = 12 + 16 + 4 + 4 + 8 + 20;

const G: u64 = 1_000_000_000;

/// `D-Resp` upper bounds: (rate, bit times).
pub const D_RESP_BIT_TIMES: [(u64, u64); 5] =
    [(10 * G, 30_720), (25 * G, 40_960), (40 * G, 60_416), (100 * G, 201_728), (400 * G, 463_360)];
/// `D-Intf` upper bounds: (rate, bit times).
pub const D_INTF_BIT_TIMES: [(u64, u64); 4] =
    [(10 * G, 8_192), (25 * G, 6_144), (40 * G, 24_576), (100 * G, 122_880)];

/// The largest frame on the wire for an IB path MTU: the MTU's payload
/// plus [`ROCE_IP_OVERHEAD`], framed.
pub fn largest_frame(mtu: u32, framing: Framing) -> u64 {
    u64::from(framing.data_wire_len((mtu + ROCE_IP_OVERHEAD) as usize))
}

/// A bound of `table` for a port of `rate_bps`, in bytes at that rate, and
/// the listed rate it came from (see the module docs).
pub fn bound_bytes(table: &[(u64, u64)], rate_bps: u64) -> (u64, u64) {
    let (from_rate, bits) =
        table.iter().rev().find(|&&(r, _)| r <= rate_bps).or(table.first()).copied().unwrap_or((rate_bps, 0));
    // The same time at this port's rate: bits x rate / from_rate.
    let bits_here = (u128::from(bits) * u128::from(rate_bps)).div_ceil(u128::from(from_rate.max(1)));
    ((bits_here as u64).div_ceil(8), from_rate)
}

/// The headroom of one port, term by term (bytes), unscaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadroomTerms {
    pub frame_at_switch: u64,
    pub pfc_frame: u64,
    /// Both ways.
    pub cable: u64,
    pub interface: u64,
    /// The listed rate whose `D-Intf` was used.
    pub interface_rate: u64,
    pub response: u64,
    /// The listed rate whose `D-Resp` was used.
    pub response_rate: u64,
    pub frame_at_peer: u64,
}

impl HeadroomTerms {
    /// The terms of a port of `rate_bps` on a cable of one-way `delay_ps`,
    /// with frames of at most `largest_frame` bytes.
    pub fn new(rate_bps: u64, delay_ps: Time, largest_frame: u64, framing: Framing) -> HeadroomTerms {
        let (interface, interface_rate) = bound_bytes(&D_INTF_BIT_TIMES, rate_bps);
        let (response, response_rate) = bound_bytes(&D_RESP_BIT_TIMES, rate_bps);
        let cable_bits = 2 * u128::from(rate_bps) * u128::from(delay_ps) / u128::from(PS_PER_S);
        HeadroomTerms {
            frame_at_switch: largest_frame,
            pfc_frame: u64::from(framing.pfc_wire_len()),
            cable: (cable_bits / 8) as u64,
            interface,
            interface_rate,
            response,
            response_rate,
            frame_at_peer: largest_frame,
        }
    }

    /// Everything but the cable: what a `headroom_extra` rule carries.
    pub fn beyond_cable(&self) -> u64 {
        self.frame_at_switch + self.pfc_frame + self.interface + self.response + self.frame_at_peer
    }

    pub fn total(&self) -> u64 {
        self.cable + self.beyond_cable()
    }

    /// What the simulator's ports need: the terms without the interface
    /// and response delays, which it does not have.
    pub fn simulated_need(&self) -> u64 {
        self.frame_at_switch + self.pfc_frame + self.cable + self.frame_at_peer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::PS_PER_NS;

    #[test]
    fn listed_rates_use_their_bounds() {
        assert_eq!(bound_bytes(&D_RESP_BIT_TIMES, 100 * G), (25_216, 100 * G));
        assert_eq!(bound_bytes(&D_INTF_BIT_TIMES, 100 * G), (15_360, 100 * G));
        assert_eq!(bound_bytes(&D_RESP_BIT_TIMES, 10 * G), (3_840, 10 * G));
        // 400G has no D-Intf entry: 100G's 1.2288 us at 400G.
        assert_eq!(bound_bytes(&D_INTF_BIT_TIMES, 400 * G), (61_440, 100 * G));
        // 200G: 100G's response time, 2.01728 us, at 200G.
        assert_eq!(bound_bytes(&D_RESP_BIT_TIMES, 200 * G), (50_432, 100 * G));
        // Below the table: 10G's time.
        assert_eq!(bound_bytes(&D_RESP_BIT_TIMES, G), (384, 10 * G));
    }

    /// MODEL-NOTES' worked example: 100G over 2 m of copper (about 10 ns)
    /// with ~1.1 KB frames needs about 42 KB.
    #[test]
    fn a_100g_dac_port_needs_about_42kb() {
        let frame = largest_frame(1024, Framing::Ethernet);
        assert_eq!(frame, 1024 + 64 + 42);
        let t = HeadroomTerms::new(100 * G, 10 * PS_PER_NS, frame, Framing::Ethernet);
        assert_eq!(t.cable, 250);
        assert_eq!(t.pfc_frame, 84);
        let total = t.total();
        assert!((42_000..44_000).contains(&total), "{t:?} = {total}");
        assert_eq!(t.simulated_need(), 2 * frame + 84 + 250);
    }
}
