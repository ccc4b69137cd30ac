//! The layout test: every structure of `abi` against rdma-core's headers.
//! A small C program, compiled with the system's C compiler against
//! `<rdma/rdma_cma.h>` (Debian's librdmacm-dev), prints each size and
//! field offset; they must equal Rust's. Without the header or a compiler
//! the test says so and passes, except under CI
//! (`roce_test_support::in_ci`), where it fails.

use std::mem::{offset_of, size_of};
use std::process::Command;

use crate::abi::*;

struct Item {
    key: String,
    rust: usize,
    c_expr: String,
}

macro_rules! layout {
    ($( $cty:literal => $rty:ty { $($f:ident $(as $cf:literal)?),* $(,)? } )*) => {{
        let mut v = Vec::new();
        $(
            v.push(Item { key: format!("sizeof {}", $cty), rust: size_of::<$rty>(), c_expr: format!("sizeof({})", $cty) });
            $(
                #[allow(unused_variables)]
                let cf = stringify!($f);
                $( let cf = $cf; )?
                v.push(Item {
                    key: format!("{}.{}", $cty, cf),
                    rust: offset_of!($rty, $f),
                    c_expr: format!("offsetof({}, {})", $cty, cf),
                });
            )*
        )*
        v
    }};
}

fn items() -> Vec<Item> {
    let mut v = layout! {
        "struct rdma_event_channel" => rdma_event_channel { fd }
        "struct rdma_ib_addr" => rdma_ib_addr { sgid, dgid, pkey }
        "struct rdma_addr" => rdma_addr { src_addr as "src_storage", dst_addr as "dst_storage", ibaddr as "addr.ibaddr" }
        "struct rdma_route" => rdma_route { addr, path_rec, num_paths }
        "struct rdma_cm_id" => rdma_cm_id {
            verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq, recv_cq_channel,
            recv_cq, srq, pd, qp_type,
        }
        "struct rdma_conn_param" => rdma_conn_param {
            private_data, private_data_len, responder_resources, initiator_depth, flow_control, retry_count,
            rnr_retry_count, srq, qp_num,
        }
        "struct rdma_ud_param" => rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
        "struct rdma_cm_event" => rdma_cm_event { id, listen_id, event, status, param }
        "struct rdma_addrinfo" => rdma_addrinfo {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr, ai_dst_addr,
            ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route, ai_connect_len, ai_connect, ai_next,
        }
        "struct rdma_cm_join_mc_attr_ex" => rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr }
        "struct ibv_sa_path_rec" => ibv_sa_path_rec {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible, numb_path, pkey,
            sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector, packet_life_time, preference,
        }
        "union ibv_gid" => ibv_gid { raw }
        "struct ibv_pd" => ibv_pd { context, handle }
        "struct ibv_global_route" => ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
        "struct ibv_ah_attr" => ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
        "struct ibv_qp_cap" => ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
        "struct ibv_qp_init_attr" => ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        "struct ibv_rx_hash_conf" => ibv_rx_hash_conf { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask }
        "struct ibv_qp_init_attr_ex" => ibv_qp_init_attr_ex {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd, create_flags,
            max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
        }
        "struct ibv_qp_attr" => ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
            qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify,
            sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt,
            rnr_retry, alt_port_num, alt_timeout, rate_limit,
        }
        "struct ibv_srq_attr" => ibv_srq_attr { max_wr, max_sge, srq_limit }
        "struct ibv_srq_init_attr" => ibv_srq_init_attr { srq_context, attr }
        "struct ibv_srq_init_attr_ex" => ibv_srq_init_attr_ex {
            srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap_max_num_tags as "tm_cap.max_num_tags",
            tm_cap_max_ops as "tm_cap.max_ops",
        }
        "struct ibv_ece" => ibv_ece { vendor_id, options, comp_mask }
    };
    // The prefix of `struct ibv_qp` the library reads.
    for (f, rust) in [
        ("context", offset_of!(ibv_qp, context)),
        ("pd", offset_of!(ibv_qp, pd)),
        ("srq", offset_of!(ibv_qp, srq)),
        ("qp_num", offset_of!(ibv_qp, qp_num)),
        ("qp_type", offset_of!(ibv_qp, qp_type)),
    ] {
        v.push(Item {
            key: format!("struct ibv_qp.{f}"),
            rust,
            c_expr: format!("offsetof(struct ibv_qp, {f})"),
        });
    }
    // The union members of `rdma_cm_event.param`.
    let base = offset_of!(rdma_cm_event, param);
    for (f, rust) in [
        ("param.conn.private_data_len", base + offset_of!(rdma_conn_param, private_data_len)),
        ("param.conn.qp_num", base + offset_of!(rdma_conn_param, qp_num)),
        ("param.ud.ah_attr", base + offset_of!(rdma_ud_param, ah_attr)),
        ("param.ud.qp_num", base + offset_of!(rdma_ud_param, qp_num)),
        ("param.ud.qkey", base + offset_of!(rdma_ud_param, qkey)),
    ] {
        v.push(Item {
            key: format!("struct rdma_cm_event.{f}"),
            rust,
            c_expr: format!("offsetof(struct rdma_cm_event, {f})"),
        });
    }
    // The sizes and offsets the library reads from structures it does
    // not declare.
    for (k, rust, c) in [
        ("sizeof struct ibv_device_attr", IBV_DEVICE_ATTR_SIZE, "sizeof(struct ibv_device_attr)"),
        (
            "ibv_device_attr.max_qp_rd_atom",
            IBV_DEVICE_ATTR_MAX_QP_RD_ATOM,
            "offsetof(struct ibv_device_attr, max_qp_rd_atom)",
        ),
        (
            "ibv_device_attr.max_qp_init_rd_atom",
            IBV_DEVICE_ATTR_MAX_QP_INIT_RD_ATOM,
            "offsetof(struct ibv_device_attr, max_qp_init_rd_atom)",
        ),
        ("IBV_MTU_1024", IBV_MTU_1024 as usize, "IBV_MTU_1024"),
        ("RDMA_PS_TCP", RDMA_PS_TCP as usize, "RDMA_PS_TCP"),
        ("RDMA_PS_UDP", RDMA_PS_UDP as usize, "RDMA_PS_UDP"),
        ("RDMA_CM_EVENT_TIMEWAIT_EXIT", RDMA_CM_EVENT_TIMEWAIT_EXIT as usize, "RDMA_CM_EVENT_TIMEWAIT_EXIT"),
        ("IBV_QP_DEST_QPN", IBV_QP_DEST_QPN as usize, "IBV_QP_DEST_QPN"),
        ("IBV_QP_MAX_DEST_RD_ATOMIC", IBV_QP_MAX_DEST_RD_ATOMIC as usize, "IBV_QP_MAX_DEST_RD_ATOMIC"),
        ("IBV_QP_MIN_RNR_TIMER", IBV_QP_MIN_RNR_TIMER as usize, "IBV_QP_MIN_RNR_TIMER"),
        ("IBV_QP_SQ_PSN", IBV_QP_SQ_PSN as usize, "IBV_QP_SQ_PSN"),
        ("IBV_QPT_UD", IBV_QPT_UD as usize, "IBV_QPT_UD"),
        ("IBV_QPS_ERR", IBV_QPS_ERR as usize, "IBV_QPS_ERR"),
    ] {
        v.push(Item { key: k.to_string(), rust, c_expr: c.to_string() });
    }
    v
}

fn skip_or_fail(why: &str) {
    if roce_test_support::in_ci() {
        panic!("layout test cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: the layout test needs {why} (apt-get install librdmacm-dev gcc)");
}

#[test]
fn structures_match_the_c_headers() {
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        return skip_or_fail("<rdma/rdma_cma.h>");
    }
    let items = items();
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    for it in &items {
        src.push_str(&format!("    printf(\"%s %zu\\n\", \"{}\", (size_t){});\n", it.key, it.c_expr));
    }
    src.push_str("    return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("roce-rdmacm-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&c, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match Command::new(&cc).arg(&c).arg("-o").arg(&exe).output() {
        Ok(o) => o,
        Err(e) => return skip_or_fail(&format!("a C compiler ({cc}: {e})")),
    };
    assert!(
        built.status.success(),
        "the layout program did not compile:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut bad = Vec::new();
    for (it, line) in items.iter().zip(text.lines()) {
        let (key, n) = line.rsplit_once(' ').unwrap();
        assert_eq!(key, it.key);
        let c: usize = n.parse().unwrap();
        if c != it.rust {
            bad.push(format!("{}: C {} Rust {}", it.key, c, it.rust));
        }
    }
    assert_eq!(text.lines().count(), items.len());
    assert!(bad.is_empty(), "layouts differ from <rdma/rdma_cma.h>:\n{}", bad.join("\n"));
}
