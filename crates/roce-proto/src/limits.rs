//! Device limits and protocol constants, in one place. `EngineConfig::new`
//! starts from these; the roles read the tunable ones from the config.

/// Largest `max_rd_atomic` / `max_dest_rd_atomic` the device supports
/// (IBTA vol. 1 §9.5: outstanding RDMA READ and atomic requests).
pub const MAX_RD_ATOMIC: u8 = 16;

/// AETH credit count in the ACKs the responder sends: "no credits
/// reported" (IBTA vol. 1 §9.7.7.2.4; end-to-end flow control is not used
/// with RoCE), as rxe sends.
pub const ACK_CREDITS: u8 = roce_wire::aeth::CREDITS_INVALID;

/// Inline sends up to this size keep their data in the WQE itself.
pub const INLINE_IN_WQE: usize = 64;

/// Default number of unacknowledged request PSNs per QP (the send window).
pub const MAX_UNACKED_PSNS: u32 = 256;

/// Default READ-response bytes a device may have outstanding
/// (`EngineConfig::rx_budget_bytes`): a quarter of the 4 MiB receive
/// buffer a kernel grants by default at most (`net.core.rmem_max`).
pub const RX_BUDGET_BYTES: u64 = 1 << 20;

/// A READ is asked for in requests of at most this fraction of the
/// device's READ budget each, so that several can be in flight.
pub const READ_CHUNKS_PER_BUDGET: u64 = 4;

/// Default least wait before a stalled READ's tail is asked for again:
/// longer than the stalls a driver on a busy host (or a peer in a VM) shows
/// between responses, where 1 ms made needless re-requests, and still a
/// fraction of the ACK timeouts in use (67 ms for rdma-core's default 14,
/// about 1 s for UCX).
pub const READ_TAIL_FLOOR: crate::time::Duration = crate::time::Duration::from_millis(5);

/// A stalled READ's tail is asked for again after this many smoothed
/// round trips without a response (or `read_tail_floor`, if longer).
pub const READ_TAIL_RTTS: u64 = 4;

/// A response gap below the highest response seen restarts transmission at
/// most once per this fraction of the local ACK timeout unless more stale
/// responses arrive than can exist (see `completer`).
pub const GAP_RETRY_TIMEOUT_DIVISOR: u64 = 8;

/// A stalled READ's tail is asked for again no sooner than this many times
/// the longest pause lately between two responses of one READ request.
pub const READ_TAIL_GAPS: u64 = 8;

/// A READ tail asked for again and still missing is asked for once more by
/// the tail timer if the request was this many packets or fewer (served
/// twice, it costs little; lost, it would wait for the ACK timeout);
/// a longer one waits for the ACK timeout (see `completer`).
pub const SMALL_GAP_PACKETS: u64 = 16;

/// Re-requests of a stalled READ's tail without any response in between;
/// after them the local ACK timeout decides.
pub const READ_TAIL_REREQUESTS: u8 = 3;

/// The bytes one READ request of a WQE asks for at most: a quarter of the
/// device's READ budget in whole packets (at least one). Requests start on
/// multiples of it from the WQE's start, so that a re-request of a missing
/// tail stays inside the request it repeats (rxe's responder serves a
/// duplicate READ only within the original's range).
pub fn read_chunk(rx_budget_bytes: u64, mtu: usize) -> u64 {
    let mtu = mtu.max(1) as u64;
    (rx_budget_bytes / READ_CHUNKS_PER_BUDGET / mtu).max(1) * mtu
}

/// The end of the READ request that holds byte `offset` of a READ WQE of
/// `length` bytes: the next multiple of `read_chunk` (or the WQE's end).
pub fn read_request_end(rx_budget_bytes: u64, mtu: usize, offset: u64, length: u64) -> u64 {
    let chunk = read_chunk(rx_budget_bytes, mtu);
    ((offset / chunk + 1) * chunk).min(length)
}

/// Default: ask for an ACK at least every this many packets of a message.
pub const ACK_REQ_EVERY: u32 = 64;

/// The least payload of a packet that `Engine::poll_transmit_batch_refs`
/// leaves in registered memory: a smaller one is copied, since handing the
/// kernel another iovec for it costs more than the copy.
pub const PAYLOAD_REF_MIN: usize = 512;

/// Default device limits (`struct ibv_device_attr`).
pub const MAX_QP: usize = 1 << 16;
/// ConnectX-5/6's `max_cqe` (2^22 - 1): perftest sizes one CQ for every
/// QP's send queue (`-q 10000 -t 128`: 1,280,016 entries). Entries are
/// held only while completions wait, so the depth costs nothing up front.
pub const MAX_CQE: usize = (1 << 22) - 1;
pub const MAX_MR: usize = 1 << 20;
pub const MAX_QP_WR: u32 = 1 << 14;
pub const MAX_SGE: u32 = 32;
pub const MAX_INLINE: u32 = 512;
pub const MAX_MSG_SIZE: u64 = 1 << 31;

/// The MTU of UD QPs: one packet per message, up to the largest IB MTU.
pub const UD_MTU: usize = 4096;

/// QPNs 0 and 1 are the special QPs (SMI, GSI); QPNs are 24 bits.
pub const QPN_MASK: u32 = 0x00ff_ffff;

/// UDP source ports for flow entropy: the dynamic range, as rxe derives
/// them from the QPN (Annex A17.4.2).
pub const UDP_SPORT_BASE: u16 = 0xc000;
pub const UDP_SPORT_MASK: u16 = 0x3fff;

/// The line rate congestion control starts from when none is configured:
/// 100 Gb/s, a common RoCE NIC port.
pub const LINE_RATE_BPS: u64 = 100_000_000_000;

/// Ethernet's bytes around a frame's payload: header 14, FCS 4.
const ETHERNET_OVERHEAD: usize = roce_wire::ethernet::HEADER_LEN + 4;

/// Bytes a datagram to `dst` costs on an Ethernet wire beyond its UDP
/// payload (Ethernet header and FCS, the IP header of `dst`'s family, UDP):
/// what pacing counts.
pub fn wire_overhead(dst: std::net::IpAddr) -> u64 {
    let ip =
        if dst.to_canonical().is_ipv4() { roce_wire::ipv4::HEADER_LEN } else { roce_wire::ipv6::HEADER_LEN };
    (ETHERNET_OVERHEAD + ip + roce_wire::udp::HEADER_LEN) as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn wire_overhead_follows_the_ip_family() {
        let v4: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: std::net::IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let v6: std::net::IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(super::wire_overhead(v4), 46);
        assert_eq!(super::wire_overhead(mapped), 46);
        assert_eq!(super::wire_overhead(v6), 66);
    }
}
