//! One fio file on roce's initiator: a controller with one I/O queue as
//! deep as the job's `iodepth`, fio's I/Os turned into NVMe commands
//! (NVM Command Set 1.0: Read, Write, Flush, Dataset Management with
//! Deallocate for trims), and their completions handed back by handle.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use roce::{Device, DeviceConfig};
use roce_nvmf::initiator::{sqe, Controller, Done, HostError, HostOptions, IoQueue};
use roce_nvmf::wire::{io, Sqe};

use crate::spec::Spec;

/// The largest data slot we register per queue entry, whatever the
/// controller's MDTS allows.
const MAX_SLOT: usize = 1 << 20;

/// What fio asks of one I/O.
#[derive(Debug)]
pub enum Request<'a> {
    Read { offset: u64, len: usize },
    Write { offset: u64, data: &'a [u8] },
    Trim { offset: u64, len: u64 },
    Flush,
}

/// An I/O that cannot be sent: fio marks it failed with `errno`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub errno: i32,
    pub why: String,
}

/// An I/O's outcome: `Err` carries the errno and the NVMe status text.
pub type Outcome = Result<(), Refused>;

/// Copies a Read's data into the buffer it is given.
pub type CopyOut<'a> = dyn FnMut(&mut [u8]) -> Outcome + 'a;
/// Where a Read's data goes: runs the copy on its handle's buffer.
pub type Deliver<'a> = dyn FnMut(usize, &mut CopyOut<'_>) -> Outcome + 'a;

struct Pending {
    handle: usize,
    read_len: Option<usize>,
}

/// A connection for one file.
pub struct Conn {
    ctrl: Controller,
    nsid: u32,
    block: u64,
    blocks: u64,
    pending: Vec<Option<Pending>>,
    timeout: Duration,
    last_progress: Instant,
    _lease: Lease,
}

impl Conn {
    /// Connects to `spec`'s subsystem with an I/O queue of `depth`
    /// entries, each slot `max_transfer` bytes (cut to the controller's
    /// MDTS and to [`MAX_SLOT`]), and finds its namespace.
    pub fn open(spec: &Spec, depth: u16, max_transfer: usize) -> Result<Conn, String> {
        let lease = Lease::take(spec)?;
        let mut o = HostOptions::new(&spec.subnqn);
        if let Some(h) = &spec.hostnqn {
            o.hostnqn = h.clone();
        }
        o.timeout = spec.timeout;
        o.io_queues = 1;
        o.queue_depth = depth.max(2);
        o.max_transfer = max_transfer.clamp(4096, MAX_SLOT);
        let addr = SocketAddr::new(spec.traddr, spec.trsvcid);
        let mut ctrl = Controller::connect(&lease.dev, addr, &o)
            .map_err(|e| format!("connecting to {} at {addr}: {e}", spec.subnqn))?;
        let found = ctrl.namespaces().map_err(|e| format!("{}: Identify: {e}", spec.subnqn));
        let ns = match found {
            Ok(list) => list.into_iter().find(|(id, _)| *id == spec.nsid),
            Err(e) => {
                let _ = ctrl.disconnect();
                return Err(e);
            }
        };
        let Some((_, ns)) = ns else {
            let _ = ctrl.disconnect();
            return Err(format!("{} has no active namespace {}", spec.subnqn, spec.nsid));
        };
        let entries = ctrl.io_queues().first().map_or(0, |q| usize::from(q.depth()));
        Ok(Conn {
            ctrl,
            nsid: spec.nsid,
            block: ns.block_size(),
            blocks: ns.blocks,
            pending: (0..entries).map(|_| None).collect(),
            timeout: spec.timeout,
            last_progress: Instant::now(),
            _lease: lease,
        })
    }

    /// The namespace's size in bytes.
    pub fn size(&self) -> u64 {
        self.blocks * self.block
    }

    pub fn outstanding(&self) -> usize {
        self.pending.iter().filter(|p| p.is_some()).count()
    }

    fn queue(&mut self) -> &mut IoQueue {
        &mut self.ctrl.io_queues()[0]
    }

    /// The blocks `[offset, offset + len)` cover, or why they are not
    /// whole blocks inside the namespace.
    fn blocks_of(&self, offset: u64, len: u64) -> Result<(u64, u64), Refused> {
        let inval = |why: String| Refused { errno: libc::EINVAL, why };
        if offset % self.block != 0 || len % self.block != 0 || len == 0 {
            return Err(inval(format!(
                "offset {offset} length {len}: not whole {} B blocks of namespace {}",
                self.block, self.nsid
            )));
        }
        let (lba, n) = (offset / self.block, len / self.block);
        if lba.checked_add(n).is_none_or(|end| end > self.blocks) {
            return Err(inval(format!(
                "offset {offset} length {len}: past the end of namespace {} ({} bytes)",
                self.nsid,
                self.size()
            )));
        }
        Ok((lba, n))
    }

    /// Sends `req` for `handle`: `Ok(true)` queued, `Ok(false)` no free
    /// entry (fio reaps and retries), `Err` refused without sending.
    /// Sends the commands submitted since the last flush.
    pub fn flush(&mut self) -> Result<(), String> {
        self.queue().flush().map_err(|e| e.to_string())
    }

    pub fn submit(&mut self, handle: usize, req: Request<'_>) -> Result<bool, Refused> {
        let (nsid, max) = (self.nsid, self.ctrl.max_transfer());
        let mut b;
        let (data, read_len): (Option<&[u8]>, Option<usize>) = match req {
            Request::Read { offset, len } => {
                let (lba, n) = self.blocks_of(offset, len as u64)?;
                too_large(len, max)?;
                b = rw(io::READ, nsid, lba, n);
                (None, Some(len))
            }
            Request::Write { offset, data } => {
                let (lba, n) = self.blocks_of(offset, data.len() as u64)?;
                too_large(data.len(), max)?;
                b = rw(io::WRITE, nsid, lba, n);
                (Some(data), None)
            }
            Request::Trim { offset, len } => {
                let (lba, n) = self.blocks_of(offset, len)?;
                let count = u32::try_from(n).map_err(|_| Refused {
                    errno: libc::EINVAL,
                    why: format!("a trim of {len} bytes: more than 2^32 blocks"),
                })?;
                // One range (NR = 0), Deallocate (AD, bit 2 of CDW11);
                // the range: attributes, length in blocks, starting LBA.
                b = sqe(io::DATASET_MANAGEMENT, nsid);
                let mut s = Sqe::new_checked(&mut b[..]).expect("64 bytes");
                s.set_cdw(0, 0);
                s.set_cdw(1, 1 << 2);
                let mut range = [0u8; 16];
                range[4..8].copy_from_slice(&count.to_le_bytes());
                range[8..16].copy_from_slice(&lba.to_le_bytes());
                return self.send(handle, b, Some(&range), None);
            }
            Request::Flush => {
                b = sqe(io::FLUSH, nsid);
                (None, None)
            }
        };
        self.send(handle, b, data, read_len)
    }

    fn send(
        &mut self,
        handle: usize,
        mut b: [u8; roce_nvmf::wire::SQE_LEN],
        data: Option<&[u8]>,
        read_len: Option<usize>,
    ) -> Result<bool, Refused> {
        let eio = |e: HostError| Refused { errno: libc::EIO, why: e.to_string() };
        let q = self.queue();
        let Some(slot) = q.take_slot() else { return Ok(false) };
        let len = data.map_or(read_len.unwrap_or(0), <[u8]>::len);
        if let Some(d) = data {
            if let Err(e) = q.fill(slot, d) {
                q.give_back(slot);
                return Err(eio(e));
            }
        }
        Sqe::new_checked(&mut b[..]).expect("64 bytes").set_dptr(&q.sgl(slot, len as u32));
        if self.outstanding() == 0 {
            self.last_progress = Instant::now();
        }
        let q = self.queue();
        q.submit(slot, b).map_err(eio)?;
        self.pending[usize::from(slot)] = Some(Pending { handle, read_len });
        Ok(true)
    }

    /// Completions that arrived (waiting up to `wait` for the first), as
    /// `(handle, outcome)`; a Read's data is copied into `dest(handle)`
    /// first. An error means the connection failed: every outstanding
    /// I/O is lost with it.
    pub fn reap(
        &mut self,
        wait: Duration,
        out: &mut Vec<(usize, Outcome)>,
        dest: &mut Deliver<'_>,
    ) -> Result<(), String> {
        if self.outstanding() == 0 {
            return Ok(());
        }
        let mut done: Vec<Done> = Vec::new();
        self.queue().poll(wait, &mut done).map_err(|e| e.to_string())?;
        if done.is_empty() {
            if self.last_progress.elapsed() > self.timeout {
                return Err(format!(
                    "no completion from the controller for {:.1} s ({} commands outstanding)",
                    self.timeout.as_secs_f64(),
                    self.outstanding()
                ));
            }
            return Ok(());
        }
        self.last_progress = Instant::now();
        for d in done {
            let Some(p) = self.pending.get_mut(usize::from(d.slot)).and_then(Option::take) else {
                return Err(format!("a completion for entry {}, which has no I/O", d.slot));
            };
            let outcome = if !d.cqe.status.is_success() {
                Err(Refused { errno: libc::EIO, why: format!("NVMe status: {}", d.cqe.status) })
            } else if let Some(n) = p.read_len {
                let q = &self.ctrl.io_queues()[0];
                dest(p.handle, &mut |buf: &mut [u8]| {
                    let n = n.min(buf.len());
                    q.copy_out(d.slot, &mut buf[..n])
                        .map_err(|e| Refused { errno: libc::EIO, why: e.to_string() })
                })
            } else {
                Ok(())
            };
            out.push((p.handle, outcome));
        }
        Ok(())
    }

    /// Disconnects (Disconnect on the admin queue, then the CM's DREQ).
    pub fn close(self) -> Result<(), String> {
        self.ctrl.disconnect().map_err(|e| e.to_string())
    }
}

fn too_large(len: usize, max: usize) -> Result<(), Refused> {
    if len > max {
        return Err(Refused {
            errno: libc::EINVAL,
            why: format!("{len} bytes in one I/O: the connection takes at most {max} (use bs <= {max})"),
        });
    }
    Ok(())
}

/// A Read or Write of blocks `[lba, lba + n)`.
fn rw(opcode: u8, nsid: u32, lba: u64, n: u64) -> [u8; roce_nvmf::wire::SQE_LEN] {
    let mut b = sqe(opcode, nsid);
    let mut s = Sqe::new_checked(&mut b[..]).expect("64 bytes");
    s.set_qword_at(40, lba);
    s.set_cdw(2, (n - 1) as u32);
    b
}

/// The namespace size `spec` names, from a short connection (fio asks for
/// it before the job's own connection exists, perhaps in another process).
pub fn probe_size(spec: &Spec) -> Result<u64, String> {
    let c = Conn::open(spec, 2, 4096)?;
    let size = c.size();
    c.close().map(|()| size)
}

/// Devices of this process by address, shared by the jobs that run as
/// threads (`thread=1`), each with its own controller: a device owns UDP
/// 4791 of its address, and there can be one per address.
static DEVICES: Mutex<Vec<(IpAddr, Device, usize)>> = Mutex::new(Vec::new());

fn devices() -> MutexGuard<'static, Vec<(IpAddr, Device, usize)>> {
    DEVICES.lock().unwrap_or_else(|e| e.into_inner())
}

/// A use of the process's device on one address; the device closes with
/// the last (so nothing is left running when fio forks its jobs).
struct Lease {
    ip: IpAddr,
    dev: Device,
}

impl Lease {
    fn take(spec: &Spec) -> Result<Lease, String> {
        let ip = match spec.hostaddr {
            Some(ip) => ip,
            None => {
                roce::cm::route_to(spec.traddr).map_err(|e| format!("no route to {}: {e}", spec.traddr))?
            }
        };
        let mut d = devices();
        if let Some(e) = d.iter_mut().find(|e| e.0 == ip) {
            e.2 += 1;
            return Ok(Lease { ip, dev: e.1.clone() });
        }
        let dev = Device::open(DeviceConfig::new(SocketAddr::new(ip, roce::cm::ROCE_PORT))).map_err(|e| {
            format!(
                "cannot open a device on {ip}:{}: {e} (each process needs an address of its own: \
                 give each job hostaddr=, or run the jobs as threads with thread=1)",
                roce::cm::ROCE_PORT
            )
        })?;
        d.push((ip, dev.clone(), 1));
        Ok(Lease { ip, dev })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut d = devices();
        if let Some(i) = d.iter().position(|e| e.0 == self.ip) {
            d[i].2 -= 1;
            if d[i].2 == 0 {
                d.swap_remove(i);
            }
        }
    }
}

/// Connections of one job, by file.
#[derive(Default)]
pub struct Job {
    /// `io_u`s fio made for the job: its queue depth.
    pub io_units: u16,
    pub conns: HashMap<usize, Conn>,
    /// Completions not yet handed to fio, and those handed by the last
    /// `getevents` (what `event(i)` returns).
    pub ready: Vec<usize>,
    pub events: Vec<usize>,
}
