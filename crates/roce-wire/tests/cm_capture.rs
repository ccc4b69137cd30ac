//! The Linux kernel's own CM MADs (rxe, kernel 6.1, `ucmatose`), captured
//! in the rxe lab against our CM (`testdata/rdma_cm/README.md`): they parse,
//! re-emit byte for byte, and carry the values the notes record for 6.1.

use std::path::Path;

use roce_wire::cm::{gid_ip, CmMadRepr, CmMsgRepr};
use roce_wire::cma::CmaHdrRepr;
use roce_wire::pcap::PcapReader;
use roce_wire::{ParseOptions, RoceFrameRepr};

#[test]
fn kernel_cm_mads_from_the_rxe_lab() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rdma_cm/ucmatose_rxe.pcap");
    let kernel: std::net::IpAddr = "10.47.0.1".parse().unwrap();
    let mut names = Vec::new();
    for rec in PcapReader::open(&path).unwrap() {
        let rec = rec.unwrap();
        let opts = ParseOptions { pmtu: Some(1024), ..ParseOptions::default() };
        let Ok(f) = RoceFrameRepr::parse(&rec.data, &opts) else { continue };
        let p = f.packet;
        if p.bth.dest_qp != 1 {
            continue;
        }
        // Every MAD on QP 1: UD SEND_ONLY, P_Key 0xFFFF, GSI Q_Key, 256 bytes.
        assert_eq!((p.bth.opcode, p.bth.pkey, p.payload.len()), (0x64, 0xffff, 256));
        assert_eq!(p.ext.deth.map(|d| (d.qkey, d.src_qp)), Some((0x8001_0000, 1)));
        let m = CmMadRepr::parse(p.payload).unwrap();
        let mut again = [0u8; 256];
        m.emit(&mut again).unwrap();
        assert_eq!(&again[..], p.payload, "re-emit of {}", m.msg.name());
        let from_kernel =
            matches!(f.net, roce_wire::NetRepr::Ipv4(ip, _) if std::net::IpAddr::V4(ip.src) == kernel);
        if !from_kernel {
            continue;
        }
        names.push(m.msg.name());
        match m.msg {
            CmMsgRepr::Req(r) => {
                // TID = hi_tid << 32 | the comm ID's bytes as a little-endian u32.
                assert_eq!(m.mad.transaction_id as u32, r.local_comm_id.swap_bytes());
                assert_eq!(r.service_id, 0x0106_0000 | 7471);
                assert_eq!((r.local_ca_guid, r.transport_type, r.path_mtu), (0x5054_00ff_fe47_0001, 0, 3));
                assert_eq!(
                    (r.local_cm_response_timeout, r.remote_cm_response_timeout, r.max_cm_retries),
                    (20, 20, 15)
                );
                let pp = r.primary_path;
                // cm_ack_timeout(rxe's ack delay 15, PacketLifeTime 18) = 19.
                assert_eq!(
                    (pp.local_ack_timeout, pp.hop_limit, pp.local_lid, pp.remote_lid),
                    (19, 64, 0xffff, 0xffff)
                );
                assert_eq!(r.alternate_path.local_lid, 0);
                assert_eq!(gid_ip(&pp.local_gid), kernel);
                let h = CmaHdrRepr::parse(r.private_data).unwrap();
                assert_eq!((h.src_ip, h.dst_ip.to_string()), (kernel, "10.47.0.3".to_string()));
                // flow label = (sport * 31 + dport) & 0xFFFFF (cma_get_roce_udp_flow_label).
                assert_eq!(pp.flow_label, (u32::from(h.src_port) * 31 + 7471) & 0xf_ffff);
            }
            CmMsgRepr::Rep(r) => {
                assert_eq!((r.target_ack_delay, r.rnr_retry_count), (15, 7));
            }
            _ => {}
        }
    }
    assert_eq!(names, ["REP", "DREP", "REQ", "RTU", "DREP"]);
}
