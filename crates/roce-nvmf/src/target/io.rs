//! NVM I/O commands (NVM Command Set 1.0, 3.2): Read, Write, Flush, Write
//! Zeroes, Dataset Management.

use super::command::{Cmd, Outcome, Place, QueueState};
use super::config::Namespace;
use crate::wire::{io as op, Status};

/// Dataset Management takes at most 256 ranges of 16 bytes (Fig. 39).
const DSM_RANGE_LEN: usize = 16;

/// An I/O command on a queue of a controller of subsystem `subsys`
/// (`None`: the discovery controller, which has no I/O commands).
pub(super) fn io(q: &mut QueueState, subsys: Option<usize>, cmd: &Cmd<'_>, buf: &mut [u8]) -> Outcome {
    let t = q.target.clone();
    let Some(subsys) = subsys else { return Outcome::err(Status::INVALID_OPCODE) };
    let namespaces = &t.cfg.subsystems[subsys].namespaces;
    let nsid = cmd.sqe.nsid();
    let opcode = cmd.sqe.opcode();
    if opcode == op::FLUSH && nsid == 0xFFFF_FFFF {
        // Every namespace (NVM 1.0, 3.2.1).
        for ns in namespaces {
            if ns.backend.flush().is_err() {
                return Outcome::err(Status::INTERNAL_ERROR);
            }
        }
        return Outcome::ok();
    }
    let Some(ns) = nsid.checked_sub(1).and_then(|i| namespaces.get(i as usize)) else {
        return Outcome::err(Status::INVALID_NAMESPACE);
    };
    match opcode {
        op::READ | op::WRITE => {
            let slba = cmd.sqe.qword_at(40);
            let nlb = u64::from(cmd.sqe.cdw(2) & 0xffff) + 1;
            let len = nlb << ns.lbads;
            if let Err(s) = in_range(ns, slba, nlb) {
                return Outcome::err(s);
            }
            if len > u64::from(t.cfg.max_transfer) {
                // More than MDTS allows.
                return Outcome::err(Status::INVALID_FIELD);
            }
            if u64::from(cmd.sgl_len) != len {
                // The data must be exactly the blocks (Linux nvmet: "SGL
                // length invalid" on a mismatch).
                return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
            }
            let off = slba << ns.lbads;
            let len = len as usize;
            // A namespace whose memory the driver reaches has the blocks
            // moved by RDMA between it and the host, with no copy here.
            let index = (nsid - 1) as usize;
            let direct = q.direct.contains(&(subsys, index)).then_some(Place::Namespace {
                subsys,
                ns: index,
                offset: off,
            });
            if opcode == op::READ {
                // A Read's data goes to the host by RDMA WRITE of a keyed
                // SGL; data present here came in the capsule, which cannot
                // take it (refused before the read is done and counted).
                if cmd.data.is_some() {
                    return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
                }
                if direct.is_none() && ns.backend.read_at(off, &mut buf[..len]).is_err() {
                    return Outcome::err(Status::INTERNAL_ERROR);
                }
                let mut st = t.lock();
                st.stats.reads += 1;
                st.stats.bytes_read += len as u64;
                return Outcome::Deliver { len: len as u32, dw0: 0, from: direct.unwrap_or(Place::Buffer) };
            }
            if !cmd.placed {
                let Some(data) = cmd.data else {
                    return Outcome::NeedData { len: len as u32, into: direct.unwrap_or(Place::Buffer) };
                };
                if data.len() != len {
                    return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
                }
                if ns.backend.write_at(off, data).is_err() {
                    return Outcome::err(Status::INTERNAL_ERROR);
                }
            }
            // Force Unit Access (CDW12 bit 30): durable before the answer.
            if cmd.sqe.cdw(2) & (1 << 30) != 0 && ns.backend.flush().is_err() {
                return Outcome::err(Status::INTERNAL_ERROR);
            }
            let mut st = t.lock();
            st.stats.writes += 1;
            st.stats.bytes_written += len as u64;
            Outcome::ok()
        }
        op::FLUSH => match ns.backend.flush() {
            Ok(()) => Outcome::ok(),
            Err(_) => Outcome::err(Status::INTERNAL_ERROR),
        },
        op::WRITE_ZEROES => {
            let slba = cmd.sqe.qword_at(40);
            let nlb = u64::from(cmd.sqe.cdw(2) & 0xffff) + 1;
            if let Err(s) = in_range(ns, slba, nlb) {
                return Outcome::err(s);
            }
            match ns.backend.write_zeroes(slba << ns.lbads, nlb << ns.lbads) {
                Ok(()) => Outcome::ok(),
                Err(_) => Outcome::err(Status::INTERNAL_ERROR),
            }
        }
        op::DATASET_MANAGEMENT => {
            let nr = (cmd.sqe.cdw(0) & 0xff) as usize + 1;
            let len = nr * DSM_RANGE_LEN;
            if (cmd.sgl_len as usize) < len {
                return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
            }
            let Some(data) = cmd.data else {
                return Outcome::NeedData { len: len as u32, into: Place::Buffer };
            };
            if data.len() < len {
                return Outcome::err(Status::DATA_SGL_LENGTH_INVALID);
            }
            // Check every range before acting on any.
            let ranges: Vec<(u64, u64)> = data[..len]
                .chunks_exact(DSM_RANGE_LEN)
                .map(|r| {
                    let nlb = u64::from(u32::from_le_bytes(r[4..8].try_into().expect("4")));
                    let slba = u64::from_le_bytes(r[8..16].try_into().expect("8"));
                    (slba, nlb)
                })
                .collect();
            for &(slba, nlb) in &ranges {
                if nlb > 0 {
                    if let Err(s) = in_range(ns, slba, nlb) {
                        return Outcome::err(s);
                    }
                }
            }
            // Deallocate (CDW11 bit 2): the blocks read as zeroes after
            // (Identify Namespace DLFEAT is 0: "not reported", so zeroing
            // is one allowed answer, and the one a file can give).
            if cmd.sqe.cdw(1) & (1 << 2) != 0 {
                for (slba, nlb) in ranges {
                    if nlb > 0 && ns.backend.write_zeroes(slba << ns.lbads, nlb << ns.lbads).is_err() {
                        return Outcome::err(Status::INTERNAL_ERROR);
                    }
                }
            }
            Outcome::ok()
        }
        _ => Outcome::err(Status::INVALID_OPCODE),
    }
}

/// Blocks `slba .. slba + nlb` inside the namespace (NVM 1.0: "LBA Out
/// of Range" otherwise), without overflow.
fn in_range(ns: &Namespace, slba: u64, nlb: u64) -> Result<(), Status> {
    match slba.checked_add(nlb) {
        Some(end) if end <= ns.blocks() => Ok(()),
        _ => Err(Status::LBA_OUT_OF_RANGE),
    }
}
