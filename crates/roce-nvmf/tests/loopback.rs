//! roce's initiator against roce's target on loopback (two devices, each
//! owning UDP 4791 of its own address, as the RDMA CM requires): discovery,
//! connect, Identify, 1 MiB written and read back, the bytes in the
//! target's namespace, errors the host sees as typed statuses, disconnect
//! and reconnect.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use roce::{Device, DeviceConfig};
use roce_nvmf::initiator::{discover, pattern, Controller, HostError, HostOptions};
use roce_nvmf::namespace::MemBackend;
use roce_nvmf::server::{serve, Log};
use roce_nvmf::target::{Namespace, SubsystemConfig, Target, TargetConfig};
use roce_nvmf::wire::Status;

const NQN: &str = "nqn.2026-11.io.roce:loopback";

#[test]
fn our_initiator_against_our_target() {
    let mem = Arc::new(MemBackend::new(8 << 20));
    let cfg = TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            allowed_hosts: Vec::new(),
            namespaces: vec![Namespace::new(mem.clone(), 4096)],
        }],
        traddr: "127.0.0.2".into(),
        ..TargetConfig::default()
    };
    let target = Arc::new(Target::new(cfg).unwrap());
    let tdev = Device::open(DeviceConfig::new("127.0.0.2:4791".parse().unwrap())).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::new(|m: &str| eprintln!("target: {m}"));
    let server = {
        let (t, s, d) = (target.clone(), stop.clone(), tdev.clone());
        std::thread::spawn(move || serve(&d, t, 4420, &s, log))
    };
    let hdev = Device::open(DeviceConfig::new("127.0.0.3:4791".parse().unwrap())).unwrap();
    let addr: SocketAddr = "127.0.0.2:4420".parse().unwrap();
    let o = HostOptions::new(NQN);

    let entries = discover(&hdev, addr, &o.hostnqn, Duration::from_secs(10)).unwrap();
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
