//! The initiator (host side) of NVMe/RDMA on roce: connect to a
//! controller through the RDMA CM, bring it up as a Linux host does
//! (NVMe-oF 1.1, 3.3-3.5: Connect, Property Get CAP/VS, Property Set
//! CC.EN, CSTS.RDY, Identify, Set Features Number of Queues, I/O queue
//! Connects), and read, write and flush namespaces; `discover` reads a
//! discovery controller's log page. Blocking calls; the perf loop drives
//! an [`IoQueue`]'s submit/poll itself.

mod queue;

use std::net::SocketAddr;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce::Device;

pub use queue::{sqe, Done, HostQueue as IoQueue};

use crate::wire::fabrics::{fctype, property, Connect, ConnectData, PropertyCmd};
use crate::wire::identify::{
    cns, parse_discovery_log, ControllerInfo, DiscoveryEntry, NamespaceInfo, IDENTIFY_LEN,
};
use crate::wire::{admin, feature, io, log, Sqe, Status, DISCOVERY_NQN};

/// What can go wrong on the host side.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Device(#[from] roce::Error),
    #[error("the controller rejected the connection: CM reason {reason}{}", status.map(|s| format!(", NVMe/RDMA status {s}")).unwrap_or_default())]
    Rejected { reason: u16, status: Option<u16> },
    #[error("{command} failed: {status}")]
    Status { command: &'static str, status: Status },
    #[error("no answer to {0} in time")]
    Timeout(&'static str),
    #[error("protocol: {0}")]
    Protocol(String),
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct HostOptions {
    pub subnqn: String,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// Keep Alive Timeout in ms (0: none); a Keep Alive goes every half.
    pub kato_ms: u32,
    pub io_queues: u16,
    /// Entries of each I/O queue.
    pub queue_depth: u16,
    /// Largest transfer of one command (cut to the controller's MDTS).
    pub max_transfer: usize,
    pub timeout: Duration,
}

impl HostOptions {
    pub fn new(subnqn: &str) -> HostOptions {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "roce".into());
        let mut hostid = [0u8; 16];
        for (i, b) in host.trim().bytes().enumerate() {
            hostid[i % 16] ^= b.wrapping_add(i as u8);
        }
        HostOptions {
            subnqn: subnqn.to_string(),
            hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:{}", uuid_text(&hostid)),
            hostid,
            kato_ms: 5000,
            io_queues: 1,
            queue_depth: 32,
            max_transfer: 128 * 1024,
            timeout: Duration::from_secs(10),
        }
    }
}

/// `n` bytes of a pseudo-random test pattern (xorshift64 from `seed`, its
/// low byte per step): what `roce nvmf connect --write-read-check` writes,
/// so that a test can check the bytes on the other side.
pub fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn uuid_text(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The admin queue's depth (Linux: NVME_AQ_DEPTH).
const ADMIN_DEPTH: u16 = 32;
/// An admin command's data slot: Identify data, and a discovery log page
/// of up to 63 entries.
const ADMIN_SLOT: usize = 64 * 1024;

/// A connected controller with its queues.
pub struct Controller {
    admin: Arc<Mutex<IoQueue>>,
    io: Vec<IoQueue>,
    cntlid: u16,
    info: ControllerInfo,
    max_transfer: usize,
    timeout: Duration,
    keep_alive: Option<(Sender<()>, JoinHandle<()>)>,
}

fn lock(q: &Mutex<IoQueue>) -> MutexGuard<'_, IoQueue> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

/// Connect on queue `q` (NVMe-oF 1.1, 3.3): its data by keyed SGL.
fn fabrics_connect(q: &mut IoQueue, o: &HostOptions, cntlid: u16, sqsize: u16) -> Result<u16, HostError> {
    let data =
        ConnectData { hostid: o.hostid, cntlid, subnqn: o.subnqn.clone(), hostnqn: o.hostnqn.clone() }.emit();
    let qid = q.qid;
    let kato = if qid == 0 { o.kato_ms } else { 0 };
    let cqe = q.exec(
        "Connect",
        |q, slot| {
            let mut b = sqe(admin::FABRICS, 0);
            let mut s = Sqe::new_checked(&mut b[..]).expect("64");
            Connect { recfmt: 0, qid, sqsize, cattr: 0, kato }.emit(&mut s);
            s.set_dptr(&q.sgl(slot, 1024));
            b
        },
        Some(&data),
        None,
        o.timeout,
    )?;
    Ok(cqe.dw0 as u16)
}

fn property_cmd(
    q: &mut IoQueue,
    set: Option<u64>,
    offset: u32,
    size8: bool,
    t: Duration,
) -> Result<u64, HostError> {
    let what = if set.is_some() { "Property Set" } else { "Property Get" };
    let cqe = q.exec(
        what,
        |q, slot| {
            let mut b = sqe(admin::FABRICS, 0);
            let mut s = Sqe::new_checked(&mut b[..]).expect("64");
            let ft = if set.is_some() { fctype::PROPERTY_SET } else { fctype::PROPERTY_GET };
            PropertyCmd { size8, offset, value: set.unwrap_or(0) }.emit(&mut s, ft);
            s.set_dptr(&q.sgl(slot, 0));
            b
        },
        None,
        None,
        t,
    )?;
    Ok(u64::from(cqe.dw0) | (u64::from(cqe.dw1) << 32))
}

fn identify(q: &mut IoQueue, cns_v: u8, nsid: u32, t: Duration) -> Result<Vec<u8>, HostError> {
    let mut out = vec![0u8; IDENTIFY_LEN];
    q.exec(
        "Identify",
        |q, slot| {
            let mut b = sqe(admin::IDENTIFY, nsid);
            let mut s = Sqe::new_checked(&mut b[..]).expect("64");
            s.set_cdw(0, u32::from(cns_v));
            s.set_dptr(&q.sgl(slot, IDENTIFY_LEN as u32));
            b
        },
        None,
        Some(&mut out),
        t,
    )?;
    Ok(out)
}

/// Admin bring-up up to CSTS.RDY: the admin queue, its controller ID, and
/// the Identify Controller data.
fn bring_up(
    dev: &Device,
    addr: SocketAddr,
    o: &HostOptions,
) -> Result<(IoQueue, u16, ControllerInfo), HostError> {
    let mut q = IoQueue::connect(dev, addr, 0, ADMIN_DEPTH, 0, ADMIN_SLOT, o.timeout)?;
    let cntlid = fabrics_connect(&mut q, o, 0xFFFF, ADMIN_DEPTH - 1)?;
    let cap = property_cmd(&mut q, None, property::CAP, true, o.timeout)?;
    let vs = property_cmd(&mut q, None, property::VS, false, o.timeout)?;
    if vs >> 16 == 0 {
        return Err(HostError::Protocol(format!("the controller reports NVMe version {vs:#x}")));
    }
    // CC: EN, IOSQES = 6, IOCQES = 4 (64- and 16-byte entries).
    property_cmd(&mut q, Some(1 | (6 << 16) | (4 << 20)), property::CC, false, o.timeout)?;
    // CSTS.RDY within CAP.TO (500 ms units).
    let deadline = Instant::now() + Duration::from_millis(500 * ((cap >> 24) & 0xff).max(1));
    loop {
        let csts = property_cmd(&mut q, None, property::CSTS, false, o.timeout)?;
        if csts & 2 != 0 {
            return Err(HostError::Protocol("the controller reports a fatal status (CSTS.CFS)".into()));
        }
        if csts & 1 != 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(HostError::Timeout("CSTS.RDY"));
        }
        std::thread::yield_now();
    }
    let id = identify(&mut q, cns::CONTROLLER, 0, o.timeout)?;
    let info =
        ControllerInfo::parse(&id).ok_or(HostError::Protocol("short Identify Controller data".into()))?;
    // The binding's requirements (as Linux checks them): keyed SGLs, ICDOFF 0.
    if info.sgls & 0b100 == 0 || info.icdoff != 0 {
        return Err(HostError::Protocol(format!(
            "the controller lacks keyed SGLs or has ICDOFF {} (SGLS {:#x})",
            info.icdoff, info.sgls
        )));
    }
    let mut info = info;
    // The queue entries the controller takes (CAP.MQES, 0's based), kept
    // with what it said in Identify.
    info.maxcmd = info.maxcmd.min((cap & 0xffff) as u16 + 1);
    Ok((q, cntlid, info))
}

impl Controller {
    /// Connects to subsystem `o.subnqn` at `addr` (IP and RDMA CM port).
    pub fn connect(dev: &Device, addr: SocketAddr, o: &HostOptions) -> Result<Controller, HostError> {
        let (mut admin_q, cntlid, info) = bring_up(dev, addr, o)?;
        if info.cntrltype != crate::wire::identify::cntrltype::IO {
            admin_q.disconnect();
            return Err(HostError::Protocol(format!(
                "{} is not an I/O controller (type {}): use discover",
                o.subnqn, info.cntrltype
            )));
        }
        let mdts = if info.mdts == 0 { usize::MAX } else { 4096usize << info.mdts };
        let max_transfer = o.max_transfer.min(mdts).max(4096);
        let want = o.io_queues.max(1);
        // Set Features Number of Queues (0's based request and grant).
        let cqe = admin_q.exec(
            "Set Features (Number of Queues)",
            |q, slot| {
                let mut b = sqe(admin::SET_FEATURES, 0);
                let mut s = Sqe::new_checked(&mut b[..]).expect("64");
                s.set_cdw(0, u32::from(feature::NUMBER_OF_QUEUES));
                s.set_cdw(1, u32::from(want - 1) | (u32::from(want - 1) << 16));
                s.set_dptr(&q.sgl(slot, 0));
                b
            },
            None,
            None,
            o.timeout,
        )?;
        let granted = ((cqe.dw0 & 0xffff).min(cqe.dw0 >> 16) + 1) as u16;
        let depth = o.queue_depth.clamp(2, info.maxcmd.max(2));
        let mut io_queues = Vec::new();
        for qid in 1..=want.min(granted) {
            let mut q = IoQueue::connect(dev, addr, qid, depth, cntlid, max_transfer, o.timeout)?;
            fabrics_connect(&mut q, o, cntlid, depth - 1)?;
            io_queues.push(q);
        }
        let admin = Arc::new(Mutex::new(admin_q));
        let keep_alive = (o.kato_ms > 0).then(|| {
            let (tx, rx) = channel::<()>();
            let a = admin.clone();
            let period = Duration::from_millis(u64::from(o.kato_ms) / 2);
            let t = o.timeout;
            let h = std::thread::spawn(move || loop {
                match rx.recv_timeout(period) {
                    Err(RecvTimeoutError::Timeout) => {
                        let r = lock(&a).exec(
                            "Keep Alive",
                            |q, slot| {
                                let mut b = sqe(admin::KEEP_ALIVE, 0);
                                Sqe::new_checked(&mut b[..]).expect("64").set_dptr(&q.sgl(slot, 0));
                                b
                            },
                            None,
                            None,
                            t,
                        );
                        if r.is_err() {
                            return;
                        }
                    }
                    _ => return,
                }
            });
            (tx, h)
        });
        Ok(Controller { admin, io: io_queues, cntlid, info, max_transfer, timeout: o.timeout, keep_alive })
    }

    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }

    /// The largest transfer of one command.
    pub fn max_transfer(&self) -> usize {
        self.max_transfer
    }

    /// The I/O queues, for a caller that drives submit/poll itself.
    pub fn io_queues(&mut self) -> &mut [IoQueue] {
        &mut self.io
    }

    /// The active namespaces and their Identify data.
    pub fn namespaces(&mut self) -> Result<Vec<(u32, NamespaceInfo)>, HostError> {
        let t = self.timeout;
        let mut a = lock(&self.admin);
        let list = identify(&mut a, cns::ACTIVE_NS_LIST, 0, t)?;
        let mut out = Vec::new();
        for id in list.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4"))) {
            if id == 0 {
                break;
            }
            let d = identify(&mut a, cns::NAMESPACE, id, t)?;
            let ns = NamespaceInfo::parse(&d)
                .ok_or(HostError::Protocol(format!("namespace {id}: bad Identify data")))?;
            out.push((id, ns));
        }
        Ok(out)
    }

    fn io_queue(&mut self) -> Result<&mut IoQueue, HostError> {
        self.io.first_mut().ok_or(HostError::Protocol("no I/O queue".into()))
    }

    /// Reads `buf.len()` bytes (whole blocks of `block` bytes) from LBA
    /// `lba` of namespace `nsid`, in commands of at most the max transfer.
    pub fn read(&mut self, nsid: u32, block: u64, lba: u64, buf: &mut [u8]) -> Result<(), HostError> {
        self.rw(
            io::READ,
            nsid,
            block,
            lba,
            buf.len(),
            |q, slot, at, n| q.copy_out(slot, &mut buf[at..at + n]),
            None,
        )
    }

    /// Writes `data` (whole blocks) at LBA `lba` of namespace `nsid`.
    pub fn write(&mut self, nsid: u32, block: u64, lba: u64, data: &[u8]) -> Result<(), HostError> {
        self.rw(io::WRITE, nsid, block, lba, data.len(), |_, _, _, _| Ok(()), Some(data))
    }

    #[allow(clippy::too_many_arguments)]
    fn rw(
        &mut self,
        opcode: u8,
        nsid: u32,
        block: u64,
        lba: u64,
        len: usize,
        mut take: impl FnMut(&IoQueue, u16, usize, usize) -> Result<(), HostError>,
        data: Option<&[u8]>,
    ) -> Result<(), HostError> {
        if block == 0 || len as u64 % block != 0 {
            return Err(HostError::Protocol(format!("{len} bytes is not whole blocks of {block}")));
        }
        let step = self.max_transfer - self.max_transfer % block as usize;
        if step == 0 {
            return Err(HostError::Protocol(format!(
                "a block of {block} bytes is larger than a command's transfer ({} bytes)",
                self.max_transfer
            )));
        }
        let t = self.timeout;
        let q = self.io_queue()?;
        let mut at = 0;
        while at < len {
            let n = (len - at).min(step);
            let slba = lba + (at as u64) / block;
            let nlb = (n as u64 / block - 1) as u32;
            let what = if opcode == io::READ { "Read" } else { "Write" };
            let cqe_slot = {
                let slot = q.take_slot().ok_or(HostError::Protocol("no free slot".into()))?;
                if let Some(d) = data {
                    q.fill(slot, &d[at..at + n])?;
                }
                let mut b = sqe(opcode, nsid);
                let mut s = Sqe::new_checked(&mut b[..]).expect("64");
                s.set_qword_at(40, slba);
                s.set_cdw(2, nlb);
                s.set_dptr(&q.sgl(slot, n as u32));
                q.submit(slot, b)?;
                q.wait_for(slot, what, t)?;
                slot
            };
            take(q, cqe_slot, at, n)?;
            at += n;
        }
        Ok(())
    }

    /// Flush (NVM 1.0, 3.2.1).
    pub fn flush(&mut self, nsid: u32) -> Result<(), HostError> {
        let t = self.timeout;
        self.io_queue()?.exec(
            "Flush",
            |q, slot| {
                let mut b = sqe(io::FLUSH, nsid);
                Sqe::new_checked(&mut b[..]).expect("64").set_dptr(&q.sgl(slot, 0));
                b
            },
            None,
            None,
            t,
        )?;
        Ok(())
    }

    /// Shuts the controller down (CC.SHN = 01b) and disconnects every queue.
    pub fn disconnect(mut self) -> Result<(), HostError> {
        self.stop_keep_alive();
        let t = self.timeout;
        // Normal shutdown (CC.SHN = 01b), then CSTS.SHST = 10b (complete)
        // within the timeout, as the Linux host waits for it.
        let r = (|| {
            let mut a = lock(&self.admin);
            property_cmd(&mut a, Some(1 << 14 | (6 << 16) | (4 << 20)), property::CC, false, t)?;
            let deadline = Instant::now() + t;
            loop {
                if property_cmd(&mut a, None, property::CSTS, false, t)? >> 2 & 3 == 2 {
                    return Ok(0);
                }
                if Instant::now() >= deadline {
                    return Err(HostError::Timeout("shutdown (CSTS.SHST)"));
                }
                std::thread::yield_now();
            }
        })();
        for q in &mut self.io {
            q.disconnect();
        }
        lock(&self.admin).disconnect();
        r.map(|_| ())
    }

    fn stop_keep_alive(&mut self) {
        if let Some((tx, h)) = self.keep_alive.take() {
            drop(tx);
            let _ = h.join();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop_keep_alive();
    }
}

/// The discovery log page of the discovery controller at `addr`
/// (NVMe-oF 1.1, 5.3): header first for the record count, then all.
pub fn discover(
    dev: &Device,
    addr: SocketAddr,
    hostnqn: &str,
    timeout: Duration,
) -> Result<Vec<DiscoveryEntry>, HostError> {
    let mut o = HostOptions::new(DISCOVERY_NQN);
    o.hostnqn = hostnqn.to_string();
    o.kato_ms = 0;
    o.timeout = timeout;
    let (mut q, _, _) = bring_up(dev, addr, &o)?;
    let get = |q: &mut IoQueue, len: usize| -> Result<Vec<u8>, HostError> {
        let mut out = vec![0u8; len];
        q.exec(
            "Get Log Page (discovery)",
            |q, slot| {
                let mut b = sqe(admin::GET_LOG_PAGE, 0);
                let mut s = Sqe::new_checked(&mut b[..]).expect("64");
                let numd = (len / 4 - 1) as u32;
                s.set_cdw(0, u32::from(log::DISCOVERY) | ((numd & 0xffff) << 16));
                s.set_cdw(1, numd >> 16);
                s.set_dptr(&q.sgl(slot, len as u32));
                b
            },
            None,
            Some(&mut out),
            timeout,
        )?;
        Ok(out)
    };
    let head = get(&mut q, 1024)?;
    let n = parse_discovery_log(&head).map_or(0, |(_, n, _)| n) as usize;
    let len = (1024 + 1024 * n).min(q.slot_len() - q.slot_len() % 1024);
    let page = if n > 0 { get(&mut q, len)? } else { head };
    let entries = parse_discovery_log(&page).map(|(_, _, e)| e).unwrap_or_default();
    q.disconnect();
    Ok(entries)
}
