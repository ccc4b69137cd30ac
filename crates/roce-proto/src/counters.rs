//! Device counters, named as Linux rxe's hardware counters appear in
//! `rdma statistic` (sent_pkts, rcvd_pkts, duplicate_request, ...), plus the
//! reasons this engine drops packets.

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        /// Event counts since the engine was created.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$m])* pub $name: u64,)*
        }

        impl Counters {
            /// `(name, value)` for every counter, in a fixed order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($name), self.$name)),*].into_iter()
            }
        }
    };
}

counters! {
    /// Packets transmitted.
    sent_pkts,
    /// Packets received (before any check).
    rcvd_pkts,
    /// Requests whose PSN was already seen.
    duplicate_request,
    /// Requests ahead of the expected PSN.
    out_of_seq_request,
    /// RNR NAKs received (requester).
    rcvd_rnr_err,
    /// RNR NAKs sent (responder).
    send_rnr_err,
    /// PSN sequence error NAKs received.
    rcvd_seq_err,
    /// Local ACK timeouts that led to a retry.
    completer_retry_err,
    /// Transport retries exhausted.
    retry_exceeded_err,
    /// RNR retries exhausted.
    retry_rnr_exceeded_err,
    /// Send work requests that completed in error.
    send_err,
    /// SEND messages sent / received.
    rdma_sends,
    rdma_recvs,
    /// NAKs sent other than sequence and RNR (invalid request, access, operational).
    send_nak_err,
    /// Packets a role could not build or finish (a local QP operation
    /// error: the WQE fails and the QP ends).
    emit_errors,
    /// Dropped: ICRC mismatch.
    icrc_errors,
    /// IPv4 packets whose Identification the driver could not see, taken
    /// because their ICRC is right for one ID (a 16-bit weaker check than
    /// the full ICRC; see `IcrcCheck::Ipv4IdInferred`).
    icrc_ipv4_id_inferred,
    /// Dropped: not a well-formed RoCE packet.
    malformed_dropped,
    /// MADs received on QP 1 (the GSI) and handed to the CM.
    gsi_rcvd,
    /// Dropped on QP 1: not a UD SEND_ONLY with the GSI's P_Key and Q_Key
    /// and a 256-byte MAD (what rxe's `check_keys` drops too).
    gsi_dropped,
    /// MADs sent from QP 1.
    gsi_sent,
    /// Dropped: no such destination QP.
    unknown_qp_dropped,
    /// Dropped: QP state does not accept the packet.
    bad_state_dropped,
    /// Dropped: opcode's transport does not match the QP type.
    transport_mismatch_dropped,
    /// Dropped: a request whose source address is not the connected peer.
    addr_mismatch_dropped,
    /// Dropped: a response (ACK, NAK, READ response, atomic ACK) whose
    /// source address is not the connected peer.
    response_addr_mismatch_dropped,
    /// Dropped: a packet from the peer's address but another UDP source
    /// port than its first (`EngineConfig::pin_peer_port`).
    port_mismatch_dropped,
    /// Dropped: a CNP for no QP, or not from the QP's peer.
    cnp_dropped,
    /// Dropped: P_Key does not match.
    pkey_violation_dropped,
    /// Dropped: UD Q_Key does not match.
    qkey_violation_dropped,
    /// Dropped: UD/UC packet with no receive WQE posted.
    no_recv_wqe_dropped,
    /// READ tails asked for again because their responses stopped before
    /// the end and nothing came for a few round trips (see `completer`).
    read_tail_rerequests,
    /// READ responses placed past a gap (the lost ones are asked for
    /// alone, see `completer`).
    read_placed_past_gap,
    /// READ requests that asked again for one gap in a READ's responses
    /// (not the rest of the READ).
    read_gap_rerequests,
    /// Times a READ request waited because the device's READ-response
    /// budget (`EngineConfig::rx_budget_bytes`) was full.
    read_budget_waits,
    /// Times a QP's request waited because the device's unacknowledged
    /// request bytes reached `EngineConfig::tx_budget_bytes`.
    tx_budget_waits,
    /// Dropped: responses that match nothing outstanding.
    unexpected_response_dropped,
    /// Dropped: duplicate READ/atomic with no saved responder resource.
    dup_no_resource_dropped,
    /// Responses ignored as duplicates.
    duplicate_response,
    /// Responses beyond a gap the requester has already asked to fill
    /// (ignored until the answers to that request arrive).
    out_of_seq_response,
    /// Dropped: a protected QP's packet that did not authenticate (wrong
    /// key, changed bytes, or sent without protection).
    crypto_auth_failed,
    /// Dropped: a protected packet whose sequence number was seen before
    /// or is older than the replay window.
    crypto_replay_dropped,
    /// Packets received with ECN CE.
    ecn_ce_rcvd,
    /// CNPs sent (the notification point answering CE marks).
    cnp_sent,
    /// CNPs received.
    cnp_rcvd,
    /// Rate cuts the congestion controller made (DCQCN: at most one per
    /// rate-decrease period, however many CNPs).
    cc_rate_cuts,
}
