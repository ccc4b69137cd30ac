//! roce's initiator against roce's target on loopback (two devices, each
//! owning UDP 4791 of its own address, as the RDMA CM requires): discovery,
//! connect, Identify, 1 MiB written and read back, the bytes in the
//! target's namespace, errors the host sees as typed statuses, disconnect
//! and reconnect; the submit/poll path at queue depth on two I/O queues
//! with a keep-alive that holds the controller; and a controller that
//! answers wrongly (a CID not outstanding, a short response), which the
//! host reports as a protocol error; a file namespace, whose commands the
//! target runs on a scratch buffer rather than on the registered slot; a
//! namespace in the target device's registered memory, moved by RDMA with
//! no copy, and one on another device, copied through the slots.
//! Each test has addresses of its own (the tests of one binary run at
//! once).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce::cm::{AcceptOpts, Listener};
use roce::{
    alloc_buffer, Access, AttrMask, Device, DeviceConfig, QpAttr, QpBuilder, QpState, RecvWr, SendOp, SendWr,
    Sge, Wc,
};
use roce_nvmf::initiator::{discover, pattern, sqe, Controller, Done, HostError, HostOptions, IoQueue};
use roce_nvmf::namespace::{Backend, DeviceMem, FileBackend, MemBackend};
use roce_nvmf::server::{serve, Log};
use roce_nvmf::target::{Namespace, SubsystemConfig, Target, TargetConfig};
use roce_nvmf::wire::fabrics::RepPrivate;
use roce_nvmf::wire::{io, Cqe, Sqe, Status, SQE_LEN};

const NQN: &str = "nqn.2026-11.io.roce:loopback";

/// A target serving `mem` (4 KiB blocks) as namespace 1 of [`NQN`] on
/// `ip`, RDMA CM port 4420, until the flag is set.
fn start_target(
    ip: &str,
    mem: Arc<dyn Backend>,
) -> (Arc<Target>, Arc<AtomicBool>, JoinHandle<roce::Result<()>>) {
    start_target_with(ip, |_| mem)
}

/// [`start_target`] with the namespace made for the target's device.
fn start_target_with(
    ip: &str,
    make: impl FnOnce(&Device) -> Arc<dyn Backend>,
) -> (Arc<Target>, Arc<AtomicBool>, JoinHandle<roce::Result<()>>) {
    let tdev = Device::open(DeviceConfig::new(SocketAddr::new(ip.parse().unwrap(), 4791))).unwrap();
    let mem = make(&tdev);
    let cfg = TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            allowed_hosts: Vec::new(),
            namespaces: vec![Namespace::new(mem, 4096)],
        }],
        traddr: ip.into(),
        ..TargetConfig::default()
    };
    let target = Arc::new(Target::new(cfg).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::new(|m: &str| eprintln!("target: {m}"));
    let server = {
        let (t, s) = (target.clone(), stop.clone());
        std::thread::spawn(move || serve(&tdev, t, 4420, &s, log))
    };
    (target, stop, server)
}

/// `f`'s answer once the target's thread listens: a REJ with reason 8
/// (no listener on the port) means it has not bound yet.
fn once_listening<T>(mut f: impl FnMut() -> Result<T, HostError>) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match f() {
            Err(HostError::Rejected { reason: 8, .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            r => return r.unwrap(),
        }
    }
}

#[test]
fn our_initiator_against_our_target() {
    let mem = Arc::new(MemBackend::new(8 << 20));
    let (target, stop, server) = start_target("127.0.0.2", mem.clone());
    let hdev = Device::open(DeviceConfig::new("127.0.0.3:4791".parse().unwrap())).unwrap();
    let addr: SocketAddr = "127.0.0.2:4420".parse().unwrap();
    let o = HostOptions::new(NQN);

    let entries = once_listening(|| discover(&hdev, addr, &o.hostnqn, Duration::from_secs(10)));
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0].subnqn.as_str(), entries[0].traddr.as_str(), entries[0].trsvcid.as_str()),
        (NQN, "127.0.0.2", "4420")
    );

    let mut c = Controller::connect(&hdev, addr, &o).unwrap();
    assert_eq!(c.info().subnqn, NQN);
    assert_eq!(c.info().cntlid, c.cntlid());
    let ns = c.namespaces().unwrap();
    assert_eq!(ns.len(), 1);
    assert_eq!((ns[0].0, ns[0].1.blocks, ns[0].1.block_size()), (1, 2048, 4096));

    let data = pattern(1 << 20, 7);
    c.write(1, 4096, 8, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    c.read(1, 4096, 8, &mut back).unwrap();
    assert!(back == data, "read back differs");
    assert!(mem.snapshot(8 * 4096, data.len()) == data, "the namespace does not hold the bytes");
    assert!(mem.snapshot(0, 8 * 4096).iter().all(|&b| b == 0), "bytes before LBA 8 changed");
    c.flush(1).unwrap();

    // A read past the end: a typed status, nothing else disturbed.
    let mut tail = vec![0u8; 8192];
    match c.read(1, 4096, 2047, &mut tail) {
        Err(HostError::Status { status, .. }) => assert_eq!(status, Status::LBA_OUT_OF_RANGE),
        other => panic!("read past the end: {other:?}"),
    }
    c.disconnect().unwrap();

    // Another NQN: refused at Connect, naming the field.
    let mut wrong = HostOptions::new("nqn.2026-11.io.roce:nothing-here");
    wrong.hostnqn = o.hostnqn.clone();
    match Controller::connect(&hdev, addr, &wrong) {
        Err(HostError::Status { status, .. }) => assert_eq!(status, Status::CONNECT_INVALID_PARAMETERS),
        other => panic!("unknown NQN: {:?}", other.err()),
    }

    // Reconnect: the bytes are still there.
    let mut c = Controller::connect(&hdev, addr, &o).unwrap();
    let mut again = vec![0u8; 4096];
    c.read(1, 4096, 8, &mut again).unwrap();
    assert_eq!(&again[..], &data[..4096]);
    c.disconnect().unwrap();

    stop.store(true, Ordering::Relaxed);
    server.join().unwrap().unwrap();
    let s = target.stats();
    assert!(s.writes >= 8 && s.reads >= 9, "{s:?}");
    assert_eq!(s.connects_refused, 1, "{s:?}");
}

/// A file namespace: reads and writes of 4 KiB to 1 MiB land in the file
/// and come back, through the target's scratch buffer (a file's read may
/// wait for the disk, so it is not run on the registered slot while the
/// device is held), and a memory namespace's target is the one that serves
/// in place.
#[test]
fn a_file_namespace_is_served_through_a_scratch_buffer() {
    let path = std::env::temp_dir().join(format!("roce-nvmf-loopback-{}.img", std::process::id()));
    let file = Arc::new(FileBackend::create(&path, 8 << 20).unwrap());
    let (target, stop, server) = start_target("127.0.0.26", file.clone());
    assert!(!target.never_blocks(), "a file namespace served in place");
    assert!(Target::new(TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            allowed_hosts: Vec::new(),
            namespaces: vec![Namespace::new(Arc::new(MemBackend::new(1 << 20)), 4096)],
        }],
        ..TargetConfig::default()
    })
    .unwrap()
    .never_blocks());
    let hdev = Device::open(DeviceConfig::new("127.0.0.27:4791".parse().unwrap())).unwrap();
    let o = HostOptions::new(NQN);
    let mut c = once_listening(|| Controller::connect(&hdev, "127.0.0.26:4420".parse().unwrap(), &o));
    for (i, blocks) in [1u32, 8, 32, 256].into_iter().enumerate() {
        let lba = 300 * i as u64;
        let data = pattern(blocks as usize * 4096, i as u64 + 1);
        c.write(1, 4096, lba, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        c.read(1, 4096, lba, &mut back).unwrap();
        assert!(back == data, "{blocks} blocks at {lba}: read back differs");
        let mut on_disk = vec![0u8; data.len()];
        file.read_at(lba * 4096, &mut on_disk).unwrap();
        assert!(on_disk == data, "{blocks} blocks at {lba}: the file does not hold them");
    }
    c.disconnect().unwrap();
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&path);
    let s = target.stats();
    assert!(s.writes >= 4 && s.reads >= 4, "{s:?}");
}

/// A namespace in the target device's registered memory: its blocks go to
/// and come from the host by RDMA straight from and into it (the target
/// registers it with each connection), 4 KiB to the largest transfer,
/// Write Zeroes and deallocation through the device's lock; and the same
/// namespace in the memory of another device, which the target cannot
/// reach by RDMA and serves through its data slots instead.
#[test]
fn a_namespace_in_device_memory_is_read_and_written_by_rdma() {
    for (tip, hip, own) in [("127.0.0.41", "127.0.0.42", true), ("127.0.0.43", "127.0.0.44", false)] {
        let other = Device::open(DeviceConfig::new("127.0.0.45:4791".parse().unwrap())).unwrap();
        let mut made = None;
        let (target, stop, server) = start_target_with(tip, |tdev| {
            let ns = Arc::new(DeviceMem::new(if own { tdev } else { &other }, 8 << 20).unwrap());
            made = Some(ns.clone());
            ns
        });
        let ns = made.unwrap();
        assert!(ns.region().is_some());
        let hdev = Device::open(DeviceConfig::new(SocketAddr::new(hip.parse().unwrap(), 4791))).unwrap();
        let o = HostOptions::new(NQN);
        let addr = SocketAddr::new(tip.parse().unwrap(), 4420);
        let mut c = once_listening(|| Controller::connect(&hdev, addr, &o));
        for (i, blocks) in [1u32, 8, 32].into_iter().enumerate() {
            let lba = 100 + 300 * i as u64;
            let data = pattern(blocks as usize * 4096, i as u64 + 11);
            c.write(1, 4096, lba, &data).unwrap();
            let mut back = vec![0u8; data.len()];
            c.read(1, 4096, lba, &mut back).unwrap();
            assert!(back == data, "own device {own}: {blocks} blocks at {lba}: read back differs");
            let held = ns.snapshot(lba * 4096, data.len()).unwrap();
            assert!(
                held == data,
                "own device {own}: {blocks} blocks at {lba}: the namespace does not hold them"
            );
        }
        assert!(ns.snapshot(0, 100 * 4096).unwrap().iter().all(|&b| b == 0), "bytes before LBA 100 changed");
        let q = &mut c.io_queues()[0];
        let build = |q: &IoQueue, slot: u16| {
            let mut b = sqe(io::WRITE_ZEROES, 1);
            let mut s = Sqe::new_checked(&mut b[..]).unwrap();
            s.set_qword_at(40, 400);
            s.set_dptr(&q.sgl(slot, 0));
            b
        };
        q.exec("Write Zeroes", build, None, None, Duration::from_secs(10)).unwrap();
        assert!(ns.snapshot(400 * 4096, 4096).unwrap().iter().all(|&b| b == 0), "Write Zeroes left bytes");
        assert!(ns.snapshot(401 * 4096, 4096).unwrap().iter().any(|&b| b != 0), "Write Zeroes went too far");
        let mut tail = vec![0u8; 8192];
        match c.read(1, 4096, 2047, &mut tail) {
            Err(HostError::Status { status, .. }) => assert_eq!(status, Status::LBA_OUT_OF_RANGE),
            other => panic!("read past the end: {other:?}"),
        }
        c.disconnect().unwrap();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        let s = target.stats();
        assert!(s.writes >= 3 && s.reads >= 3, "{s:?}");
    }
}

/// Submits a one-block Read or Write of `lba` from a free slot of `q`
/// (one keyed SGL of the slot, sub type address).
fn submit(q: &mut IoQueue, opcode: u8, lba: u64, data: Option<&[u8]>) -> u16 {
    let slot = q.take_slot().expect("a free slot");
    if let Some(d) = data {
        q.fill(slot, d).unwrap();
    }
    let mut b = sqe(opcode, 1);
    let mut s = Sqe::new_checked(&mut b[..]).unwrap();
    s.set_qword_at(40, lba);
    s.set_cdw(2, 0);
    s.set_dptr(&q.sgl(slot, 4096));
    q.submit(slot, b).unwrap();
    slot
}

/// Polls `q` until nothing is outstanding: the completions.
fn drain(q: &mut IoQueue) -> Vec<Done> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    while q.outstanding() > 0 {
        assert!(Instant::now() < deadline, "{} commands never answered", q.outstanding());
        q.poll(Duration::from_millis(100), &mut done).unwrap();
    }
    done
}

#[test]
fn submit_and_poll_at_depth_on_two_queues_with_keep_alive() {
    const DEPTH: u16 = 16;
    let mem = Arc::new(MemBackend::new(4 << 20));
    let (target, stop, server) = start_target("127.0.0.22", mem.clone());
    let hdev = Device::open(DeviceConfig::new("127.0.0.23:4791".parse().unwrap())).unwrap();
    let mut o = HostOptions::new(NQN);
    o.io_queues = 2;
    o.queue_depth = DEPTH;
    // The target ends a controller silent for twice its KATO (0.8 s).
    o.kato_ms = 400;
    let mut c = once_listening(|| Controller::connect(&hdev, "127.0.0.22:4420".parse().unwrap(), &o));
    assert_eq!(c.io_queues().len(), 2);
    let lba = |qi: usize, i: u16| 64 + (qi as u64) * u64::from(DEPTH) + u64::from(i);

    // A full queue of Writes on each queue, then as many Reads: every
    // completion names a command that was out, each slot once.
    for (qi, q) in c.io_queues().iter_mut().enumerate() {
        assert_eq!(q.depth(), DEPTH);
        let mut out = HashMap::new();
        for i in 0..DEPTH {
            let slot = submit(q, io::WRITE, lba(qi, i), Some(&pattern(4096, lba(qi, i))));
            assert!(out.insert(slot, lba(qi, i)).is_none());
        }
        assert_eq!(q.outstanding(), usize::from(DEPTH));
        assert!(q.take_slot().is_none(), "more slots than the depth");
        for d in drain(q) {
            assert!(d.cqe.status.is_success(), "write: {}", d.cqe.status);
            assert!(out.remove(&d.slot).is_some(), "completion for slot {}", d.slot);
        }
        assert!(out.is_empty());
        for i in 0..DEPTH {
            out.insert(submit(q, io::READ, lba(qi, i), None), lba(qi, i));
        }
        for d in drain(q) {
            assert!(d.cqe.status.is_success(), "read: {}", d.cqe.status);
            let at = out.remove(&d.slot).expect("an outstanding slot");
            let mut back = vec![0u8; 4096];
            q.copy_out(d.slot, &mut back).unwrap();
            assert!(back == pattern(4096, at), "LBA {at} read back differs");
        }
    }
    for (qi, i) in (0..2).flat_map(|qi| (0..DEPTH).map(move |i| (qi, i))) {
        assert!(mem.snapshot(lba(qi, i) * 4096, 4096) == pattern(4096, lba(qi, i)));
    }

    // Idle for more than twice the KATO: the Keep Alives hold the controller.
    std::thread::sleep(Duration::from_millis(1500));
    let mut back = vec![0u8; 4096];
    c.read(1, 4096, lba(1, 3), &mut back).unwrap();
    assert!(back == pattern(4096, lba(1, 3)));
    assert_eq!(target.stats().keep_alive_expired, 0);
    assert_eq!(target.controllers().len(), 1);
    assert_eq!(target.controllers()[0].3, 2, "I/O queues of the controller");
    c.disconnect().unwrap();

    stop.store(true, Ordering::Relaxed);
    server.join().unwrap().unwrap();
}

/// The bytes a controller answers a command (by its CID) with.
type Answer = fn(u16) -> Vec<u8>;

/// A controller that accepts one admin queue, takes the host's first
/// capsule (its Connect) and answers it with `answer(cid)`'s bytes.
fn bad_controller(dev: Device, answer: Answer) -> JoinHandle<()> {
    let l = Listener::bind(&dev, 4420).unwrap();
    std::thread::spawn(move || {
        let (id, req) = l.next_request(Some(Duration::from_secs(10))).unwrap();
        let cq = dev.create_cq(64).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let qp = pd
            .create_qp(QpBuilder::rc(&cq).max_send_wr(8).max_recv_wr(8).max_sge(1, 1).max_inline_data(64))
            .unwrap();
        let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::NONE, ..QpAttr::default() };
        qp.modify(&init, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)
            .unwrap();
        let mr = pd.reg_mr(alloc_buffer(SQE_LEN), Access::LOCAL_WRITE).unwrap();
        qp.post_recv(RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, SQE_LEN as u32)] }).unwrap();
        let opts = AcceptOpts {
            private_data: RepPrivate { recfmt: 0, crqsize: 32 }.emit().to_vec(),
            responder_resources: 0,
            initiator_depth: req.responder_resources.min(16),
            rnr_retry_count: 7,
        };
        let mut conn = l.accept_request(id, req, qp, &opts, Some(Duration::from_secs(10))).unwrap();
        let mut wcs = [Wc::EMPTY; 4];
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(Instant::now() < deadline, "no capsule from the host");
            let n = conn.qp().recv_cq().wait(&mut wcs, Duration::from_millis(100)).unwrap_or(0);
            if wcs[..n].iter().any(|w| w.wr_id == 1) {
                break;
            }
        }
        let mut capsule = [0u8; SQE_LEN];
        mr.read(0, &mut capsule).unwrap();
        let cid = Sqe::new_checked(&capsule[..]).unwrap().cid();
        let bytes = answer(cid);
        let mut wr = SendWr::new(2, SendOp::Send, vec![Sge { addr: 0, length: bytes.len() as u32, lkey: 0 }]);
        wr.inline = true;
        conn.qp().post_send_inline(wr, &bytes).unwrap();
        // Until the host, having refused the answer, disconnects.
        let _ = conn.wait_disconnected(Some(Duration::from_secs(10)));
    })
}

#[test]
fn a_wrong_answer_is_a_protocol_error_not_a_panic() {
    let tdev = Device::open(DeviceConfig::new("127.0.0.24:4791".parse().unwrap())).unwrap();
    let hdev = Device::open(DeviceConfig::new("127.0.0.25:4791".parse().unwrap())).unwrap();
    let mut o = HostOptions::new(NQN);
    o.timeout = Duration::from_secs(5);
    let cases: [(Answer, &str); 2] = [
        // A success for a command the host never sent.
        (|cid| Cqe::new(cid.wrapping_add(7), Status::SUCCESS).emit().to_vec(), "not outstanding"),
        // Half a CQE.
        (|cid| Cqe::new(cid, Status::SUCCESS).emit()[..8].to_vec(), "a response of 8 bytes"),
    ];
    for (answer, says) in cases {
        let fake = bad_controller(tdev.clone(), answer);
        match Controller::connect(&hdev, "127.0.0.24:4420".parse().unwrap(), &o) {
            Err(HostError::Protocol(m)) => assert!(m.contains(says), "{m}"),
            Err(e) => panic!("expected a protocol error ({says}), got {e}"),
            Ok(_) => panic!("expected a protocol error ({says}), connected"),
        }
        fake.join().unwrap();
    }
}
