//! Fabrics commands (Connect, Property Get/Set, Disconnect) and the admin
//! command set a fabrics host uses (Identify, Get Log Page, Get/Set
//! Features, Keep Alive, Asynchronous Event Request, Abort).

use super::command::{Cmd, Outcome, Place, QueueState};
use super::{Ctrl, Target};
use crate::wire::fabrics::{connect_data, fctype, property, Connect, ConnectData, PropertyCmd};
use crate::wire::identify::{
    active_ns_list, cns, cntrltype, discovery_log, ns_descriptors, ControllerInfo, DiscoveryEntry,
    NamespaceInfo, IDENTIFY_LEN,
};
use crate::wire::{admin as op, feature, log, Status, DISCOVERY_NQN};

/// NVMe 1.3: what Linux hosts expect of a fabrics controller (Identify
/// namespace descriptors, the active namespace list).
const VERSION: u32 = 0x0001_0300;
/// Keep Alive granularity in 100 ms units (Identify KAS).
const KAS: u16 = 1;
/// Asynchronous Event Requests held at once (AERL, 0's based: 4).
const AERL: u8 = 3;

/// "Connect Invalid Parameters" naming the bad field (NVMe-oF 1.1,
/// Fig. 22): IPO in bits 15:0, IATTR (1 = in the data) in bit 16.
fn invalid_param(in_data: bool, offset: u16) -> Outcome {
    Outcome::Done {
        status: Status::CONNECT_INVALID_PARAMETERS,
        dw0: (u32::from(in_data) << 16) | u32::from(offset),
        dw1: 0,
    }
}

pub(super) fn fabrics(q: &mut QueueState, cmd: &Cmd<'_>) -> Outcome {
    match cmd.sqe.byte(4) {
        fctype::CONNECT => connect(q, cmd),
        fctype::PROPERTY_GET | fctype::PROPERTY_SET if q.qid != 0 => Outcome::err(Status::INVALID_OPCODE),
        t @ (fctype::PROPERTY_GET | fctype::PROPERTY_SET) => {
            let Some(cntlid) = q.cntlid else { return Outcome::err(Status::COMMAND_SEQUENCE_ERROR) };
            let mut st = q.target.lock();
            let Some(c) = st.ctrls.get_mut(&cntlid) else { return Outcome::err(Status::ABORTED_SQ_DELETION) };
            c.last_activity_ns = cmd.now;
            let p = PropertyCmd::parse(&cmd.sqe);
            if t == fctype::PROPERTY_GET {
                property_get(&q.target, c, p)
            } else {
                property_set(c, p)
            }
        }
        fctype::DISCONNECT => {
            if q.cntlid.is_none() {
                return Outcome::err(Status::COMMAND_SEQUENCE_ERROR);
            }
            q.request_disconnect();
            Outcome::ok()
        }
        _ => Outcome::err(Status::INVALID_OPCODE),
    }
}

/// Connect (NVMe-oF 1.1, 3.3): the first command on every queue.
fn connect(q: &mut QueueState, cmd: &Cmd<'_>) -> Outcome {
    let refuse = |q: &QueueState, o: Outcome| {
        q.target.lock().stats.connects_refused += 1;
        o
    };
    if q.cntlid.is_some() {
        return refuse(q, Outcome::err(Status::COMMAND_SEQUENCE_ERROR));
    }
    let c = Connect::parse(&cmd.sqe);
    if c.recfmt != 0 {
        return refuse(q, Outcome::err(Status::CONNECT_INCOMPATIBLE_FORMAT));
    }
    // The queue is the one the RDMA CM request named, no larger than it.
    if c.qid != q.qid {
        return refuse(q, invalid_param(false, 42));
    }
    if c.sqsize == 0 || c.sqsize >= q.crqsize() {
        return refuse(q, invalid_param(false, 44));
    }
    let Some(data) = cmd.data else {
        return Outcome::NeedData { len: connect_data::LEN as u32, into: Place::Buffer };
    };
    let d = match ConnectData::parse(data) {
        Ok(d) => d,
        Err(crate::wire::fabrics::ConnectDataError::Nqn(at)) => return refuse(q, invalid_param(true, at)),
        Err(_) => return refuse(q, Outcome::err(Status::DATA_SGL_LENGTH_INVALID)),
    };
    let target = q.target.clone();
    let subsys = if d.subnqn == DISCOVERY_NQN {
        None
    } else {
        match target.cfg.subsystems.iter().position(|s| s.nqn == d.subnqn) {
            Some(i) => Some(i),
            None => return refuse(q, invalid_param(true, connect_data::SUBNQN)),
        }
    };
    if let Some(i) = subsys {
        if !target.cfg.subsystems[i].allows(&d.hostnqn) {
            return refuse(q, Outcome::err(Status::CONNECT_INVALID_HOST));
        }
    }
    let mut st = target.lock();
    if q.qid == 0 {
        if d.cntlid != 0xFFFF {
            // Only the dynamic controller model is served.
            drop(st);
            return refuse(q, invalid_param(true, connect_data::CNTLID));
        }
        let Some(id) = Target::alloc_cntlid(&mut st) else {
            drop(st);
            return refuse(q, Outcome::err(Status::CONNECT_CONTROLLER_BUSY));
        };
        st.ctrls.insert(
            id,
            Ctrl {
                subsys,
                hostnqn: d.hostnqn,
                hostid: d.hostid,
                kato_ms: c.kato,
                last_activity_ns: cmd.now,
                cc: 0,
                csts: 0,
                granted_io: None,
                io_queues: Default::default(),
                async_event_config: 0,
                write_cache: true,
                aers: 0,
            },
        );
        st.stats.controllers_made += 1;
        q.cntlid = Some(id);
        return Outcome::ok_dw0(u32::from(id));
    }
    // An I/O queue joins the controller its admin queue made: same
    // subsystem, same host, a QID it may have, not taken, controller on.
    let max_io = target.cfg.max_io_queues;
    let ok = match st.ctrls.get_mut(&d.cntlid) {
        Some(c)
            if c.subsys == subsys && subsys.is_some() && c.hostnqn == d.hostnqn && c.hostid == d.hostid =>
        {
            c
        }
        _ => {
            st.stats.connects_refused += 1;
            return invalid_param(true, connect_data::CNTLID);
        }
    };
    if ok.csts & 1 == 0 {
        st.stats.connects_refused += 1;
        return Outcome::err(Status::COMMAND_SEQUENCE_ERROR);
    }
    if q.qid > ok.granted_io.unwrap_or(max_io) || ok.io_queues.contains(&q.qid) {
        st.stats.connects_refused += 1;
        return invalid_param(false, 42);
    }
    ok.io_queues.insert(q.qid);
    ok.last_activity_ns = cmd.now;
    q.cntlid = Some(d.cntlid);
    Outcome::ok_dw0(u32::from(d.cntlid))
}

fn cap(t: &Target) -> u64 {
    // MQES (0's based), CQR (contiguous queues required), TO = 15 x 500 ms,
    // CSS bit 37 (NVM command set), MPSMIN = MPSMAX = 0 (4 KiB pages).
    let mqes = u64::from(t.cfg.max_queue_entries - 1);
    mqes | (1 << 16) | (15 << 24) | (1 << 37)
}

fn property_get(t: &Target, c: &Ctrl, p: PropertyCmd) -> Outcome {
    let v: u64 = match (p.offset, p.size8) {
        (property::CAP, true) => cap(t),
        (property::VS, false) => u64::from(VERSION),
        (property::CC, false) => u64::from(c.cc),
        (property::CSTS, false) => u64::from(c.csts),
        _ => return Outcome::err(Status::INVALID_FIELD),
    };
    Outcome::Done { status: Status::SUCCESS, dw0: v as u32, dw1: (v >> 32) as u32 }
}

/// Property Set: only CC is writable. CC.EN 0 -> 1 readies the controller
/// (CSTS.RDY) if the entry sizes are NVMe-oF's (IOSQES 6, IOCQES 4; else
/// CSTS.CFS); 1 -> 0 resets it; CC.SHN asks for shutdown, which is at once
/// complete (CSTS.SHST = 10b): nothing is cached that a flush must save
/// that the back-ends have not been asked to save by Flush.
fn property_set(c: &mut Ctrl, p: PropertyCmd) -> Outcome {
    if p.offset != property::CC || p.size8 {
        return Outcome::err(Status::INVALID_FIELD);
    }
    let cc = p.value as u32;
    let en = cc & 1 != 0;
    let was = c.cc & 1 != 0;
    c.cc = cc;
    if en && !was {
        let iosqes = (cc >> 16) & 0xf;
        let iocqes = (cc >> 20) & 0xf;
        let io_ctrl = c.subsys.is_some();
        if io_ctrl && (iosqes != 6 || iocqes != 4) {
            c.csts = 1 << 1; // CFS
        } else {
            c.csts = 1;
        }
    } else if !en && was {
        c.csts = 0;
        c.granted_io = None;
    }
    if (cc >> 14) & 3 != 0 {
        c.csts = (c.csts & !(3 << 2)) | (2 << 2);
    }
    Outcome::ok()
}

pub(super) fn admin(q: &mut QueueState, cntlid: u16, ready: bool, cmd: &Cmd<'_>, buf: &mut [u8]) -> Outcome {
    if !ready {
        return Outcome::err(Status::COMMAND_SEQUENCE_ERROR);
    }
    let t = q.target.clone();
    match cmd.sqe.opcode() {
        op::IDENTIFY => identify(&t, cntlid, cmd, buf),
        op::GET_LOG_PAGE => get_log_page(&t, cntlid, cmd, buf),
        op::SET_FEATURES => set_features(&t, cntlid, cmd),
        op::GET_FEATURES => get_features(&t, cntlid, cmd),
        // The activity stamp was moved on receipt; that is the keep-alive.
        op::KEEP_ALIVE => Outcome::ok(),
        op::ASYNC_EVENT_REQUEST => {
            let mut st = t.lock();
            let Some(c) = st.ctrls.get_mut(&cntlid) else { return Outcome::err(Status::ABORTED_SQ_DELETION) };
            if c.aers > u32::from(AERL) {
                return Outcome::err(Status::ASYNC_EVENT_LIMIT);
            }
            c.aers += 1;
            Outcome::Park
        }
        // Abort: "not aborted" (DW0 bit 0); commands here finish quickly.
        op::ABORT => Outcome::ok_dw0(1),
        _ => Outcome::err(Status::INVALID_OPCODE),
    }
}

fn identify(t: &Target, cntlid: u16, cmd: &Cmd<'_>, buf: &mut [u8]) -> Outcome {
    let cns_v = (cmd.sqe.cdw(0) & 0xff) as u8;
    let csi = (cmd.sqe.cdw(1) >> 24) as u8;
    let nsid = cmd.sqe.nsid();
    let subsys = t.lock().ctrls.get(&cntlid).map(|c| c.subsys);
    let Some(subsys) = subsys else { return Outcome::err(Status::ABORTED_SQ_DELETION) };
    let namespaces = subsys.map(|i| &t.cfg.subsystems[i].namespaces[..]).unwrap_or(&[]);
    let ns = |nsid: u32| nsid.checked_sub(1).and_then(|i| namespaces.get(i as usize));
    let data = match cns_v {
        cns::CONTROLLER => controller_info(t, subsys, cntlid).emit(),
        cns::NAMESPACE => match ns(nsid) {
            Some(n) => {
                let (nguid, _) = ids(t, subsys, nsid);
                NamespaceInfo { blocks: n.blocks(), lbads: n.lbads, nguid, eui64: [0; 8] }.emit()
            }
            None => return Outcome::err(Status::INVALID_NAMESPACE),
        },
        cns::ACTIVE_NS_LIST if nsid < 0xFFFF_FFFE => active_ns_list(1..=namespaces.len() as u32, nsid),
        cns::NS_DESCRIPTORS => match ns(nsid) {
            Some(_) => {
                let (nguid, uuid) = ids(t, subsys, nsid);
                ns_descriptors(&nguid, &uuid)
            }
            None => return Outcome::err(Status::INVALID_NAMESPACE),
        },
        // The NVM command set's controller data: no limits (all zero).
        cns::CS_CONTROLLER if csi == 0 => vec![0u8; IDENTIFY_LEN],
        _ => return Outcome::err(Status::INVALID_FIELD),
    };
    deliver(cmd, buf, &data)
}

/// Copies a data structure to the command's buffer for the host: as much
/// as the host's SGL takes (a host may read the first bytes only).
fn deliver(cmd: &Cmd<'_>, buf: &mut [u8], data: &[u8]) -> Outcome {
    let n = data.len().min(cmd.sgl_len as usize).min(buf.len());
    buf[..n].copy_from_slice(&data[..n]);
    Outcome::Deliver { len: n as u32, dw0: 0, from: Place::Buffer }
}

/// Stable identifiers of a namespace (NGUID, UUID), derived from the
/// subsystem's NQN and the NSID, so that a host sees the same namespace
/// across reconnections and restarts (Linux keys multipath on them).
fn ids(t: &Target, subsys: Option<usize>, nsid: u32) -> ([u8; 16], [u8; 16]) {
    let nqn = t.subsys_nqn(subsys);
    let h = |seed: u64| {
        let mut x = 0xcbf2_9ce4_8422_2325u64 ^ seed;
        for b in nqn.bytes().chain(nsid.to_le_bytes()) {
            x = (x ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        x
    };
    let mut nguid = [0u8; 16];
    nguid[..8].copy_from_slice(&h(1).to_be_bytes());
    nguid[8..].copy_from_slice(&h(2).to_be_bytes());
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&h(3).to_be_bytes());
    uuid[8..].copy_from_slice(&h(4).to_be_bytes());
    uuid[6] = (uuid[6] & 0x0f) | 0x80; // RFC 9562 version 8 (custom)
    uuid[8] = (uuid[8] & 0x3f) | 0x80; // variant 10
    (nguid, uuid)
}

fn controller_info(t: &Target, subsys: Option<usize>, cntlid: u16) -> ControllerInfo {
    let nqn = t.subsys_nqn(subsys).to_string();
    // The serial is the subsystem's (every controller of a subsystem
    // reports the same one, as Linux checks).
    let serial = format!(
        "{}{:012x}",
        t.cfg.serial,
        ids(t, subsys, 0).0[..6].iter().fold(0u64, |a, &b| a << 8 | u64::from(b))
    );
    let io = subsys.is_some();
    ControllerInfo {
        serial,
        model: if io { "roce NVMe-oF target".into() } else { "roce NVMe-oF discovery".into() },
        firmware: env!("CARGO_PKG_VERSION").into(),
        cntlid,
        version: VERSION,
        cntrltype: if io { cntrltype::IO } else { cntrltype::DISCOVERY },
        mdts: t.cfg.mdts(),
        kas: KAS,
        aerl: AERL,
        maxcmd: t.cfg.max_queue_entries,
        nn: subsys.map_or(0, |i| t.cfg.subsystems[i].namespaces.len() as u32),
        // Dataset Management (bit 2) and Write Zeroes (bit 3).
        oncs: if io { 0b1100 } else { 0 },
        vwc: io,
        // SGLs supported (01b), keyed data blocks (bit 2), and the offset
        // (in-capsule) sub type (bit 20) when in-capsule data is on.
        sgls: 0b101 | if t.cfg.in_capsule > 0 { 1 << 20 } else { 0 },
        subnqn: nqn,
        ioccsz: (64 + t.cfg.in_capsule) / 16,
        iorcsz: 1,
        icdoff: 0,
        msdbd: 1,
    }
}

fn get_log_page(t: &Target, cntlid: u16, cmd: &Cmd<'_>, buf: &mut [u8]) -> Outcome {
    let cdw10 = cmd.sqe.cdw(0);
    let lid = (cdw10 & 0xff) as u8;
    let numd = ((u64::from(cmd.sqe.cdw(1) & 0xffff) << 16) | u64::from(cdw10 >> 16)) + 1;
    let offset = (u64::from(cmd.sqe.cdw(3)) << 32) | u64::from(cmd.sqe.cdw(2));
    let len = numd * 4;
    if offset % 4 != 0 || len > buf.len() as u64 {
        return Outcome::err(Status::INVALID_FIELD);
    }
    let (subsys, hostnqn) = match t.lock().ctrls.get(&cntlid) {
        Some(c) => (c.subsys, c.hostnqn.clone()),
        None => return Outcome::err(Status::ABORTED_SQ_DELETION),
    };
    let page = match (lid, subsys) {
        (log::DISCOVERY, None) => {
            // The subsystems this host may connect to (NVMe-oF 1.1, 5.3).
            let entries: Vec<DiscoveryEntry> = t
                .cfg
                .subsystems
                .iter()
                .filter(|s| s.allows(&hostnqn))
                .map(|s| DiscoveryEntry {
                    trtype: 1,
                    adrfam: if t.cfg.traddr.contains(':') { 2 } else { 1 },
                    subtype: 2,
                    portid: 1,
                    cntlid: 0xFFFF,
                    asqsz: 32,
                    trsvcid: t.cfg.trsvcid.to_string(),
                    subnqn: s.nqn.clone(),
                    traddr: t.cfg.traddr.clone(),
                })
                .collect();
            discovery_log(1, &entries)
        }
        // Error information: no entries (64 bytes each, zero).
        (log::ERROR, Some(_)) => vec![0u8; 64],
        (log::SMART, Some(_)) => vec![0u8; 512],
        (log::FIRMWARE_SLOT, Some(_)) => {
            let mut p = vec![0u8; 512];
            p[0] = 1; // AFI: slot 1 active
            crate::wire::put_str(&mut p[8..16], env!("CARGO_PKG_VERSION"), b' ');
            p
        }
        (log::CHANGED_NAMESPACES, Some(_)) => vec![0u8; 4096],
        _ => return Outcome::err(Status::INVALID_LOG_PAGE),
    };
    let len = len as usize;
    let start = (offset as usize).min(page.len());
    let end = (start + len).min(page.len());
    buf[..len].fill(0);
    buf[..end - start].copy_from_slice(&page[start..end]);
    let n = len.min(cmd.sgl_len as usize);
    Outcome::Deliver { len: n as u32, dw0: 0, from: Place::Buffer }
}

fn set_features(t: &Target, cntlid: u16, cmd: &Cmd<'_>) -> Outcome {
    let cdw10 = cmd.sqe.cdw(0);
    let fid = (cdw10 & 0xff) as u8;
    let cdw11 = cmd.sqe.cdw(1);
    if cdw10 & (1 << 31) != 0 {
        return Outcome::err(Status::FEATURE_NOT_SAVEABLE);
    }
    let max_io = t.cfg.max_io_queues;
    let mut st = t.lock();
    let Some(c) = st.ctrls.get_mut(&cntlid) else { return Outcome::err(Status::ABORTED_SQ_DELETION) };
    match fid {
        feature::NUMBER_OF_QUEUES if c.subsys.is_some() => {
            let (nsq, ncq) = (cdw11 & 0xffff, cdw11 >> 16);
            if nsq == 0xffff || ncq == 0xffff {
                return Outcome::err(Status::INVALID_FIELD);
            }
            // Both 0's based; the grant is what we can give of the request.
            let grant = nsq.min(ncq).min(u32::from(max_io) - 1);
            c.granted_io = Some(grant as u16 + 1);
            Outcome::ok_dw0(grant | (grant << 16))
        }
        feature::ASYNC_EVENT_CONFIG => {
            c.async_event_config = cdw11;
            Outcome::ok()
        }
        feature::KEEP_ALIVE_TIMER => {
            c.kato_ms = cdw11;
            Outcome::ok()
        }
        feature::VOLATILE_WRITE_CACHE if c.subsys.is_some() => {
            c.write_cache = cdw11 & 1 != 0;
            Outcome::ok()
        }
        _ => Outcome::err(Status::INVALID_FIELD),
    }
}

fn get_features(t: &Target, cntlid: u16, cmd: &Cmd<'_>) -> Outcome {
    let fid = (cmd.sqe.cdw(0) & 0xff) as u8;
    let max_io = u32::from(t.cfg.max_io_queues);
    let st = t.lock();
    let Some(c) = st.ctrls.get(&cntlid) else { return Outcome::err(Status::ABORTED_SQ_DELETION) };
    let v = match fid {
        feature::NUMBER_OF_QUEUES if c.subsys.is_some() => {
            let n = c.granted_io.map_or(max_io, u32::from) - 1;
            n | (n << 16)
        }
        feature::ASYNC_EVENT_CONFIG => c.async_event_config,
        feature::KEEP_ALIVE_TIMER => c.kato_ms,
        feature::VOLATILE_WRITE_CACHE if c.subsys.is_some() => u32::from(c.write_cache),
        feature::ARBITRATION | feature::POWER_MANAGEMENT | feature::INTERRUPT_COALESCING => 0,
        // Over-temperature threshold: 0x157 K (70 C) as a drive reports it.
        feature::TEMPERATURE_THRESHOLD => 0x157,
        _ => return Outcome::err(Status::INVALID_FIELD),
    };
    Outcome::ok_dw0(v)
}
