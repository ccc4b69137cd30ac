//! The layout test: every structure of `abi` against rdma-core's header.
//! A small C program, compiled with the system's C compiler against
//! `<infiniband/verbs.h>`, prints each size and field offset; they must
//! equal Rust's. Without the header or a compiler the test says so and
//! passes, except under CI (`roce_test_support::in_ci`), where it fails.

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
    layout! {
        "struct ibv_device" => ibv_device { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
        "struct ibv_context_ops" => ibv_context_ops {
            _compat_query_device, _compat_query_port, alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq,
            post_srq_recv, post_send, post_recv, _compat_async_event,
        }
        "struct ibv_context" => ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        "struct verbs_context" => verbs_context {
            query_port, advise_mr, alloc_null_mr, create_cq_ex, priv_ as "priv", query_device_ex, ibv_destroy_flow,
            ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp, create_qp_ex, get_srq_num, create_srq_ex,
            open_xrcd, close_xrcd, _ABI_placeholder3, sz, context,
        }
        "struct ibv_device_attr" => ibv_device_attr {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver,
            max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd,
            max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom,
            atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp,
            max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq,
            max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
        }
        "struct ibv_port_attr" => ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr,
            pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width,
            active_speed, phys_state, link_layer, flags, port_cap_flags2,
        }
        "union ibv_gid" => ibv_gid { raw }
        "struct ibv_gid_entry" => ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
        "struct ibv_pd" => ibv_pd { context, handle }
        "struct ibv_mr" => ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        "struct ibv_comp_channel" => ibv_comp_channel { context, fd, refcnt }
        "struct ibv_cq" => ibv_cq {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed,
        }
        "struct ibv_srq" => ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
        "struct ibv_qp" => ibv_qp {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond,
            events_completed,
        }
        "struct ibv_ah" => ibv_ah { context, pd, handle }
        "struct ibv_global_route" => ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
        "struct ibv_ah_attr" => ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
        "struct ibv_qp_cap" => ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
        "struct ibv_qp_init_attr" => ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        "struct ibv_qp_attr" => ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
            qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify,
            sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt,
            rnr_retry, alt_port_num, alt_timeout, rate_limit,
        }
        "struct ibv_srq_attr" => ibv_srq_attr { max_wr, max_sge, srq_limit }
        "struct ibv_srq_init_attr" => ibv_srq_init_attr { srq_context, attr }
        "struct ibv_sge" => ibv_sge { addr, length, lkey }
        "struct ibv_recv_wr" => ibv_recv_wr { wr_id, next, sg_list, num_sge }
        "struct ibv_send_wr" => ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type, bind_mw,
        }
        "struct ibv_mw_bind_info" => ibv_mw_bind_info { mr, addr, length, mw_access_flags }
        "struct ibv_wc" => ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags, pkey_index, slid,
            sl, dlid_path_bits,
        }
        "struct ibv_async_event" => ibv_async_event { element, event_type }
    }
}

/// The `wr` union's members, through the C names.
fn union_members() -> Vec<Item> {
    let base = offset_of!(ibv_send_wr, wr);
    let mut v = vec![
        ("wr.rdma.remote_addr", base + offset_of!(ibv_send_wr_rdma, remote_addr)),
        ("wr.rdma.rkey", base + offset_of!(ibv_send_wr_rdma, rkey)),
        ("wr.atomic.remote_addr", base + offset_of!(ibv_send_wr_atomic, remote_addr)),
        ("wr.atomic.compare_add", base + offset_of!(ibv_send_wr_atomic, compare_add)),
        ("wr.atomic.swap", base + offset_of!(ibv_send_wr_atomic, swap)),
        ("wr.atomic.rkey", base + offset_of!(ibv_send_wr_atomic, rkey)),
        ("wr.ud.ah", base + offset_of!(ibv_send_wr_ud, ah)),
        ("wr.ud.remote_qpn", base + offset_of!(ibv_send_wr_ud, remote_qpn)),
        ("wr.ud.remote_qkey", base + offset_of!(ibv_send_wr_ud, remote_qkey)),
    ];
    let bind = offset_of!(ibv_send_wr, bind_mw);
    v.push(("bind_mw.rkey", bind + offset_of!(ibv_send_wr_bind_mw, rkey)));
    v.push(("bind_mw.bind_info", bind + offset_of!(ibv_send_wr_bind_mw, bind_info)));
    v.into_iter()
        .map(|(f, rust)| Item {
            key: format!("struct ibv_send_wr.{f}"),
            rust,
            c_expr: format!("offsetof(struct ibv_send_wr, {f})"),
        })
        .collect()
}

fn skip_or_fail(why: &str) {
    if roce_test_support::in_ci() {
        panic!("layout test cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: the layout test needs {why} (apt-get install libibverbs-dev gcc)");
}

#[test]
fn structures_match_the_c_header() {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        return skip_or_fail("<infiniband/verbs.h>");
    }
    let mut items = items();
    items.extend(union_members());
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for it in &items {
        src.push_str(&format!("    printf(\"%s %zu\\n\", \"{}\", (size_t){});\n", it.key, it.c_expr));
    }
    src.push_str("    return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("roce-ibverbs-layout-{}", std::process::id()));
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
    assert!(bad.is_empty(), "layouts differ from <infiniband/verbs.h>:\n{}", bad.join("\n"));
}
