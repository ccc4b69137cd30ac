//! The target against a scripted host: host memory is a map of keys to
//! buffers, Fetch and Deliver are served from it, and every answer is
//! checked (status, CQE fields, the namespace's bytes).

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::namespace::{Backend, MemBackend};
use crate::wire::fabrics::{
    connect_data, fctype, property, rej_status, Connect, ConnectData, PropertyCmd, ReqPrivate,
};
use crate::wire::identify::{cns, parse_discovery_log, ControllerInfo, NamespaceInfo};
use crate::wire::{admin as op, feature, io, log, Cqe, Sgl, Sqe, Status, DISCOVERY_NQN, SQE_LEN};

const NQN: &str = "nqn.2026-11.io.roce:test";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:host-a";
const MS: u64 = 1_000_000;

/// One host: its memory (key -> bytes at address 0) and its queues.
struct Host {
    mem: HashMap<u32, Vec<u8>>,
    next_key: u32,
    cid: u16,
}

impl Host {
    fn new() -> Host {
        Host { mem: HashMap::new(), next_key: 0x100, cid: 0 }
    }

    /// A keyed SGL over a new buffer holding `data`.
    fn buffer(&mut self, data: Vec<u8>) -> Sgl {
        let key = self.next_key;
        self.next_key += 1;
        let len = data.len() as u32;
        self.mem.insert(key, data);
        Sgl::Keyed { addr: 0, len, key, invalidate: true }
    }

    fn sqe(&mut self, opcode: u8, nsid: u32, sgl: Sgl) -> [u8; SQE_LEN] {
        let mut b = [0u8; SQE_LEN];
        let mut s = Sqe::new_checked(&mut b[..]).unwrap();
        s.set_opcode(opcode);
        s.set_flags(0x40);
        self.cid += 1;
        s.set_cid(self.cid);
        s.set_nsid(nsid);
        s.set_dptr(&sgl);
        b
    }

    /// Runs a capsule to its response, serving the target's data moves.
    fn run(&mut self, q: &mut Queue, now: u64, capsule: &[u8]) -> Option<Cqe> {
        let mut buf = vec![0u8; q.buffer_len()];
        let mut step = q.command(now, capsule, &mut buf);
        loop {
            match step {
                Step::Respond(r) => return Some(r.cqe),
                // A key the host never gave reads as zeroes and takes
                // nothing (a real NIC would NAK it; the target cannot tell).
                Step::Fetch { addr, key, len } => {
                    let data = match self.mem.get(&key) {
                        Some(m) => m[addr as usize..addr as usize + len as usize].to_vec(),
                        None => vec![0; len as usize],
                    };
                    step = q.data_in(now, capsule, &data);
                }
                Step::Deliver { addr, key, len, response } => {
                    if let Some(m) = self.mem.get_mut(&key) {
                        m[addr as usize..addr as usize + len as usize].copy_from_slice(&buf[..len as usize]);
                    }
                    return Some(response.cqe);
                }
                Step::Parked | Step::Fatal(_) => return None,
            }
        }
    }

    fn connect(&mut self, q: &mut Queue, now: u64, nqn: &str, host: &str, cntlid: u16, kato: u32) -> Cqe {
        let data = ConnectData { hostid: [9; 16], cntlid, subnqn: nqn.into(), hostnqn: host.into() }.emit();
        let sgl = self.buffer(data);
        let mut b = self.sqe(op::FABRICS, 0, sgl);
        let sqsize = q.crqsize() - 1;
        Connect { recfmt: 0, qid: q.qid(), sqsize, cattr: 0, kato }
            .emit(&mut Sqe::new_checked(&mut b[..]).unwrap());
        self.run(q, now, &b).unwrap()
    }

    fn property(&mut self, q: &mut Queue, now: u64, set: Option<u64>, offset: u32, size8: bool) -> Cqe {
        let mut b = self.sqe(op::FABRICS, 0, Sgl::NULL);
        let t = if set.is_some() { fctype::PROPERTY_SET } else { fctype::PROPERTY_GET };
        PropertyCmd { size8, offset, value: set.unwrap_or(0) }
            .emit(&mut Sqe::new_checked(&mut b[..]).unwrap(), t);
        self.run(q, now, &b).unwrap()
    }

    fn enable(&mut self, q: &mut Queue, now: u64) {
        assert_eq!(
            self.property(q, now, Some(1 | 6 << 16 | 4 << 20), property::CC, false).status,
            Status::SUCCESS
        );
        assert_eq!(self.property(q, now, None, property::CSTS, false).dw0 & 1, 1);
    }

    /// A command with host-to-controller or controller-to-host data of `len`.
    fn data_cmd(
        &mut self,
        q: &mut Queue,
        now: u64,
        opcode: u8,
        nsid: u32,
        cdw: &[(usize, u32)],
        data: Vec<u8>,
    ) -> (Cqe, Vec<u8>) {
        let sgl = self.buffer(data);
        let key = match sgl {
            Sgl::Keyed { key, .. } => key,
            _ => unreachable!(),
        };
        let mut b = self.sqe(opcode, nsid, sgl);
        for &(i, v) in cdw {
            Sqe::new_checked(&mut b[..]).unwrap().set_cdw(i, v);
        }
        let cqe = self.run(q, now, &b).unwrap();
        (cqe, self.mem.remove(&key).unwrap())
    }

    fn rw(
        &mut self,
        q: &mut Queue,
        now: u64,
        opcode: u8,
        lba: u64,
        nlb: u32,
        data: Vec<u8>,
    ) -> (Cqe, Vec<u8>) {
        self.data_cmd(q, now, opcode, 1, &[(0, lba as u32), (1, (lba >> 32) as u32), (2, nlb - 1)], data)
    }
}

fn target(allowed: &[&str], mem: Arc<MemBackend>) -> Arc<Target> {
    let cfg = TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            allowed_hosts: allowed.iter().map(|s| s.to_string()).collect(),
            namespaces: vec![Namespace::new(mem, 4096)],
        }],
        traddr: "10.0.0.1".into(),
        ..TargetConfig::default()
    };
    Arc::new(Target::new(cfg).unwrap())
}

fn admin_queue(t: &Arc<Target>) -> Queue {
    Queue::accept(t.clone(), &ReqPrivate { recfmt: 0, qid: 0, hrqsize: 32, hsqsize: 31, cntlid: 0 }).unwrap()
}

fn io_queue(t: &Arc<Target>, qid: u16) -> Queue {
    Queue::accept(t.clone(), &ReqPrivate { recfmt: 0, qid, hrqsize: 128, hsqsize: 127, cntlid: 0 }).unwrap()
}

/// Admin queue connected and enabled, one I/O queue connected.
fn bring_up(h: &mut Host, t: &Arc<Target>, kato: u32) -> (Queue, Queue, u16) {
    let mut a = admin_queue(t);
    let c = h.connect(&mut a, 0, NQN, HOST, 0xFFFF, kato);
    assert_eq!(c.status, Status::SUCCESS);
    let cntlid = c.dw0 as u16;
    h.enable(&mut a, 0);
    let mut q = io_queue(t, 1);
    assert_eq!(h.connect(&mut q, 0, NQN, HOST, cntlid, 0).status, Status::SUCCESS);
    (a, q, cntlid)
}

#[test]
fn a_linux_host_brings_the_controller_up_and_moves_data() {
    let mem = Arc::new(MemBackend::new(1 << 20));
    let t = target(&[], mem.clone());
    let mut h = Host::new();
    let mut a = admin_queue(&t);
    let c = h.connect(&mut a, 0, NQN, HOST, 0xFFFF, 5000);
    assert_eq!((c.status, c.sqid), (Status::SUCCESS, 0));
    let cntlid = c.dw0 as u16;
    assert_ne!(cntlid, 0);
    let cap = h.property(&mut a, 0, None, property::CAP, true);
    let cap = u64::from(cap.dw0) | u64::from(cap.dw1) << 32;
    assert_eq!((cap & 0xffff, cap >> 37 & 1), (1023, 1));
    assert_eq!(h.property(&mut a, 0, None, property::VS, false).dw0, 0x10300);
    h.enable(&mut a, 0);
    let (c, id) = h.data_cmd(&mut a, 0, op::IDENTIFY, 0, &[(0, u32::from(cns::CONTROLLER))], vec![0; 4096]);
    assert_eq!(c.status, Status::SUCCESS);
    let info = ControllerInfo::parse(&id).unwrap();
    assert_eq!(
        (info.cntlid, info.subnqn.as_str(), info.icdoff, info.sgls & 4, info.nn),
        (cntlid, NQN, 0, 4, 1)
    );
    let (_, nsd) = h.data_cmd(&mut a, 0, op::IDENTIFY, 1, &[(0, u32::from(cns::NAMESPACE))], vec![0; 4096]);
    let ns = NamespaceInfo::parse(&nsd).unwrap();
    assert_eq!((ns.blocks, ns.block_size()), (256, 4096));
    let (_, list) =
        h.data_cmd(&mut a, 0, op::IDENTIFY, 0, &[(0, u32::from(cns::ACTIVE_NS_LIST))], vec![0; 4096]);
    assert_eq!(&list[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    let (c, desc) =
        h.data_cmd(&mut a, 0, op::IDENTIFY, 1, &[(0, u32::from(cns::NS_DESCRIPTORS))], vec![0; 4096]);
    assert_eq!((c.status, desc[0], desc[1], &desc[4..20]), (Status::SUCCESS, 2, 16, &ns.nguid[..]));
    let mut b = h.sqe(op::SET_FEATURES, 0, Sgl::NULL);
    Sqe::new_checked(&mut b[..]).unwrap().set_cdw(0, u32::from(feature::NUMBER_OF_QUEUES));
    Sqe::new_checked(&mut b[..]).unwrap().set_cdw(1, 3 | 3 << 16);
    assert_eq!(h.run(&mut a, 0, &b).unwrap().dw0, 3 | 3 << 16);

    let mut q = io_queue(&t, 1);
    let c = h.connect(&mut q, 0, NQN, HOST, cntlid, 0);
    assert_eq!((c.status, c.dw0 as u16, c.sqid), (Status::SUCCESS, cntlid, 1));
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    let (c, _) = h.rw(&mut q, 0, io::WRITE, 2, 2, data.clone());
    assert_eq!((c.status, c.sqhd, c.sqid), (Status::SUCCESS, 2, 1));
    assert_eq!(mem.snapshot(2 * 4096, 8192), data);
    assert!(mem.snapshot(0, 8192).iter().all(|&b| b == 0));
    let (c, back) = h.rw(&mut q, 0, io::READ, 2, 2, vec![0; 8192]);
    assert_eq!((c.status, back == data), (Status::SUCCESS, true));
    assert_eq!(c.cid, h.cid);
    // Write Zeroes and Dataset Management (deallocate reads as zeroes).
    let mut b = h.sqe(io::WRITE_ZEROES, 1, Sgl::NULL);
    Sqe::new_checked(&mut b[..]).unwrap().set_cdw(0, 2);
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::SUCCESS);
    assert!(mem.snapshot(2 * 4096, 4096).iter().all(|&b| b == 0));
    assert_eq!(mem.snapshot(3 * 4096, 4096), data[4096..]);
    let s = t.stats();
    assert_eq!((s.writes, s.reads, s.bytes_written, s.errors), (1, 1, 8192, 0));
}

#[test]
fn bad_input_gets_a_status_and_moves_no_byte() {
    let mem = Arc::new(MemBackend::new(1 << 20));
    let t = target(&[HOST], mem.clone());
    let mut h = Host::new();
    // The access list and the subsystem's name.
    let mut a = admin_queue(&t);
    assert_eq!(
        h.connect(&mut a, 0, NQN, "nqn.2014-08.org.nvmexpress:uuid:other", 0xFFFF, 0).status,
        Status::CONNECT_INVALID_HOST
    );
    let mut a = admin_queue(&t);
    let c = h.connect(&mut a, 0, "nqn.2026-11.io.roce:nope", HOST, 0xFFFF, 0);
    assert_eq!(
        (c.status, c.dw0),
        (Status::CONNECT_INVALID_PARAMETERS, 1 << 16 | u32::from(connect_data::SUBNQN))
    );
    // Before Connect, and before CC.EN.
    let mut q = io_queue(&t, 1);
    assert_eq!(h.rw(&mut q, 0, io::READ, 0, 1, vec![0; 4096]).0.status, Status::COMMAND_SEQUENCE_ERROR);
    let mut a = admin_queue(&t);
    let cntlid = h.connect(&mut a, 0, NQN, HOST, 0xFFFF, 0).dw0 as u16;
    let (c, _) = h.data_cmd(&mut a, 0, op::IDENTIFY, 0, &[(0, 1)], vec![0; 4096]);
    assert_eq!(c.status, Status::COMMAND_SEQUENCE_ERROR);
    h.enable(&mut a, 0);
    // I/O Connect naming another controller, another host, or a QID
    // above the grant.
    let mut q = io_queue(&t, 1);
    assert_eq!(h.connect(&mut q, 0, NQN, HOST, cntlid + 1, 0).status, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(
        h.connect(&mut q, 0, NQN, "nqn.2014-08.org.nvmexpress:uuid:x", cntlid, 0).status,
        Status::CONNECT_INVALID_HOST
    );
    let mut b = h.sqe(op::SET_FEATURES, 0, Sgl::NULL);
    Sqe::new_checked(&mut b[..]).unwrap().set_cdw(0, u32::from(feature::NUMBER_OF_QUEUES));
    assert_eq!(h.run(&mut a, 0, &b).unwrap().dw0, 0);
    let mut q2 = io_queue(&t, 2);
    assert_eq!(h.connect(&mut q2, 0, NQN, HOST, cntlid, 0).status, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(h.connect(&mut q, 0, NQN, HOST, cntlid, 0).status, Status::SUCCESS);
    // The RDMA CM private data.
    let rej = |p: ReqPrivate| Queue::accept(t.clone(), &p).err();
    assert_eq!(
        rej(ReqPrivate { recfmt: 1, qid: 0, hrqsize: 32, hsqsize: 31, cntlid: 0 }),
        Some(rej_status::INVALID_RECFMT)
    );
    assert_eq!(
        rej(ReqPrivate { recfmt: 0, qid: 0, hrqsize: 32, hsqsize: 63, cntlid: 0 }),
        Some(rej_status::INVALID_HSQSIZE)
    );
    assert_eq!(
        rej(ReqPrivate { recfmt: 0, qid: 1, hrqsize: 0, hsqsize: 31, cntlid: 0 }),
        Some(rej_status::INVALID_HRQSIZE)
    );
    assert_eq!(
        rej(ReqPrivate { recfmt: 0, qid: 999, hrqsize: 8, hsqsize: 7, cntlid: 0 }),
        Some(rej_status::INVALID_QID)
    );

    let before = mem.snapshot(0, 1 << 20);
    // LBA out of range, also where slba + nlb overflows.
    assert_eq!(h.rw(&mut q, 0, io::WRITE, 255, 2, vec![1; 8192]).0.status, Status::LBA_OUT_OF_RANGE);
    assert_eq!(h.rw(&mut q, 0, io::WRITE, u64::MAX, 1, vec![1; 4096]).0.status, Status::LBA_OUT_OF_RANGE);
    // The SGL's length must be the blocks'.
    assert_eq!(h.rw(&mut q, 0, io::WRITE, 0, 2, vec![1; 4096]).0.status, Status::DATA_SGL_LENGTH_INVALID);
    assert_eq!(h.rw(&mut q, 0, io::READ, 0, 1, vec![1; 8192]).0.status, Status::DATA_SGL_LENGTH_INVALID);
    // An unknown namespace, an unknown opcode.
    assert_eq!(h.data_cmd(&mut q, 0, io::WRITE, 2, &[], vec![1; 4096]).0.status, Status::INVALID_NAMESPACE);
    assert_eq!(h.data_cmd(&mut q, 0, 0x7e, 1, &[], vec![1; 4096]).0.status, Status::INVALID_OPCODE);
    // A descriptor type NVMe/RDMA does not take, PRPs, a fused command.
    let mut b = h.sqe(io::WRITE, 1, Sgl::NULL);
    b[39] = 0x20;
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::SGL_TYPE_INVALID);
    let mut b = h.sqe(io::WRITE, 1, Sgl::NULL);
    b[1] = 0;
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::INVALID_FIELD);
    b[1] = 0x41;
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::INVALID_FIELD);
    // In-capsule data that is not in the capsule; on the admin queue.
    let mut b = h.sqe(io::WRITE, 1, Sgl::InCapsule { offset: 0, len: 4096 }).to_vec();
    b.extend_from_slice(&[7; 100]);
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::DATA_SGL_LENGTH_INVALID);
    let mut b = h.sqe(op::IDENTIFY, 0, Sgl::InCapsule { offset: 0, len: 16 }).to_vec();
    b.extend_from_slice(&[7; 16]);
    assert_eq!(h.run(&mut a, 0, &b).unwrap().status, Status::DATA_SGL_LENGTH_INVALID);
    // A capsule shorter than an SQE ends the connection.
    let mut buf = vec![0u8; q.buffer_len()];
    assert!(matches!(q.command(0, &[0u8; 40], &mut buf), Step::Fatal(_)));
    assert!(mem.snapshot(0, 1 << 20) == before, "a refused command changed the namespace");
    // In-capsule data that fits is written.
    let mut b = h.sqe(io::WRITE, 1, Sgl::InCapsule { offset: 0, len: 4096 }).to_vec();
    b.extend_from_slice(&[5; 4096]);
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::SUCCESS);
    assert!(mem.snapshot(0, 4096).iter().all(|&x| x == 5));
}

#[test]
fn a_silent_host_loses_its_controller_after_twice_its_kato() {
    let t = target(&[], Arc::new(MemBackend::new(1 << 20)));
    let mut h = Host::new();
    let (mut a, mut q, cntlid) = bring_up(&mut h, &t, 1000);
    assert_eq!(t.poll_timeout(), Some(2000 * MS));
    assert!(t.expire(1999 * MS).is_empty());
    // A Keep Alive at 1.5 s moves the deadline to 3.5 s.
    let b = h.sqe(op::KEEP_ALIVE, 0, Sgl::NULL);
    assert_eq!(h.run(&mut a, 1500 * MS, &b).unwrap().status, Status::SUCCESS);
    assert!(t.expire(3499 * MS).is_empty());
    assert!(a.alive() && q.alive());
    assert_eq!(t.expire(3500 * MS), vec![cntlid]);
    assert!(!a.alive() && !q.alive());
    assert_eq!(h.rw(&mut q, 3600 * MS, io::READ, 0, 1, vec![0; 4096]).0.status, Status::ABORTED_SQ_DELETION);
    assert_eq!(t.stats().keep_alive_expired, 1);
    // Without a KATO nothing expires; closing the admin queue ends it.
    let (mut a2, q2, c2) = bring_up(&mut h, &t, 0);
    assert!(t.expire(u64::MAX / 2).is_empty() && t.is_alive(c2));
    a2.close();
    assert!(!t.is_alive(c2) && !q2.alive());
}

#[test]
fn discovery_lists_what_the_host_may_reach() {
    for (allowed, n) in [(vec![], 1), (vec!["nqn.2014-08.org.nvmexpress:uuid:someone-else"], 0)] {
        let t = target(&allowed, Arc::new(MemBackend::new(1 << 20)));
        let mut h = Host::new();
        let mut a = admin_queue(&t);
        assert_eq!(h.connect(&mut a, 0, DISCOVERY_NQN, HOST, 0xFFFF, 0).status, Status::SUCCESS);
        h.enable(&mut a, 0);
        let get = |h: &mut Host, a: &mut Queue, len: u32| {
            let numd = len / 4 - 1;
            h.data_cmd(
                a,
                0,
                op::GET_LOG_PAGE,
                0,
                &[(0, u32::from(log::DISCOVERY) | numd << 16)],
                vec![0; len as usize],
            )
        };
        let (c, head) = get(&mut h, &mut a, 1024);
        assert_eq!(c.status, Status::SUCCESS);
        assert_eq!(parse_discovery_log(&head).unwrap().1, n);
        let (_, page) = get(&mut h, &mut a, 2048);
        let (_, _, e) = parse_discovery_log(&page).unwrap();
        assert_eq!(e.len(), n as usize);
        if n == 1 {
            assert_eq!(
                (e[0].subnqn.as_str(), e[0].traddr.as_str(), e[0].trsvcid.as_str()),
                (NQN, "10.0.0.1", "4420")
            );
        }
        // A discovery controller has no I/O queues.
        let cntlid = a.cntlid().unwrap();
        let mut q = io_queue(&t, 1);
        assert_eq!(
            h.connect(&mut q, 0, DISCOVERY_NQN, HOST, cntlid, 0).status,
            Status::CONNECT_INVALID_PARAMETERS
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Hostile capsules never panic, and only a Write, Write Zeroes or
    /// Dataset Management may change the namespace.
    #[test]
    fn random_capsules_never_panic(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..4200),
        admin: bool,
        shape in 0u8..4,
        opcode in prop_oneof![Just(0x01u8), Just(0x02), Just(0x08), Just(0x09), Just(0x06), Just(0x02), Just(0x7f), any::<u8>()],
    ) {
        // Most capsules look like commands (SGL flags, a keyed or
        // in-capsule descriptor, a plausible opcode, NSID 1), so that the
        // handlers' checks are what refuses them.
        if bytes.len() >= SQE_LEN && shape > 0 {
            bytes[0] = opcode;
            bytes[1] = 0x40;
            bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
            bytes[39] = [0x40, 0x4F, 0x01][usize::from(shape - 1)];
        }
        let mem = Arc::new(MemBackend::new(1 << 20));
        let t = target(&[], mem.clone());
        let mut h = Host::new();
        let (mut a, mut q, _) = bring_up(&mut h, &t, 0);
        let before = mem.snapshot(0, 1 << 20);
        let queue = if admin { &mut a } else { &mut q };
        let _ = h.run(queue, 0, &bytes);
        let writes = !admin && bytes.len() >= SQE_LEN && matches!(bytes[0], io::WRITE | io::WRITE_ZEROES | io::DATASET_MANAGEMENT);
        if !writes {
            prop_assert!(mem.snapshot(0, 1 << 20) == before);
        }
        prop_assert_eq!(mem.len(), 1 << 20);
    }
}
