//! The collectives' [`Transport`] on `roce` devices (real UDP).
//!
//! **Shape.** Every rank opens one `roce` [`Device`] per channel
//! (`--qps-per-peer`), all bound to the address it reaches the rendezvous
//! from, each on a free UDP port, and on channel `c` two RC QPs to channel
//! `c` of every peer: one for data, one for credits (the trait's rule: a
//! credit never waits in a send queue behind data). A `roce` device sends
//! every QP from its one bound port, so one device per channel is what
//! gives each channel of a peer pair its own UDP source port (the ECMP
//! entropy a fabric hashes on). It is also
//! the cheapest honest way: a device costs one socket and one driver
//! thread, and nothing else in `roce` varies the source port.
//!
//! **Memory.** A registered region belongs to one device, so each channel
//! registers its own receive region and staging region, `n - 1` peers x
//! `slots` slots of `slot_bytes`. The algorithms reach the slots in place,
//! with no host copy: [`Transport::stage`] and [`Transport::read_slot`]
//! lend a slot's bytes through `roce::Mr::with_bytes_mut` / `with_bytes`,
//! which hold the device's lock while the algorithm fills the slot (header
//! and payload copied from the user's buffer) or reduces out of it, so the
//! NIC is kept off those bytes meanwhile (no `unsafe` here; the argument
//! is `roce`'s). The credit protocol decides when the bytes mean
//! something: a receive slot holds a message from its data's `Arrived`
//! until our notify releases it, a staging slot may be refilled once its
//! write's `Sent` came back.
//!
//! **Waiting.** [`RoceTransport::wait`] spins on the CQs with
//! `Cq::poll_or_drive` (the spinning thread drives the sockets while its
//! WRITEs are outstanding) for the spin budget, then sleeps until a CQ's
//! waker fires (`Cq::arm_waker` + `thread::park_timeout`), so an
//! oversubscribed host does not burn its cores on ranks that wait. The
//! budget, unless set, is chosen at connect time from how many ranks share
//! this host (peers at this rank's address, or any loopback address when
//! this rank is on one) against its cores: [`AUTO_SPIN`] when every rank
//! has a core, as MPI and NCCL spin; none when they must take turns, since
//! a spinning rank then holds the core its peer needs to make the progress
//! it waits for. A wake-up from sleep costs 50-200 us on a small virtual
//! machine (a blocking UDP ping-pong between two processes: 390 us round
//! trip), which is most of a small all-reduce.
//!
//! **Pacing.** `rate_bps` starts every QP of this rank at that rate under
//! DCQCN with the rate as its ceiling: with no congestion marks (loopback)
//! the engine's pacer holds it there, a static rate limit.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::thread::{self, Thread, ThreadId};
use std::time::{Duration, Instant};

use roce::{
    alloc_buffer, Access, CcAlgorithm, ConnectOptions, Cq, DcqcnParams, Device, DeviceConfig, Endpoint, Mr,
    Pd, Psn, Qp, QpBuilder, RecvWr, SendOp, SendWr, VerbsError, Wc, WcOpcode, WcStatus, WorkQueue, WC_ZERO,
};

use crate::error::TransportError;
use crate::header::Imm;
use crate::rendezvous::{Rendezvous, RendezvousError};
use crate::transport::{Completion, Layout, Transport};

mod wire;

/// The `wr_id` of credits (their completions are not reported).
const NOTIFY_ID: u64 = u64::MAX;
const RECV_ID: u64 = u64::MAX - 1;

/// Errors of building the transport.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("roce: {0}")]
    Roce(#[from] roce::Error),
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    #[error("bad transport configuration: {0}")]
    Config(String),
    #[error("rank {peer} sent an endpoint list this rank cannot use: {what}")]
    Protocol { peer: usize, what: String },
}

/// How to build the transport (the [`Layout`] plus what is `roce`'s).
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub layout: Layout,
    /// This rank's QPs paced at this rate, bits/s (`None`: line rate).
    pub rate_bps: Option<u64>,
    /// How long [`RoceTransport::wait`] spins before it sleeps; `None`:
    /// [`AUTO_SPIN`] if every rank on this host has a core, else none.
    pub spin: Option<Duration>,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig { layout: Layout::DEFAULT, rate_bps: None, spin: None }
    }
}

/// The spin budget of a rank that has a core to itself.
pub const AUTO_SPIN: Duration = Duration::from_millis(5);

/// Whether two ranks' addresses put them on one host: the same address, or
/// both loopback (`--np` places ranks on 127.0.0.1..N).
fn same_host(a: IpAddr, b: IpAddr) -> bool {
    let a = a.to_canonical();
    let b = b.to_canonical();
    a == b || (a.is_loopback() && b.is_loopback())
}

/// The spin budget `NetConfig::spin = None` resolves to.
fn auto_spin(ranks_here: usize, cores: usize) -> Duration {
    if ranks_here <= cores {
        AUTO_SPIN
    } else {
        Duration::ZERO
    }
}

/// One peer on one channel.
struct Link {
    /// Data WRITEs, both ways.
    qp: Qp,
    /// Credits, both ways.
    credit_qp: Qp,
    /// Where the peer's receive slots for this rank start.
    remote_addr: u64,
    remote_rkey: u32,
}

/// One device and everything on it.
struct Channel {
    dev: Device,
    _pd: Pd,
    cq: Cq,
    /// This rank's receive slots on this channel (peer-major).
    recv_mr: Mr,
    /// The registered copy of the staging slots on this channel.
    staging_mr: Mr,
    /// Indexed by peer rank; `None` for this rank.
    links: Vec<Option<Link>>,
    qpns: Vec<u32>,
    /// QPN (data or credit) -> peer.
    peer_of: HashMap<u32, usize>,
}

/// Wakes a parked thread (the waker every CQ is armed with).
struct Unpark(Thread);
impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// What waiting cost: spin iterations, sleeps and time asleep.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WaitStats {
    pub spins: u64,
    pub sleeps: u64,
    pub slept_ns: u64,
}

/// How a rank waits, as decided at connect time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Spin this long on the CQs before sleeping.
    pub spin: Duration,
    /// Ranks of the job on this host, this one included.
    pub ranks_here: usize,
    /// This host's cores (`available_parallelism`).
    pub cores: usize,
    /// Whether `spin` was chosen from the two (not set by the caller).
    pub auto: bool,
}

/// The transport of one rank.
pub struct RoceTransport {
    rank: usize,
    world: usize,
    cfg: NetConfig,
    chans: Vec<Channel>,
    /// Completions taken from the CQs while waiting, not yet handed out.
    stash: Vec<(usize, Wc)>,
    wcs: Vec<Wc>,
    waker: Waker,
    waker_thread: ThreadId,
    origin: Instant,
    policy: WaitPolicy,
    pub stats: WaitStats,
    /// Credits `(channel, peer, imm)` whose credit QP's send queue was
    /// full, posted by the next `poll` (whose completions make room).
    credit_backlog: Vec<(usize, usize, u32)>,
}

fn hint(s: WcStatus) -> &'static str {
    match s {
        WcStatus::RetryExcErr => ": the rank does not answer (transport retries exhausted)",
        WcStatus::RnrRetryExcErr => ": the rank posted no receive (RNR retries exhausted)",
        WcStatus::RemAccessErr => ": the rank refused the access (R_Key or address)",
        WcStatus::WrFlushErr => ": the QP is in the error state",
        _ => "",
    }
}

impl RoceTransport {
    /// Opens the devices, creates and connects the QPs, exchanging
    /// endpoints and receive regions through the rendezvous. Every rank
    /// must pass the same layout.
    pub fn connect(rdv: &mut Rendezvous, cfg: NetConfig) -> Result<RoceTransport, NetError> {
        let (rank, world) = (rdv.rank(), rdv.world());
        let l = cfg.layout;
        if l.channels == 0 || l.channels > 64 {
            return Err(NetError::Config(format!("{} QPs per peer: 1 to 64", l.channels)));
        }
        if l.slots == 0 || l.slots > Layout::MAX_SLOTS || l.slot_bytes == 0 || l.slot_bytes > (1 << 30) {
            return Err(NetError::Config(format!("{} slots of {} bytes", l.slots, l.slot_bytes)));
        }
        let ip: IpAddr = rdv.local_ip();
        let per_chan = world.saturating_sub(1) * l.slots * l.slot_bytes;
        let mut chans = Vec::with_capacity(l.channels);
        let mut mine = wire::Blob::default();
        for c in 0..l.channels {
            let mut dc = DeviceConfig::new(SocketAddr::new(ip, 0));
            if let Some(r) = cfg.rate_bps {
                dc.cc = CcAlgorithm::Dcqcn(DcqcnParams { max_rate_bps: r, ..DcqcnParams::paper() });
                dc.line_rate_bps = r;
            }
            let dev = Device::open(dc)?;
            let pd = dev.alloc_pd()?;
            // Per QP at most `slots` WRITEs (data, or credits) in flight
            // each way.
            let wr = (l.slots + 8) as u32;
            let cq = dev.create_cq((world * (3 * l.slots + 8)).clamp(64, 1 << 20))?;
            // A zero-byte region cannot be registered: a world of one keeps
            // a token page.
            let recv_mr =
                pd.reg_mr(alloc_buffer(per_chan.max(64)), Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
            let staging_mr = pd.reg_mr(alloc_buffer(per_chan.max(64)), Access::LOCAL_WRITE)?;
            let mut links = Vec::with_capacity(world);
            let mut qpns = Vec::new();
            let mut peer_of = HashMap::new();
            for peer in 0..world {
                if peer == rank {
                    links.push(None);
                    continue;
                }
                let qp = pd.create_qp(QpBuilder::rc(&cq).max_send_wr(wr).max_recv_wr(wr).max_sge(1, 1))?;
                let credit_qp =
                    pd.create_qp(QpBuilder::rc(&cq).max_send_wr(wr).max_recv_wr(wr).max_sge(1, 1))?;
                let ep = qp.endpoint();
                let cep = credit_qp.endpoint();
                let pi = if peer < rank { peer } else { peer - 1 };
                mine.entries.push(wire::Entry {
                    channel: c as u32,
                    peer: peer as u32,
                    gid: roce::gid_to_bytes(ep.gid),
                    port: ep.port,
                    qpn: ep.qpn,
                    psn: ep.psn.value(),
                    credit_qpn: cep.qpn,
                    credit_psn: cep.psn.value(),
                    addr: recv_mr.addr() + (pi * l.slots * l.slot_bytes) as u64,
                    rkey: recv_mr.rkey(),
                });
                for q in [&qp, &credit_qp] {
                    qpns.push(q.qpn());
                    peer_of.insert(q.qpn(), peer);
                }
                links.push(Some(Link { qp, credit_qp, remote_addr: 0, remote_rkey: 0 }));
            }
            chans.push(Channel { dev, _pd: pd, cq, recv_mr, staging_mr, links, qpns, peer_of });
        }
        let all = rdv.all_gather(&mine.encode())?;
        // ACK timeout 4.096 us x 2^16 = 268 ms, 7 retries: about 2 s
        // without an answer before a QP fails. Ranks on an oversubscribed
        // host can go unscheduled (and their socket buffers overflow) for
        // hundreds of ms; a rank really gone is reported by the rendezvous
        // first, by name.
        let opts = ConnectOptions { timeout: 16, retry_cnt: 7, rnr_retry: 7, ..ConnectOptions::default() };
        let mut ranks_here = 1;
        for (peer, blob) in all.iter().enumerate() {
            if peer == rank {
                continue;
            }
            let b = wire::Blob::decode(blob)
                .ok_or_else(|| NetError::Protocol { peer, what: "a malformed endpoint list".into() })?;
            if b.entries.first().is_some_and(|e| same_host(roce::gid_from_bytes(e.gid), ip)) {
                ranks_here += 1;
            }
            for (c, ch) in chans.iter_mut().enumerate() {
                let e = b
                    .entries
                    .iter()
                    .find(|e| e.channel as usize == c && e.peer as usize == rank)
                    .ok_or_else(|| NetError::Protocol {
                        peer,
                        what: format!(
                            "no endpoint for channel {c} (does it run with the same --qps-per-peer?)"
                        ),
                    })?;
                let link = ch.links[peer].as_mut().expect("a link per peer");
                let gid = roce::gid_from_bytes(e.gid);
                let remote = Endpoint { gid, port: e.port, qpn: e.qpn, psn: Psn::new(e.psn) };
                let credit = Endpoint { gid, port: e.port, qpn: e.credit_qpn, psn: Psn::new(e.credit_psn) };
                link.qp.connect(&remote, &opts)?;
                link.credit_qp.connect(&credit, &opts)?;
                link.remote_addr = e.addr;
                link.remote_rkey = e.rkey;
                for q in [&link.qp, &link.credit_qp] {
                    for _ in 0..l.slots + 4 {
                        q.post_recv(RecvWr { wr_id: RECV_ID, sg_list: vec![] })?;
                    }
                }
            }
        }
        // Every QP is connected before anyone writes.
        rdv.all_gather(&[])?;
        let cores = thread::available_parallelism().map_or(1, |c| c.get());
        let policy = WaitPolicy {
            spin: cfg.spin.unwrap_or_else(|| auto_spin(ranks_here, cores)),
            ranks_here,
            cores,
            auto: cfg.spin.is_none(),
        };
        Ok(RoceTransport {
            rank,
            world,
            stash: Vec::new(),
            wcs: vec![WC_ZERO; 64],
            waker: Waker::from(Arc::new(Unpark(thread::current()))),
            waker_thread: thread::current().id(),
            origin: Instant::now(),
            chans,
            cfg,
            policy,
            stats: WaitStats::default(),
            credit_backlog: Vec::new(),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world(&self) -> usize {
        self.world
    }
    pub fn layout(&self) -> Layout {
        self.cfg.layout
    }
    /// How this rank waits.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }
    /// Each channel's local UDP address: its QPs' source port.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.chans.iter().map(|c| c.dev.local_addr()).collect()
    }

    /// The engine counters of every channel's device, summed (name, value).
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut sum: Vec<(&'static str, u64)> = Vec::new();
        for ch in &self.chans {
            let c = ch.dev.counters();
            for (i, (name, v)) in c.iter().enumerate() {
                match sum.get_mut(i) {
                    Some(e) => e.1 += v,
                    None => sum.push((name, v)),
                }
            }
        }
        sum
    }

    fn peer_index(&self, peer: usize) -> usize {
        if peer < self.rank {
            peer
        } else {
            peer - 1
        }
    }

    /// Offset of `(peer, slot)` in one channel's region.
    fn chan_offset(&self, peer: usize, slot: usize) -> usize {
        let l = &self.cfg.layout;
        (self.peer_index(peer) * l.slots + slot) * l.slot_bytes
    }

    /// Waits until a completion is ready or `until_ns` (transport clock)
    /// passes: spins for the spin budget, then sleeps on the CQs' wakers.
    /// What it takes from the CQs is kept for the next [`Transport::poll`].
    pub fn wait(&mut self, until_ns: u64) -> Result<bool, TransportError> {
        let start = Instant::now();
        loop {
            if !self.stash.is_empty() {
                return Ok(true);
            }
            for c in 0..self.chans.len() {
                let ch = &self.chans[c];
                let n = ch
                    .cq
                    .poll_or_drive(&mut self.wcs, &ch.qpns, 1)
                    .map_err(|e| TransportError::new(None, format!("polling channel {c}: {e}")))?;
                self.stash.extend(self.wcs[..n].iter().map(|w| (c, *w)));
            }
            if !self.stash.is_empty() {
                return Ok(true);
            }
            let now = self.now_ns();
            if now >= until_ns {
                return Ok(false);
            }
            if start.elapsed() < self.policy.spin {
                self.stats.spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if self.waker_thread != thread::current().id() {
                self.waker = Waker::from(Arc::new(Unpark(thread::current())));
                self.waker_thread = thread::current().id();
            }
            // Hand the sockets back to the driver threads (a spin with
            // WRITEs outstanding leased them to this thread: nobody would
            // receive while it sleeps), taking what that last look brings.
            for c in 0..self.chans.len() {
                let n = self.chans[c]
                    .cq
                    .poll_or_drive(&mut self.wcs, &[], 1)
                    .map_err(|e| TransportError::new(None, format!("polling channel {c}: {e}")))?;
                self.stash.extend(self.wcs[..n].iter().map(|w| (c, *w)));
            }
            if !self.stash.is_empty() {
                return Ok(true);
            }
            // A CQ that already holds a completion says so when armed.
            let mut ready = false;
            for ch in &self.chans {
                ready |= ch.cq.arm_waker(&self.waker);
            }
            if !ready {
                self.stats.sleeps += 1;
                let t = Instant::now();
                thread::park_timeout(Duration::from_nanos(until_ns - now).min(Duration::from_millis(5)));
                self.stats.slept_ns += t.elapsed().as_nanos() as u64;
            }
        }
    }

    fn on_wc(&mut self, c: usize, wc: &Wc, out: &mut Vec<Completion>) -> Result<(), TransportError> {
        let peer = self.chans[c].peer_of.get(&wc.qp_num).copied();
        if wc.status != WcStatus::Success {
            let what = match wc.wr_id {
                NOTIFY_ID => "a credit",
                RECV_ID => "a receive",
                _ => "a data WRITE",
            };
            return Err(TransportError::new(
                peer,
                format!(
                    "{what} on channel {c} completed with {:?} (vendor error {:#x}){}",
                    wc.status,
                    wc.vendor_err,
                    hint(wc.status)
                ),
            ));
        }
        let Some(peer) = peer else {
            return Err(TransportError::new(None, format!("a completion for unknown QP {:#x}", wc.qp_num)));
        };
        match wc.opcode {
            WcOpcode::RdmaWrite if wc.wr_id == NOTIFY_ID => {}
            WcOpcode::RdmaWrite => out.push(Completion::Sent { peer, channel: c, token: wc.wr_id }),
            WcOpcode::RecvRdmaWithImm => {
                let link = self.chans[c].links[peer].as_ref().expect("a link per peer");
                let qp = if wc.qp_num == link.credit_qp.qpn() { &link.credit_qp } else { &link.qp };
                qp.post_recv(RecvWr { wr_id: RECV_ID, sg_list: vec![] })
                    .map_err(|e| TransportError::new(Some(peer), format!("reposting a receive: {e}")))?;
                let len = wc.byte_len as usize;
                let l = self.cfg.layout;
                if len > 0
                    && !matches!(Imm::parse(wc.imm_data), Imm::Data { slot, .. } if slot < l.slots && len <= l.slot_bytes)
                {
                    return Err(TransportError::new(
                        Some(peer),
                        format!("{len} bytes with immediate {:#x}: no such slot", wc.imm_data),
                    ));
                }
                out.push(Completion::Arrived { peer, channel: c, imm: wc.imm_data });
            }
            _ => {}
        }
        Ok(())
    }

    /// Where slot `(peer, channel, slot)` lies in its channel's regions.
    fn slot_range(&self, peer: usize, channel: usize, slot: usize) -> Result<(usize, usize), TransportError> {
        let l = self.cfg.layout;
        self.link(peer, channel)?;
        if slot >= l.slots {
            return Err(TransportError::new(Some(peer), format!("slot {slot}: there are {}", l.slots)));
        }
        Ok((self.chan_offset(peer, slot), l.slot_bytes))
    }

    fn link(&self, peer: usize, channel: usize) -> Result<&Link, TransportError> {
        self.chans.get(channel).and_then(|ch| ch.links.get(peer)).and_then(Option::as_ref).ok_or_else(|| {
            TransportError::new(Some(peer), format!("no QP to rank {peer} on channel {channel}"))
        })
    }
}

impl Transport for RoceTransport {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn stage(
        &mut self,
        peer: usize,
        channel: usize,
        slot: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), TransportError> {
        let (at, len) = self.slot_range(peer, channel, slot)?;
        self.chans[channel].staging_mr.with_bytes_mut(at, len, f).map_err(|e| {
            TransportError::new(Some(peer), format!("filling staging slot {slot} of channel {channel}: {e}"))
        })
    }

    fn read_slot(
        &self,
        peer: usize,
        channel: usize,
        slot: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TransportError> {
        let (at, len) = self.slot_range(peer, channel, slot)?;
        self.chans[channel].recv_mr.with_bytes(at, len, f).map_err(|e| {
            TransportError::new(Some(peer), format!("reading receive slot {slot} of channel {channel}: {e}"))
        })
    }

    fn write(
        &mut self,
        peer: usize,
        channel: usize,
        slot: usize,
        len: usize,
        imm: u32,
        token: u64,
    ) -> Result<(), TransportError> {
        let l = self.cfg.layout;
        if slot >= l.slots || len > l.slot_bytes || token >= RECV_ID {
            return Err(TransportError::new(Some(peer), format!("write of {len} B to slot {slot}")));
        }
        let at = self.chan_offset(peer, slot);
        let link = self.link(peer, channel)?;
        let ch = &self.chans[channel];
        let err = |e: roce::Error| {
            TransportError::new(Some(peer), format!("posting a WRITE on channel {channel}: {e}"))
        };
        // The peer's slots for this rank start at `remote_addr`.
        let remote_addr = link.remote_addr + (slot * l.slot_bytes) as u64;
        let op = SendOp::WriteWithImm { remote_addr, rkey: link.remote_rkey, imm };
        let sg = if len > 0 { vec![ch.staging_mr.sge(at as u64, len as u32)] } else { vec![] };
        link.qp.post_send(SendWr::new(token, op, sg)).map_err(err)
    }

    fn notify(&mut self, peer: usize, channel: usize, imm: u32) -> Result<(), TransportError> {
        let link = self.link(peer, channel)?;
        let op = SendOp::WriteWithImm { remote_addr: link.remote_addr, rkey: link.remote_rkey, imm };
        // Signalled, though nobody is told: an unsignalled WR keeps its
        // send-queue entry until a later signalled one completes, and a QP
        // that carries only credits would fill its queue.
        let wr = SendWr::new(NOTIFY_ID, op, vec![]);
        match link.credit_qp.post_send(wr) {
            Ok(()) => Ok(()),
            // The queue can fill when the credits' ACKs come back later
            // than the data the credits let through (they travel another
            // path); held for the next poll.
            Err(roce::Error::Verbs(VerbsError::QueueFull(WorkQueue::Send))) => {
                self.credit_backlog.push((channel, peer, imm));
                Ok(())
            }
            Err(e) => {
                Err(TransportError::new(Some(peer), format!("posting a credit on channel {channel}: {e}")))
            }
        }
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<(), TransportError> {
        let stash = std::mem::take(&mut self.stash);
        for (c, wc) in &stash {
            self.on_wc(*c, wc, out)?;
        }
        for c in 0..self.chans.len() {
            loop {
                let n = self.chans[c]
                    .cq
                    .poll(&mut self.wcs)
                    .map_err(|e| TransportError::new(None, format!("polling channel {c}: {e}")))?;
                for i in 0..n {
                    let wc = self.wcs[i];
                    self.on_wc(c, &wc, out)?;
                }
                if n < self.wcs.len() {
                    break;
                }
            }
        }
        for (c, peer, imm) in std::mem::take(&mut self.credit_backlog) {
            self.notify(peer, c, imm)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
