use super::*;
use crate::cma::{self, CmaHdrRepr};
use proptest::prelude::*;

fn path() -> impl Strategy<Value = PathRepr> {
    (
        any::<u16>(),
        any::<u16>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        0u32..1 << 20,
        0u8..64,
        any::<u8>(),
        any::<u8>(),
        0u8..16,
        any::<bool>(),
        0u8..32,
    )
        .prop_map(|(a, b, c, d, e, f, g, h, i, j, k)| PathRepr {
            local_lid: a,
            remote_lid: b,
            local_gid: c,
            remote_gid: d,
            flow_label: e,
            packet_rate: f,
            traffic_class: g,
            hop_limit: h,
            sl: i,
            subnet_local: j,
            local_ack_timeout: k,
        })
}

fn round_trip(m: &CmMadRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; mad::MAD_LEN];
    m.emit(&mut b).unwrap();
    let back = CmMadRepr::parse(&b).unwrap();
    assert_eq!(&back, m);
    b
}

proptest! {
    #[test]
    fn req_round_trips(ids in any::<(u32, u64, u64, u32)>(), q in (0u32..1 << 24, 0u32..1 << 24, 0u32..1 << 24, 0u32..1 << 24),
                       rr in any::<(u8, u8, u16)>(), b5 in (0u8..32, 0u8..4, any::<bool>(), 0u8..32, 0u8..8, 0u8..16),
                       b3 in (0u8..8, 0u8..16, any::<bool>(), 0u8..8, any::<bool>(), any::<bool>(), 0u32..1 << 24),
                       p1 in path(), p2 in path(), pd in any::<[u8; 92]>()) {
        let r = ReqRepr {
            local_comm_id: ids.0, ece_vendor_id: b3.6, service_id: ids.1, local_ca_guid: ids.2, local_qkey: ids.3,
            local_qpn: q.0, responder_resources: rr.0, local_eecn: q.1, initiator_depth: rr.1, remote_eecn: q.2,
            remote_cm_response_timeout: b5.0, transport_type: b5.1, end_to_end_flow_control: b5.2,
            starting_psn: q.3, local_cm_response_timeout: b5.3, retry_count: b5.4, pkey: rr.2, path_mtu: b5.5,
            rdc_exists: b3.4, rnr_retry_count: b3.0, max_cm_retries: b3.1, srq: b3.2, extended_transport_type: b3.3,
            primary_path: p1, alternate_path: p2, sap_supported: b3.5, private_data: &pd,
        };
        round_trip(&CmMadRepr::new(ids.1, CmMsgRepr::Req(r)));
    }

    #[test]
    fn rep_round_trips(ids in any::<(u32, u32, u32, u64)>(), q in (0u32..1 << 24, 0u32..1 << 24, 0u32..1 << 24, 0u32..1 << 24),
                       rr in any::<(u8, u8)>(), bits in (0u8..32, 0u8..4, any::<bool>(), 0u8..8, any::<bool>()),
                       pd in proptest::collection::vec(any::<u8>(), 196)) {
        let r = RepRepr {
            local_comm_id: ids.0, remote_comm_id: ids.1, local_qkey: ids.2, local_qpn: q.0, ece_vendor_id: q.1,
            local_eecn: q.2, starting_psn: q.3, responder_resources: rr.0, initiator_depth: rr.1,
            target_ack_delay: bits.0, failover_accepted: bits.1, end_to_end_flow_control: bits.2,
            rnr_retry_count: bits.3, srq: bits.4, local_ca_guid: ids.3, private_data: &pd,
        };
        round_trip(&CmMadRepr::new(7, CmMsgRepr::Rep(r)));
    }

    #[test]
    fn small_messages_round_trip(l in any::<u32>(), r in any::<u32>(), x in 0u8..4, t in 0u8..32, n in 0u8..73,
                                 reason in any::<u16>(), qpn in 0u32..1 << 24, sid in any::<u64>(), qkey in any::<u32>(),
                                 pk in any::<u16>(), st in any::<u8>(), pd in proptest::collection::vec(any::<u8>(), 224),
                                 ari in proptest::collection::vec(any::<u8>(), 72)) {
        let x = x.min(2);
        round_trip(&CmMadRepr::new(1, CmMsgRepr::Mra(MraRepr { local_comm_id: l, remote_comm_id: r, message_mraed: x, service_timeout: t, private_data: &pd[..222] })));
        round_trip(&CmMadRepr::new(2, CmMsgRepr::Rej(RejRepr { local_comm_id: l, remote_comm_id: r, message_rejected: x, reject_info_len: n, reason, ari: &ari[..usize::from(n).min(72)], private_data: &pd[..148] })));
        round_trip(&CmMadRepr::new(3, CmMsgRepr::Rtu(RtuRepr { local_comm_id: l, remote_comm_id: r, private_data: &pd })));
        round_trip(&CmMadRepr::new(4, CmMsgRepr::Dreq(DreqRepr { local_comm_id: l, remote_comm_id: r, remote_qpn: qpn, private_data: &pd[..220] })));
        round_trip(&CmMadRepr::new(5, CmMsgRepr::Drep(DrepRepr { local_comm_id: l, remote_comm_id: r, private_data: &pd })));
        round_trip(&CmMadRepr::new(6, CmMsgRepr::SidrReq(SidrReqRepr { request_id: l, pkey: pk, service_id: sid, private_data: &pd[..216] })));
        round_trip(&CmMadRepr::new(7, CmMsgRepr::SidrRep(SidrRepRepr { request_id: l, status: st, qpn, service_id: sid, qkey, add_info: &ari[..usize::from(n).min(72)], private_data: &pd[..136] })));
    }

    /// Arbitrary bytes never panic the parser.
    #[test]
    fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300), attr in 0x10u16..0x1b) {
        let mut b = b;
        if b.len() >= 24 { b[0] = 1; b[1] = 7; b[2] = 2; b[3] = 3; b[16..18].copy_from_slice(&attr.to_be_bytes()); }
        let _ = CmMadRepr::parse(&b).map(|m| m.to_string());
    }
}

/// A REQ as Debian 12's kernel sends it for `rping -c -a 10.47.0.1` from
/// 10.47.0.3 (the field values the notes record as OBSERVED, §0 and
/// A1.2–A1.6), written byte by byte from the IBTA tables, not with the
/// emitter: the parser must read the kernel's layout.
#[test]
fn parses_a_kernel_req_laid_out_by_hand() {
    let mut m = [0u8; 256];
    m[..4].copy_from_slice(&[1, 7, 2, 3]);
    // TID: hi_tid 2 << 32 | comm ID 0x00a5447c as a little-endian u32.
    m[8..16].copy_from_slice(&0x0000_0002_7c44_a500u64.to_be_bytes());
    m[16..18].copy_from_slice(&0x0010u16.to_be_bytes());
    let r = &mut m[24..];
    r[0..4].copy_from_slice(&0x00a5_447cu32.to_be_bytes());
    r[8..16].copy_from_slice(&0x0106_1c06u64.to_be_bytes());
    r[16..24].copy_from_slice(&0x5054_00ff_fe47_0003u64.to_be_bytes());
    r[32..36].copy_from_slice(&[0x00, 0x00, 0x11, 0x01]); // QPN 0x11, responder resources 1
    r[36..40].copy_from_slice(&[0, 0, 0, 1]); // initiator depth 1
    r[43] = 20 << 3; // remote CM response timeout 20, RC, no E2E FC
    r[44..47].copy_from_slice(&[0x12, 0x34, 0x56]);
    r[47] = 20 << 3 | 7; // local CM response timeout 20, retry 7
    r[48..50].copy_from_slice(&[0xff, 0xff]);
    r[50] = 3 << 4 | 7; // MTU 1024, RNR retry 7
    r[51] = 15 << 4; // max CM retries 15
    let p = &mut r[52..96];
    p[0..4].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    p[4..20].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 47, 0, 3]);
    p[20..36].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 47, 0, 1]);
    p[36..40].copy_from_slice(&(0xc466eu32 << 12).to_be_bytes());
    p[41] = 64;
    p[43] = 19 << 3; // local ACK timeout 19
    let pd = &mut r[140..];
    pd[..4].copy_from_slice(&[0x00, 0x40, 0xe8, 0x98]); // cma v0, IPv4, port 59544
    pd[16..20].copy_from_slice(&[10, 47, 0, 3]);
    pd[32..36].copy_from_slice(&[10, 47, 0, 1]);

    let mad = CmMadRepr::parse(&m).unwrap();
    assert_eq!(mad.mad.transaction_id, 0x0000_0002_7c44_a500);
    let CmMsgRepr::Req(req) = mad.msg else { panic!("not a REQ: {mad:?}") };
    assert_eq!(req.local_comm_id, 0x00a5_447c);
    assert_eq!(req.service_id, cma::service_id(cma::PS_TCP, 7174));
    assert_eq!((req.local_qpn, req.responder_resources, req.initiator_depth), (0x11, 1, 1));
    assert_eq!(
        (req.remote_cm_response_timeout, req.transport_type, req.end_to_end_flow_control),
        (20, 0, false)
    );
    assert_eq!((req.starting_psn, req.local_cm_response_timeout, req.retry_count), (0x123456, 20, 7));
    assert_eq!((req.pkey, req.path_mtu, req.rnr_retry_count, req.max_cm_retries), (0xffff, 3, 7, 15));
    let pp = req.primary_path;
    assert_eq!((pp.local_lid, pp.remote_lid, pp.hop_limit, pp.local_ack_timeout), (0xffff, 0xffff, 64, 19));
    assert_eq!(pp.flow_label, 0xc466e);
    assert_eq!(gid_ip(&pp.local_gid), "10.47.0.3".parse::<core::net::IpAddr>().unwrap());
    assert_eq!(req.alternate_path, PathRepr::default());
    let h = CmaHdrRepr::parse(req.private_data).unwrap();
    assert_eq!(
        (h.src_ip.to_string(), h.dst_ip.to_string(), h.src_port),
        ("10.47.0.3".into(), "10.47.0.1".into(), 59544)
    );
    let line = mad.to_string();
    assert!(line.contains("CM REQ") && line.contains("ip=10.47.0.3:59544->10.47.0.1:7174"), "{line}");
    // Emitting the parsed REQ gives the same bytes back.
    let mut again = [0u8; 256];
    mad.emit(&mut again).unwrap();
    assert_eq!(again[..], m[..]);
}

#[test]
fn rejects_what_the_kernel_mad_layer_drops() {
    let mut m = [0u8; 256];
    m[..4].copy_from_slice(&[1, 7, 2, 3]);
    m[16..18].copy_from_slice(&attr::RTU.to_be_bytes());
    assert!(CmMadRepr::parse(&m).is_ok());
    assert!(CmMadRepr::parse(&m[..255]).is_err());
    for (i, v) in [(1, 4u8), (2, 1), (3, 1)] {
        let mut b = m;
        b[i] = v;
        assert!(CmMadRepr::parse(&b).is_err(), "byte {i} = {v}");
    }
    let mut b = m;
    b[16..18].copy_from_slice(&attr::LAP.to_be_bytes());
    assert!(CmMadRepr::parse(&b).is_err());
    let too_long = [0u8; 93];
    let req = ReqRepr { private_data: &too_long, ..Default::default() };
    assert_eq!(
        CmMadRepr::new(0, CmMsgRepr::Req(req)).emit(&mut b),
        Err(WireError::PrivateDataTooLong { len: 93, max: 92 })
    );
}
