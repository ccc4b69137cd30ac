//! The kernel caps a socket's receive buffer and drops what overflows it
//! without a word. A device asks, reads back what it got, warns once when
//! its QPs can have more in flight than that, and counts the kernel's
//! drops. Here the buffer is made small on purpose (not forced, and no
//! sysctl is touched): the warning comes at connect, and a burst of WRITEs
//! into it moves the drop counter, while the transport still delivers
//! every byte.

use std::time::Duration;

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::{Side, SideOptions};

const ASKED: usize = 64 << 10;

fn small_side() -> Side {
    let mut cfg = DeviceConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.recv_buffer = ASKED;
    cfg.force_buffers = false;
    let dev = Device::open(cfg).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd.create_qp(QpBuilder::rc(&cq).max_send_wr(64).max_recv_wr(64)).unwrap();
    let mr = pd.reg_mr(alloc_buffer(4 << 20), Access::ALL).unwrap();
    Side { dev, pd, cq, qp, mr }
}

#[test]
fn a_small_receive_buffer_warns_and_counts_the_drops_of_a_burst() {
    let x = SideOptions::default().qp_depths(64, 64).mr_len(4 << 20).open();
    let y = small_side();

    let b = y.dev.driver_stats().socket_buffers;
    assert_eq!(b.recv_requested, ASKED);
    assert!(!b.recv_forced);
    // Linux reports twice what it holds for data (socket(7)).
    assert_eq!(b.recv_granted, 2 * ASKED, "{b:?}");
    assert_eq!(b.recv_room(), ASKED);
    assert!(b.send_granted > 0, "{b:?}");
    assert_eq!(y.dev.driver_stats().socket_buffer_warning, None, "no QP yet: nothing in flight");

    udp_pair::connect(&x, &y, &ConnectOptions::default());
    let s = y.dev.driver_stats();
    let w = s.socket_buffer_warning.clone().expect("a warning once a QP can have more in flight");
    assert!(s.rx_in_flight_max > ASKED as u64, "{s:?}");
    assert!(w.contains(&format!("room for {ASKED} bytes")) && w.contains("rx_dropped_socket_full"), "{w}");
    // The device with the default buffer (forced where the process may)
    // warns only if what it got is short of its one QP's window.
    let sx = x.dev.driver_stats();
    let short = sx.rx_in_flight_max > sx.socket_buffers.recv_room() as u64;
    assert_eq!(sx.socket_buffer_warning.is_some(), short, "{sx:?}");

    // Bursts of 4 MiB WRITEs from x into y's 64 KiB until the kernel has
    // dropped some (the first burst does, in practice); each one is still
    // delivered whole, by retransmission.
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    x.mr.write(0, &data).unwrap();
    let write = SendOp::Write { remote_addr: y.mr.addr(), rkey: y.mr.rkey() };
    let mut bursts = 0;
    while y.dev.driver_stats().rx_dropped == 0 && bursts < 20 {
        bursts += 1;
        y.mr.fill(0, 4 << 20, 0).unwrap();
        x.qp.post_send(SendWr::new(bursts, write, vec![x.mr.sge(0, 4 << 20)])).unwrap();
        let mut wc = [WC_ZERO; 1];
        let n = x.cq.wait(&mut wc, Duration::from_secs(60)).expect("the WRITE completes");
        assert_eq!((n, wc[0].status), (1, WcStatus::Success));
        let mut got = vec![0u8; 4 << 20];
        y.mr.read(0, &mut got).unwrap();
        assert!(got == data, "burst {bursts}: the WRITE landed whole");
    }
    let s = y.dev.driver_stats();
    assert!(s.rx_dropped > 0, "no drop after {bursts} bursts of 4 MiB into {ASKED} bytes: {s:?}");
    // The warning is said once: it has not changed.
    assert_eq!(s.socket_buffer_warning.as_deref(), Some(w.as_str()));
    assert_eq!(s.rx_errors, 0);
}

/// What the kernel granted is read back, not assumed: asked for twice
/// `net.core.rmem_max` (read, never changed), a plain `SO_RCVBUF` is
/// capped there, and `SO_RCVBUFFORCE`, where the process may use it
/// (CAP_NET_ADMIN), is not.
#[test]
fn the_buffer_granted_is_read_back_capped_unless_forced() {
    let max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .expect("net.core.rmem_max is readable")
        .trim()
        .parse()
        .unwrap();
    if max > 256 << 20 {
        eprintln!("net.core.rmem_max is {max}: too large to ask twice of it, nothing to test");
        return;
    }
    let open = |force| {
        let mut cfg = DeviceConfig::new("127.0.0.1:0".parse().unwrap());
        cfg.recv_buffer = 2 * max;
        cfg.force_buffers = force;
        Device::open(cfg).unwrap().driver_stats().socket_buffers
    };
    let plain = open(false);
    assert_eq!((plain.recv_requested, plain.recv_granted, plain.recv_forced), (2 * max, 2 * max, false));
    let forced = open(true);
    if forced.recv_forced {
        assert_eq!(forced.recv_granted, 4 * max, "{forced:?}");
    } else {
        eprintln!("no CAP_NET_ADMIN: SO_RCVBUFFORCE refused, the plain option used");
        assert_eq!(forced.recv_granted, 2 * max, "{forced:?}");
    }
}
