//! The target against a scripted host: host memory is a map of keys to
//! buffers, Fetch and Deliver are served from it, and every answer is
//! checked (status, CQE fields, the steps taken, the namespace's bytes).

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::namespace::{Backend, MemBackend};
use crate::wire::fabrics::{
    connect_data, fctype, property, rej_status, Connect, ConnectData, PropertyCmd, ReqPrivate,
};
use crate::wire::identify::{cns, cntrltype, parse_discovery_log, ControllerInfo, NamespaceInfo};
use crate::wire::{admin as op, feature, io, log, Cqe, Sgl, Sqe, Status, DISCOVERY_NQN, FLAGS_SGL, SQE_LEN};
use roce::MemBuf;

const NQN: &str = "nqn.2026-11.io.roce:test";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:host-a";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:host-b";
const MS: u64 = 1_000_000;
const MIB: usize = 1 << 20;

/// One host: its memory (key -> bytes at address 0), its CIDs, and the
/// steps the target took for the last command.
struct Host {
    mem: HashMap<u32, Vec<u8>>,
    next_key: u32,
    cid: u16,
    last: Vec<Step>,
    /// The namespace a step naming one ([`Place::Namespace`]) moves data
    /// to or from, as the driver's RDMA does.
    ns: Option<Arc<dyn Backend>>,
}

/// `addr .. addr + len` of a host buffer, if it is inside.
fn window(m: &[u8], addr: u64, len: u32) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(addr).ok()?;
    let end = start.checked_add(len as usize)?;
    (end <= m.len()).then_some(start..end)
}

fn set_cdw(b: &mut [u8], i: usize, v: u32) {
    Sqe::new_checked(b).unwrap().set_cdw(i, v);
}

impl Host {
    fn new() -> Host {
        Host { mem: HashMap::new(), next_key: 0x100, cid: 0, last: Vec::new(), ns: None }
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
        s.set_flags(FLAGS_SGL);
        self.cid += 1;
        s.set_cid(self.cid);
        s.set_nsid(nsid);
        s.set_dptr(&sgl);
        b
    }

    /// Runs a capsule to its response, serving the target's data moves as
    /// the RDMA driver would. `None`: parked or fatal (see `self.last`).
    fn run(&mut self, q: &mut Queue, now: u64, capsule: &[u8]) -> Option<Cqe> {
        self.last.clear();
        let mut buf = vec![0u8; q.buffer_len()];
        let mut step = q.command(now, capsule, &mut buf);
        loop {
            self.last.push(step);
            match step {
                Step::Respond(r) => return Some(r.cqe),
                // A key the host never gave (or a window outside its
                // buffer) reads as zeroes and takes nothing: a real NIC
                // would NAK it, which the target cannot tell apart.
                Step::Fetch { addr, key, len, into } => {
                    let data = match self.mem.get(&key) {
                        Some(m) => window(m, addr, len).map(|r| m[r].to_vec()),
                        None => None,
                    };
                    let data = data.unwrap_or_else(|| vec![0; len as usize]);
                    step = match into {
                        Place::Buffer => q.data_in(now, capsule, &data),
                        Place::Namespace { offset, .. } => {
                            self.ns.as_ref().expect("a namespace").write_at(offset, &data).unwrap();
                            q.data_placed(now, capsule)
                        }
                    };
                }
                Step::Deliver { addr, key, len, from, response } => {
                    let data = match from {
                        Place::Buffer => buf[..len as usize].to_vec(),
                        Place::Namespace { offset, .. } => {
                            let mut d = vec![0u8; len as usize];
                            self.ns.as_ref().expect("a namespace").read_at(offset, &mut d).unwrap();
                            d
                        }
                    };
                    if let Some(m) = self.mem.get_mut(&key) {
                        if let Some(r) = window(m, addr, len) {
                            m[r].copy_from_slice(&data);
                        }
                    }
                    return Some(response.cqe);
                }
                Step::Parked | Step::Fatal(_) => return None,
            }
        }
    }

    /// Connect on `q`; on an I/O queue with `inline`, the data in the
    /// capsule (as Linux sends it once SGLS bit 20 is set).
    #[allow(clippy::too_many_arguments)]
    fn connect_with(
        &mut self,
        q: &mut Queue,
        now: u64,
        nqn: &str,
        host: &str,
        cntlid: u16,
        kato: u32,
        inline: bool,
    ) -> Cqe {
        let data = ConnectData { hostid: [9; 16], cntlid, subnqn: nqn.into(), hostnqn: host.into() }.emit();
        let sgl = if inline {
            Sgl::InCapsule { offset: 0, len: data.len() as u32 }
        } else {
            self.buffer(data.clone())
        };
        let mut b = self.sqe(op::FABRICS, 0, sgl).to_vec();
        let sqsize = q.crqsize() - 1;
        Connect { recfmt: 0, qid: q.qid(), sqsize, cattr: 0, kato }
            .emit(&mut Sqe::new_checked(&mut b[..]).unwrap());
        if inline {
            b.extend_from_slice(&data);
        }
        self.run(q, now, &b).unwrap()
    }

    fn connect(&mut self, q: &mut Queue, now: u64, nqn: &str, host: &str, cntlid: u16, kato: u32) -> Cqe {
        self.connect_with(q, now, nqn, host, cntlid, kato, false)
    }

    fn property(&mut self, q: &mut Queue, now: u64, set: Option<u64>, offset: u32, size8: bool) -> Cqe {
        let mut b = self.sqe(op::FABRICS, 0, Sgl::NULL);
        let t = if set.is_some() { fctype::PROPERTY_SET } else { fctype::PROPERTY_GET };
        PropertyCmd { size8, offset, value: set.unwrap_or(0) }
            .emit(&mut Sqe::new_checked(&mut b[..]).unwrap(), t);
        self.run(q, now, &b).unwrap()
    }

    /// CC.EN = 1 with IOSQES 6 and IOCQES 4, then CSTS.RDY must be 1.
    fn enable(&mut self, q: &mut Queue, now: u64) {
        let cc = 1 | 6 << 16 | 4 << 20;
        assert_eq!(self.property(q, now, Some(cc), property::CC, false).status, Status::SUCCESS);
        assert_eq!(self.property(q, now, None, property::CSTS, false).dw0 & 1, 1, "CSTS.RDY");
    }

    /// A command with data of `data.len()` bytes in a new host buffer;
    /// returns the answer and the buffer afterwards.
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
        let Sgl::Keyed { key, .. } = sgl else { unreachable!() };
        let mut b = self.sqe(opcode, nsid, sgl);
        for &(i, v) in cdw {
            set_cdw(&mut b, i, v);
        }
        let cqe = self.run(q, now, &b).unwrap();
        (cqe, self.mem.remove(&key).unwrap())
    }

    /// A Read or Write of `nlb` blocks at `lba` (`data`: what the host's
    /// buffer holds, whose length is the SGL's).
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

    fn identify(&mut self, q: &mut Queue, cns: u8, nsid: u32) -> (Cqe, Vec<u8>) {
        self.data_cmd(q, 0, op::IDENTIFY, nsid, &[(0, u32::from(cns))], vec![0; 4096])
    }

    /// Set Features Number of Queues (0's based counts).
    fn set_queues(&mut self, q: &mut Queue, nsq: u32, ncq: u32) -> Cqe {
        let mut b = self.sqe(op::SET_FEATURES, 0, Sgl::NULL);
        set_cdw(&mut b, 0, u32::from(feature::NUMBER_OF_QUEUES));
        set_cdw(&mut b, 1, nsq | ncq << 16);
        self.run(q, 0, &b).unwrap()
    }
}

fn target_bs(allowed: &[&str], mem: Arc<dyn Backend>, block: u32) -> Arc<Target> {
    let cfg = TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            allowed_hosts: allowed.iter().map(|s| s.to_string()).collect(),
            namespaces: vec![Namespace::new(mem, block)],
        }],
        traddr: "10.0.0.1".into(),
        trsvcid: 4421,
        ..TargetConfig::default()
    };
    Arc::new(Target::new(cfg).unwrap())
}

fn target(allowed: &[&str], mem: Arc<MemBackend>) -> Arc<Target> {
    target_bs(allowed, mem, 4096)
}

/// The RDMA CM request of the Linux host's admin queue.
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

/// A memory namespace that lends its memory to the NIC: `region` stands
/// for the registered buffer (the harness moves a namespace's data through
/// `read_at`/`write_at`, where the driver's RDMA would).
struct Lent {
    mem: MemBackend,
    region: Arc<MemBuf>,
}

impl Backend for Lent {
    fn len(&self) -> u64 {
        self.mem.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.mem.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.mem.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        "lent".into()
    }
    fn region(&self) -> Option<&Arc<MemBuf>> {
        Some(&self.region)
    }
}

/// A namespace whose memory the driver reaches has its blocks moved by
/// RDMA alone: a Write's READ names the namespace at the blocks' offset
/// and the command finishes once the data is placed; a Read's WRITE names
/// it too. The checks before are the same: out of range moves nothing.
/// Until the driver says it reaches it (`Queue::reach`), the data goes
/// through the command's buffer.
#[test]
fn a_namespace_the_driver_reaches_has_no_data_copied() {
    let lent = Arc::new(Lent { mem: MemBackend::new(MIB as u64), region: MemBuf::new(1) });
    let t = target_bs(&[], lent.clone(), 4096);
    let mut h = Host::new();
    h.ns = Some(lent.clone());
    let (_a, mut q, _) = bring_up(&mut h, &t, 0);
    let (c, _) = h.rw(&mut q, 0, io::READ, 2, 2, vec![0; 8192]);
    assert_eq!(c.status, Status::SUCCESS);
    assert!(matches!(h.last[..], [Step::Deliver { from: Place::Buffer, .. }]));
    q.reach(0, 0);
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 13 + 1) as u8).collect();
    let (c, _) = h.rw(&mut q, 0, io::WRITE, 2, 2, data.clone());
    assert_eq!(c.status, Status::SUCCESS);
    let here = Place::Namespace { subsys: 0, ns: 0, offset: 8192 };
    assert!(matches!(h.last[..], [Step::Fetch { len: 8192, into, .. }, Step::Respond(_)] if into == here));
    assert_eq!(lent.mem.snapshot(8192, 8192), data);
    let (c, back) = h.rw(&mut q, 0, io::READ, 2, 2, vec![0; 8192]);
    assert_eq!(c.status, Status::SUCCESS);
    assert!(matches!(h.last[..], [Step::Deliver { len: 8192, from, .. }] if from == here));
    assert!(back == data, "read back differs");
    let (c, back) = h.rw(&mut q, 0, io::READ, 255, 2, vec![9; 8192]);
    assert_eq!(c.status, Status::LBA_OUT_OF_RANGE);
    assert!(matches!(h.last[..], [Step::Respond(_)]));
    assert!(back.iter().all(|&b| b == 9), "an out-of-range read moved data");
    let s = t.stats();
    assert_eq!((s.reads, s.writes, s.bytes_read, s.bytes_written), (2, 1, 16384, 8192));
}

#[test]
fn a_linux_host_brings_the_controller_up_and_moves_data() {
    for bs in [4096usize, 512] {
        let mem = Arc::new(MemBackend::new(MIB as u64));
        let t = target_bs(&[], mem.clone(), bs as u32);
        let mut h = Host::new();
        let mut a = admin_queue(&t);
        assert_eq!(a.crqsize(), 32);
        let c = h.connect(&mut a, 0, NQN, HOST, 0xFFFF, 5000);
        assert_eq!((c.status, c.sqid, c.sqhd, c.cid), (Status::SUCCESS, 0, 1, h.cid));
        // The connect data came by RDMA READ of the host's 1 KiB.
        assert!(matches!(h.last[..], [Step::Fetch { len: 1024, .. }, Step::Respond(_)]));
        let cntlid = c.dw0 as u16;
        assert!((1..=0xFFEF).contains(&cntlid));
        assert_eq!(a.cntlid(), Some(cntlid));

        let cap = h.property(&mut a, 0, None, property::CAP, true);
        let cap = u64::from(cap.dw0) | u64::from(cap.dw1) << 32;
        assert_eq!((cap & 0xffff, cap >> 37 & 1), (1023, 1), "CAP.MQES, CAP.CSS NVM");
        assert_eq!(h.property(&mut a, 0, None, property::VS, false).dw0, 0x10300);
        assert_eq!(h.property(&mut a, 0, None, property::CSTS, false).dw0 & 1, 0);
        h.enable(&mut a, 0);

        let (c, id) = h.identify(&mut a, cns::CONTROLLER, 0);
        assert_eq!((c.status, c.sqid, c.cid), (Status::SUCCESS, 0, h.cid));
        assert!(matches!(h.last[..], [Step::Deliver { len: 4096, .. }]));
        let info = ControllerInfo::parse(&id).unwrap();
        assert_eq!(
            (info.cntlid, info.subnqn.as_str(), info.icdoff, info.sgls & 4, info.nn, info.cntrltype),
            (cntlid, NQN, 0, 4, 1, cntrltype::IO)
        );
        assert_eq!((info.mdts, info.ioccsz, info.sgls >> 20 & 1), (5, (64 + 4096) / 16, 1));

        let (c, nsd) = h.identify(&mut a, cns::NAMESPACE, 1);
        assert_eq!(c.status, Status::SUCCESS);
        let ns = NamespaceInfo::parse(&nsd).unwrap();
        assert_eq!((ns.blocks, ns.block_size()), ((MIB / bs) as u64, bs as u64));
        let (_, list) = h.identify(&mut a, cns::ACTIVE_NS_LIST, 0);
        assert_eq!(&list[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
        let (c, desc) = h.identify(&mut a, cns::NS_DESCRIPTORS, 1);
        assert_eq!((c.status, desc[0], desc[1], &desc[4..20]), (Status::SUCCESS, 2, 16, &ns.nguid[..]));
        assert_eq!((desc[20], desc[21]), (3, 16), "then a UUID");

        // Linux asks for as many queues as CPUs; 4 (0's based 3) granted.
        let c = h.set_queues(&mut a, 3, 3);
        assert_eq!((c.status, c.dw0), (Status::SUCCESS, 3 | 3 << 16));
        let mut b = h.sqe(op::GET_FEATURES, 0, Sgl::NULL);
        set_cdw(&mut b, 0, u32::from(feature::NUMBER_OF_QUEUES));
        assert_eq!(h.run(&mut a, 0, &b).unwrap().dw0, 3 | 3 << 16);

        let mut q = io_queue(&t, 1);
        let c = h.connect(&mut q, 0, NQN, HOST, cntlid, 0);
        assert_eq!((c.status, c.dw0 as u16, c.sqid, c.sqhd), (Status::SUCCESS, cntlid, 1, 1));
        // Another I/O queue whose Connect data is in the capsule.
        let mut q2 = io_queue(&t, 2);
        let c = h.connect_with(&mut q2, 0, NQN, HOST, cntlid, 0, true);
        assert_eq!((c.status, c.sqid), (Status::SUCCESS, 2));
        assert!(matches!(h.last[..], [Step::Respond(r)] if r.invalidate.is_none()));
        assert_eq!(t.controllers(), vec![(cntlid, NQN.to_string(), HOST.to_string(), 2)]);

        // Write 8 KiB at LBA 2: an RDMA READ of the host's buffer, then
        // the answer, sent with invalidate of the host's key.
        let nlb = (8192 / bs) as u32;
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        let (c, _) = h.rw(&mut q, 0, io::WRITE, 2, nlb, data.clone());
        assert_eq!((c.status, c.sqhd, c.sqid, c.cid), (Status::SUCCESS, 2, 1, h.cid));
        let key = h.next_key - 1;
        assert!(matches!(
            h.last[..],
            [Step::Fetch { addr: 0, key: k, len: 8192, into: Place::Buffer }, Step::Respond(r)] if k == key && r.invalidate == Some(key)
        ));
        assert_eq!(mem.snapshot(2 * bs as u64, 8192), data);
        assert!(mem.snapshot(0, 2 * bs).iter().all(|&b| b == 0));
        assert!(mem.snapshot((2 * bs + 8192) as u64, 4096).iter().all(|&b| b == 0));

        // Read it back: an RDMA WRITE of 8 KiB, then the answer.
        let (c, back) = h.rw(&mut q, 0, io::READ, 2, nlb, vec![0; 8192]);
        assert_eq!((c.status, c.sqhd, c.sqid, c.cid), (Status::SUCCESS, 3, 1, h.cid));
        assert!(matches!(h.last[..], [Step::Deliver { addr: 0, len: 8192, .. }]));
        assert!(back == data, "read back differs");

        // Write Zeroes of LBA 2, Dataset Management deallocating LBA 3,
        // a Flush of all namespaces.
        let mut b = h.sqe(io::WRITE_ZEROES, 1, Sgl::NULL);
        set_cdw(&mut b, 0, 2);
        assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::SUCCESS);
        assert!(mem.snapshot(2 * bs as u64, bs).iter().all(|&b| b == 0));
        assert_eq!(mem.snapshot(3 * bs as u64, 8192 - bs), data[bs..]);
        let mut range = vec![0u8; 16];
        range[4..8].copy_from_slice(&1u32.to_le_bytes());
        range[8..16].copy_from_slice(&3u64.to_le_bytes());
        let (c, _) = h.data_cmd(&mut q, 0, io::DATASET_MANAGEMENT, 1, &[(0, 0), (1, 1 << 2)], range);
        assert_eq!(c.status, Status::SUCCESS);
        assert!(mem.snapshot(3 * bs as u64, bs).iter().all(|&b| b == 0));
        assert_eq!(mem.snapshot(4 * bs as u64, 8192 - 2 * bs), data[2 * bs..]);
        let b = h.sqe(io::FLUSH, 0xFFFF_FFFF, Sgl::NULL);
        assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::SUCCESS);

        let s = t.stats();
        assert_eq!((s.writes, s.reads, s.bytes_written, s.bytes_read), (1, 1, 8192, 8192));
        assert_eq!((s.errors, s.controllers_made, s.connects_refused), (0, 1, 0));
    }
}

#[test]
fn bad_input_gets_a_status_and_moves_no_byte() {
    let mem = Arc::new(MemBackend::new(MIB as u64));
    let t = target(&[HOST, HOST_B], mem.clone());
    let mut h = Host::new();
    // Before Connect: on the admin queue and on an I/O queue.
    let mut a = admin_queue(&t);
    assert_eq!(h.property(&mut a, 0, None, property::CAP, true).status, Status::COMMAND_SEQUENCE_ERROR);
    let mut q = io_queue(&t, 1);
    assert_eq!(h.rw(&mut q, 0, io::READ, 0, 1, vec![0; 4096]).0.status, Status::COMMAND_SEQUENCE_ERROR);
    // The access list, and the subsystem's name (IPO in the data: SUBNQN).
    let c = h.connect(&mut a, 0, NQN, "nqn.2014-08.org.nvmexpress:uuid:other", 0xFFFF, 0);
    assert_eq!(c.status, Status::CONNECT_INVALID_HOST);
    let c = h.connect(&mut a, 0, "nqn.2026-11.io.roce:nope", HOST, 0xFFFF, 0);
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, 1 << 16 | 256));
    assert_eq!(a.cntlid(), None);
    let c = h.connect(&mut a, 0, NQN, HOST, 0xFFFF, 0);
    assert_eq!(c.status, Status::SUCCESS);
    let cntlid = c.dw0 as u16;
    // Before CC.EN: admin commands, and I/O Connects.
    assert_eq!(h.identify(&mut a, cns::CONTROLLER, 0).0.status, Status::COMMAND_SEQUENCE_ERROR);
    assert_eq!(h.connect(&mut q, 0, NQN, HOST, cntlid, 0).status, Status::COMMAND_SEQUENCE_ERROR);
    h.enable(&mut a, 0);
    assert_eq!(h.identify(&mut a, cns::NAMESPACE, 2).0.status, Status::INVALID_NAMESPACE);
    // I/O Connect naming another controller, from another (allowed) host,
    // from a host not allowed, or for a QID above the grant.
    let ipo_cntlid = 1 << 16 | u32::from(connect_data::CNTLID);
    let c = h.connect(&mut q, 0, NQN, HOST, cntlid + 1, 0);
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, ipo_cntlid));
    let c = h.connect(&mut q, 0, NQN, HOST_B, cntlid, 0);
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, ipo_cntlid));
    let c = h.connect(&mut q, 0, NQN, "nqn.2014-08.org.nvmexpress:uuid:x", cntlid, 0);
    assert_eq!(c.status, Status::CONNECT_INVALID_HOST);
    assert_eq!(h.set_queues(&mut a, 0, 5).dw0, 0, "one I/O queue granted");
    let mut q2 = io_queue(&t, 2);
    let c = h.connect(&mut q2, 0, NQN, HOST, cntlid, 0);
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, 42), "IPO: the SQE's QID");
    assert_eq!(q.cntlid(), None);
    assert_eq!(h.connect(&mut q, 0, NQN, HOST, cntlid, 0).status, Status::SUCCESS);
    // ... and not twice.
    assert_eq!(h.connect(&mut q, 0, NQN, HOST, cntlid, 0).status, Status::COMMAND_SEQUENCE_ERROR);
    assert_eq!(t.stats().connects_refused, 8);
    // The RDMA CM private data.
    let rej = |recfmt, qid, hrqsize, hsqsize| {
        Queue::accept(t.clone(), &ReqPrivate { recfmt, qid, hrqsize, hsqsize, cntlid: 0 }).err()
    };
    assert_eq!(rej(1, 0, 32, 31), Some(rej_status::INVALID_RECFMT));
    assert_eq!(rej(0, 0, 32, 63), Some(rej_status::INVALID_HSQSIZE));
    assert_eq!(rej(0, 1, 32, 0), Some(rej_status::INVALID_HSQSIZE));
    assert_eq!(rej(0, 1, 0, 31), Some(rej_status::INVALID_HRQSIZE));
    assert_eq!(rej(0, 999, 8, 7), Some(rej_status::INVALID_QID));
    assert_eq!(rej(0, 0, 32, 31), None);

    let before = mem.snapshot(0, MIB);
    let st = |(c, _): (Cqe, Vec<u8>)| c.status;
    // LBA out of range, also where slba + nlb overflows.
    assert_eq!(st(h.rw(&mut q, 0, io::WRITE, 255, 2, vec![1; 8192])), Status::LBA_OUT_OF_RANGE);
    assert_eq!(st(h.rw(&mut q, 0, io::WRITE, 256, 1, vec![1; 4096])), Status::LBA_OUT_OF_RANGE);
    assert_eq!(st(h.rw(&mut q, 0, io::WRITE, u64::MAX, 1, vec![1; 4096])), Status::LBA_OUT_OF_RANGE);
    assert_eq!(st(h.rw(&mut q, 0, io::WRITE, u64::MAX - 1, 2, vec![1; 8192])), Status::LBA_OUT_OF_RANGE);
    assert_eq!(st(h.rw(&mut q, 0, io::READ, 1 << 52, 1, vec![1; 4096])), Status::LBA_OUT_OF_RANGE);
    let mut b = h.sqe(io::WRITE_ZEROES, 1, Sgl::NULL);
    set_cdw(&mut b, 0, 250);
    set_cdw(&mut b, 2, 9);
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::LBA_OUT_OF_RANGE);
    let mut ranges = vec![0u8; 32];
    ranges[4..8].copy_from_slice(&1u32.to_le_bytes()); // LBA 0: fine
    ranges[20..24].copy_from_slice(&2u32.to_le_bytes());
    ranges[24..32].copy_from_slice(&255u64.to_le_bytes()); // 255..257: not
    let (c, _) = h.data_cmd(&mut q, 0, io::DATASET_MANAGEMENT, 1, &[(0, 1), (1, 4)], ranges);
    assert_eq!(c.status, Status::LBA_OUT_OF_RANGE);
    // The SGL's length must be the blocks'; no more than MDTS.
    assert_eq!(st(h.rw(&mut q, 0, io::WRITE, 0, 2, vec![1; 4096])), Status::DATA_SGL_LENGTH_INVALID);
    assert_eq!(st(h.rw(&mut q, 0, io::WRITE, 0, 1, vec![1; 8192])), Status::DATA_SGL_LENGTH_INVALID);
    assert_eq!(st(h.rw(&mut q, 0, io::READ, 0, 1, vec![1; 8192])), Status::DATA_SGL_LENGTH_INVALID);
    assert_eq!(st(h.rw(&mut q, 0, io::WRITE, 0, 33, vec![1; 33 * 4096])), Status::INVALID_FIELD);
    // An unknown namespace, an unknown opcode.
    assert_eq!(st(h.data_cmd(&mut q, 0, io::WRITE, 2, &[], vec![1; 4096])), Status::INVALID_NAMESPACE);
    assert_eq!(st(h.data_cmd(&mut q, 0, io::WRITE, 0, &[], vec![1; 4096])), Status::INVALID_NAMESPACE);
    assert_eq!(st(h.data_cmd(&mut q, 0, 0x7e, 1, &[], vec![1; 4096])), Status::INVALID_OPCODE);
    // A descriptor type NVMe/RDMA does not take, PRPs, a fused command:
    // refused before any data moves.
    let mut b = h.sqe(io::WRITE, 1, Sgl::NULL);
    b[39] = 0x20;
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::SGL_TYPE_INVALID);
    let mut b = h.sqe(io::WRITE, 1, Sgl::Keyed { addr: 0, len: 4096, key: 1, invalidate: false });
    b[1] = 0;
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::INVALID_FIELD);
    b[1] = 0x41;
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::INVALID_FIELD);
    assert!(matches!(h.last[..], [Step::Respond(_)]));
    // In-capsule data that is not in the capsule; on the admin queue.
    let mut b = h.sqe(io::WRITE, 1, Sgl::InCapsule { offset: 0, len: 4096 }).to_vec();
    b.extend_from_slice(&[7; 100]);
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::DATA_SGL_LENGTH_INVALID);
    let mut b = h.sqe(io::WRITE, 1, Sgl::InCapsule { offset: u64::MAX - 8, len: 4096 }).to_vec();
    b.extend_from_slice(&[7; 4096]);
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::DATA_SGL_LENGTH_INVALID);
    // A Read cannot answer into the capsule: refused, not read nor counted.
    let mut b = h.sqe(io::READ, 1, Sgl::InCapsule { offset: 0, len: 4096 }).to_vec();
    b.extend_from_slice(&[7; 4096]);
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::DATA_SGL_LENGTH_INVALID);
    assert_eq!((t.stats().reads, t.stats().bytes_read), (0, 0));
    let mut b = h.sqe(op::IDENTIFY, 0, Sgl::InCapsule { offset: 0, len: 16 }).to_vec();
    b.extend_from_slice(&[7; 16]);
    assert_eq!(h.run(&mut a, 0, &b).unwrap().status, Status::DATA_SGL_LENGTH_INVALID);
    // A capsule shorter than an SQE ends the connection.
    let mut buf = vec![0u8; q.buffer_len()];
    let malformed = t.stats().malformed;
    assert!(matches!(q.command(0, &[0u8; 63], &mut buf), Step::Fatal(_)));
    assert!(matches!(a.command(0, &[], &mut buf), Step::Fatal(_)));
    assert_eq!(t.stats().malformed, malformed + 2);
    assert!(mem.snapshot(0, MIB) == before, "a refused command changed the namespace");
    // In-capsule data that fits is written.
    let mut b = h.sqe(io::WRITE, 1, Sgl::InCapsule { offset: 0, len: 4096 }).to_vec();
    b.extend_from_slice(&[5; 4096]);
    assert_eq!(h.run(&mut q, 0, &b).unwrap().status, Status::SUCCESS);
    assert!(mem.snapshot(0, 4096).iter().all(|&x| x == 5));
    assert!(mem.snapshot(4096, MIB - 4096) == before[4096..]);
}

#[test]
fn a_silent_host_loses_its_controller_after_twice_its_kato() {
    let t = target(&[], Arc::new(MemBackend::new(MIB as u64)));
    let mut h = Host::new();
    let (mut a, mut q, cntlid) = bring_up(&mut h, &t, 1000);
    assert_eq!(t.poll_timeout(), Some(2000 * MS));
    assert!(t.expire(1000 * MS).is_empty());
    assert!(t.expire(1999 * MS).is_empty());
    // A Keep Alive at 1.5 s moves the deadline to 3.5 s.
    let b = h.sqe(op::KEEP_ALIVE, 0, Sgl::NULL);
    assert_eq!(h.run(&mut a, 1500 * MS, &b).unwrap().status, Status::SUCCESS);
    assert_eq!(t.poll_timeout(), Some(3500 * MS));
    assert!(t.expire(2000 * MS).is_empty());
    assert!(t.expire(3499 * MS).is_empty());
    assert!(a.alive() && q.alive() && t.is_alive(cntlid));
    assert_eq!(t.expire(3500 * MS), vec![cntlid]);
    assert!(!a.alive() && !q.alive() && !t.is_alive(cntlid));
    assert!(t.controllers().is_empty() && t.poll_timeout().is_none());
    // Whatever comes after is aborted, on either queue.
    let (c, back) = h.rw(&mut q, 3600 * MS, io::READ, 0, 1, vec![0xaa; 4096]);
    assert_eq!((c.status, back.iter().all(|&b| b == 0xaa)), (Status::ABORTED_SQ_DELETION, true));
    let b = h.sqe(op::KEEP_ALIVE, 0, Sgl::NULL);
    assert_eq!(h.run(&mut a, 3600 * MS, &b).unwrap().status, Status::ABORTED_SQ_DELETION);
    assert!(t.expire(u64::MAX / 2).is_empty());
    assert_eq!(t.stats().keep_alive_expired, 1);
    // Without a KATO nothing expires; closing the admin queue, or
    // dropping it, ends the controller and its I/O queues.
    let (mut a2, q2, c2) = bring_up(&mut h, &t, 0);
    assert!(t.expire(u64::MAX / 2).is_empty() && t.is_alive(c2));
    a2.close();
    assert!(!t.is_alive(c2) && !q2.alive());
    let (a3, q3, c3) = bring_up(&mut h, &t, 0);
    assert_ne!(c3, c2);
    drop(q3);
    assert_eq!(t.controllers(), vec![(c3, NQN.to_string(), HOST.to_string(), 0)]);
    drop(a3);
    assert!(!t.is_alive(c3) && t.controllers().is_empty());
    assert_eq!(t.stats().keep_alive_expired, 1);
}

#[test]
fn discovery_lists_what_the_host_may_reach() {
    for (allowed, n) in [(vec![], 1), (vec![HOST], 1), (vec![HOST_B], 0)] {
        let t = target(&allowed, Arc::new(MemBackend::new(MIB as u64)));
        let mut h = Host::new();
        let mut a = admin_queue(&t);
        assert_eq!(h.connect(&mut a, 0, DISCOVERY_NQN, HOST, 0xFFFF, 0).status, Status::SUCCESS);
        h.enable(&mut a, 0);
        let (_, id) = h.identify(&mut a, cns::CONTROLLER, 0);
        let info = ControllerInfo::parse(&id).unwrap();
        assert_eq!((info.cntrltype, info.subnqn.as_str(), info.nn), (cntrltype::DISCOVERY, DISCOVERY_NQN, 0));
        // As Linux reads it: the header, then NUMREC entries in full.
        let get = |h: &mut Host, a: &mut Queue, len: u32| {
            let numdl = len / 4 - 1;
            let cdw10 = u32::from(log::DISCOVERY) | numdl << 16;
            h.data_cmd(a, 0, op::GET_LOG_PAGE, 0, &[(0, cdw10)], vec![0; len as usize])
        };
        let (c, head) = get(&mut h, &mut a, 1024);
        assert_eq!(c.status, Status::SUCCESS);
        assert!(matches!(h.last[..], [Step::Deliver { len: 1024, .. }]));
        let (genctr, numrec, _) = parse_discovery_log(&head).unwrap();
        assert_eq!(numrec, n);
        let (c, page) = get(&mut h, &mut a, 1024 * (1 + numrec as u32));
        assert_eq!(c.status, Status::SUCCESS);
        let (genctr2, numrec2, e) = parse_discovery_log(&page).unwrap();
        assert_eq!((genctr2, numrec2, e.len()), (genctr, n, n as usize));
        if let Some(e) = e.first() {
            assert_eq!(
                (e.subnqn.as_str(), e.traddr.as_str(), e.trsvcid.as_str(), e.trtype, e.adrfam, e.subtype),
                (NQN, "10.0.0.1", "4421", 1, 1, 2)
            );
            assert_eq!((e.cntlid, e.asqsz), (0xFFFF, 32));
        }
        // Only the discovery page; a discovery controller has no I/O queues.
        let (c, _) = h.data_cmd(
            &mut a,
            0,
            op::GET_LOG_PAGE,
            0,
            &[(0, u32::from(log::SMART) | 127 << 16)],
            vec![0; 512],
        );
        assert_eq!(c.status, Status::INVALID_LOG_PAGE);
        let cntlid = a.cntlid().unwrap();
        let mut q = io_queue(&t, 1);
        let c = h.connect(&mut q, 0, DISCOVERY_NQN, HOST, cntlid, 0);
        assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Hostile capsules never panic, and only a Write, Write Zeroes or
    /// Dataset Management that succeeds may change the namespace.
    #[test]
    fn random_capsules_never_panic(
        mut bytes in proptest::collection::vec(any::<u8>(), 64..4160),
        short in proptest::option::weighted(0.05, 0usize..64),
        admin: bool,
        shape in 0u8..4,
        opcode in prop_oneof![Just(0x01u8), Just(0x02), Just(0x08), Just(0x09), Just(0x06), Just(0x7f), any::<u8>()],
        nlb in 0u32..4,
    ) {
        // Most capsules look like commands (SGL flags, a keyed or
        // in-capsule descriptor, a plausible opcode, NSID 1, few blocks),
        // so that the handlers' checks are what refuses them.
        if shape > 0 {
            bytes[0] = opcode;
            bytes[1] = FLAGS_SGL;
            bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
            bytes[39] = [0x40, 0x4F, 0x01][usize::from(shape - 1)];
            if shape == 3 {
                bytes[24..32].fill(0);
            }
            bytes[48..50].copy_from_slice(&(nlb as u16).to_le_bytes());
        }
        if let Some(n) = short {
            bytes.truncate(n);
        }
        let mem = Arc::new(MemBackend::new(MIB as u64));
        let t = target(&[], mem.clone());
        let mut h = Host::new();
        let (mut a, mut q, _) = bring_up(&mut h, &t, 0);
        let before = mem.snapshot(0, MIB);
        let queue = if admin { &mut a } else { &mut q };
        let cqe = h.run(queue, 0, &bytes);
        if bytes.len() < SQE_LEN {
            prop_assert!(matches!(h.last[..], [Step::Fatal(_)]));
        }
        let ok = cqe.is_some_and(|c| c.status.is_success());
        let writes = !admin
            && ok
            && matches!(bytes[0], io::WRITE | io::WRITE_ZEROES | io::DATASET_MANAGEMENT);
        if !writes {
            prop_assert!(mem.snapshot(0, MIB) == before, "opcode {:#04x} changed the namespace", bytes[0]);
        }
        prop_assert_eq!(mem.len(), MIB as u64);
    }
}
