//! RDMA CM between two devices over real UDP on loopback: each device owns
//! UDP 4791 of its own 127.x.y.z address (as a CM peer must: the kernel
//! sends every CM MAD to port 4791), addresses drawn at random so that
//! parallel test runs do not meet.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use roce::cm::{self, CmEvent, ConnectOpts, EventChannel, Listener, PortSpace};
use roce::*;

const T: Option<Duration> = Some(Duration::from_secs(10));

/// A device on `127.a.b.c:4791` (random a, b, c), retried on a taken address.
fn device() -> Device {
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for i in 0..64u64 {
        let x = (seed.wrapping_mul(6364136223846793005).wrapping_add(i * 1442695040888963407)) >> 33;
        let ip = Ipv4Addr::new(127, 100 + (x % 100) as u8, (x >> 8) as u8, 2 + ((x >> 16) % 250) as u8);
        if let Ok(d) = Device::open(DeviceConfig::new(SocketAddr::new(IpAddr::V4(ip), 4791))) {
            return d;
        }
    }
    panic!("no free 127.x.y.z:4791");
}

/// The RoCE MTU of this machine's loopback (65536 bytes, 4096, unless
/// someone changed `lo`).
fn loopback_path_mtu() -> PathMtu {
    let lo: u32 = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap().trim().parse().unwrap();
    PathMtu::for_link_mtu(lo).unwrap()
}

fn rc_qp(dev: &Device, cq: &Cq) -> Qp {
    dev.alloc_pd().unwrap().create_qp(QpBuilder::rc(cq)).unwrap()
}

#[test]
fn listen_accept_connect_send_disconnect() {
    let (a, b) = (device(), device());
    let listener = Listener::bind(&b, 7174).unwrap();
    let addr = SocketAddr::new(b.cm_address(), 7174);
    let server = std::thread::spawn(move || {
        let cq = b.create_cq(16).unwrap();
        let pd = b.alloc_pd().unwrap();
        let qp = pd.create_qp(QpBuilder::rc(&cq)).unwrap();
        let mr = pd.reg_mr(MemBuf::new(64), Access::ALL).unwrap();
        // INIT first, to post a receive before the peer can send (the CM
        // takes the QP on from INIT, as rdma_create_qp leaves it).
        let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
        qp.modify(&init, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)
            .unwrap();
        qp.post_recv(RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, 64)] }).unwrap();
        let (id, req) = listener.next_request(T).unwrap();
        assert_eq!(&req.private_data[..6], b"client");
        assert_eq!(req.private_data.len(), 56, "as the kernel reports it");
        let mut conn = listener.accept_request(id, req, qp, &cm::AcceptOpts::default(), T).unwrap();
        assert_eq!(conn.qp().query().unwrap().path_mtu, loopback_path_mtu());
        let mut wc = [WC_ZERO; 1];
        assert_eq!(cq.wait(&mut wc, Duration::from_secs(10)).unwrap(), 1);
        assert_eq!(wc[0].status, WcStatus::Success);
        let mut got = [0u8; 11];
        mr.read(0, &mut got).unwrap();
        assert_eq!(&got, b"through CM!");
        conn.wait_disconnected(T).unwrap();
        b.cm_counters()
    });
    let cq = a.create_cq(16).unwrap();
    let pd = a.alloc_pd().unwrap();
    let qp = pd.create_qp(QpBuilder::rc(&cq)).unwrap();
    let mut conn = cm::connect(&a, addr, qp, b"client", T).unwrap();
    assert_eq!(conn.qp().state().unwrap(), QpState::Rts);
    // The path MTU both ends take from the link, as the kernel's RDMA CM
    // (`iboe_get_mtu`): the loopback's 65536 bytes give 4096.
    assert_eq!(conn.qp().query().unwrap().path_mtu, loopback_path_mtu());
    assert_eq!(conn.peer_private_data().len(), 196, "the REP's private data, as the kernel reports it");
    let mr = pd.reg_mr(MemBuf::new(64), Access::ALL).unwrap();
    mr.write(0, b"through CM!").unwrap();
    conn.qp().post_send(SendWr::new(9, SendOp::Send, vec![mr.sge(0, 11)])).unwrap();
    let mut wc = [WC_ZERO; 1];
    assert_eq!(cq.wait(&mut wc, Duration::from_secs(10)).unwrap(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    conn.disconnect().unwrap();
    let counters = server.join().unwrap();
    assert!(counters.mads_received >= 3, "{counters:?}");
    assert_eq!(a.counters().gsi_dropped, 0);
}

#[test]
fn no_listener_is_rejected_with_reason_8() {
    let (a, b) = (device(), device());
    let cq = a.create_cq(4).unwrap();
    let e = cm::connect(&a, SocketAddr::new(b.cm_address(), 9), rc_qp(&a, &cq), &[], T).err().unwrap();
    assert!(matches!(e, Error::Rejected { reason: 8, .. }), "{e}");
}

#[test]
fn event_channel_fd_polls_readable_and_reject_carries_private_data() {
    let (a, b) = (device(), device());
    let ch_b = EventChannel::new().unwrap();
    b.cm_listen(&ch_b, PortSpace::Tcp, 4420).unwrap();
    let ch_a = EventChannel::new().unwrap();
    let cq = a.create_cq(4).unwrap();
    let qp = rc_qp(&a, &cq);
    let opts = ConnectOpts { private_data: b"hi".to_vec(), ..ConnectOpts::default() };
    a.cm_connect(&ch_a, qp.qpn(), SocketAddr::new(b.cm_address(), 4420), &opts).unwrap();
    // poll(2) on the channel's fd, as a C program does.
    assert_eq!(poll_in(&ch_b, 10_000), 1, "readable once the request is there");
    let Some(CmEvent::ConnectRequest { id, req, .. }) = ch_b.try_next() else { panic!("no request") };
    assert_eq!(&req.private_data[..2], b"hi");
    assert_eq!(poll_in(&ch_b, 0), 0, "not readable once taken");
    b.cm_reject(id, b"go away").unwrap();
    match ch_a.next(T) {
        Some(CmEvent::Rejected { reason: 28, private_data, .. }) => {
            assert_eq!(&private_data[..7], b"go away")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn sidr_resolves_a_ud_qp() {
    let (a, b) = (device(), device());
    let ch_b = EventChannel::new().unwrap();
    b.cm_listen(&ch_b, PortSpace::Udp, 7174).unwrap();
    let cq = b.create_cq(4).unwrap();
    let ud = b.alloc_pd().unwrap().create_qp(QpBuilder::ud(&cq)).unwrap();
    let ch_a = EventChannel::new().unwrap();
    a.cm_sidr_resolve(&ch_a, SocketAddr::new(b.cm_address(), 7174), b"ud?").unwrap();
    let Some(CmEvent::SidrRequest { id, req, .. }) = ch_b.next(T) else { panic!("no SIDR request") };
    assert_eq!(&req.private_data[..3], b"ud?");
    b.cm_sidr_reply(id, ud.qpn(), cm::UDP_QKEY, &[]).unwrap();
    match ch_a.next(T) {
        Some(CmEvent::SidrReply { status: 0, qpn, qkey, .. }) => {
            assert_eq!((qpn, qkey), (ud.qpn(), 0x0123_4567))
        }
        other => panic!("{other:?}"),
    }
}

/// poll(2) on the channel's descriptor for `ms` milliseconds: 1 if readable.
fn poll_in(ch: &EventChannel, ms: i64) -> usize {
    use std::os::fd::BorrowedFd;
    // SAFETY: the descriptor belongs to `ch`, alive for the call.
    let fd = unsafe { BorrowedFd::borrow_raw(ch.fd()) };
    let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    let t = rustix::event::Timespec { tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000 };
    rustix::event::poll(&mut fds, Some(&t)).unwrap()
}
