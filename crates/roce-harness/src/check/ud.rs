//! UD is unreliable: datagrams may be lost (or duplicated by the network),
//! so only what arrived is judged. Every UD receive completion must name a
//! message that was sent to this QP, with its length (plus the 40-byte GRH),
//! immediate data and source QPN, and its buffer must hold the GRH
//! addresses and the exact payload; a message may complete at most as many
//! times as the network delivered an intact copy of it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::rc::Rc;

use roce_proto::{WcOpcode, WcStatus, WC_GRH, WC_WITH_IMM};
use roce_wire::RocePacketRepr;

use super::findings::{FailureKind, Findings};
use super::shadow::{gather, Shadow};
use super::Ctx;
use crate::net::{Fate, HostId, Tap};
use crate::workload::{OpKind, RecvQueue, GRH_LEN};

/// UD SEND Only and SEND Only with Immediate (IBTA Table 38, UD opcodes).
const UD_SEND_ONLY: u8 = 0x64;
const UD_SEND_ONLY_IMM: u8 = 0x65;

/// Intact UD datagrams delivered, by (host, destination QPN, message id).
#[derive(Debug, Default)]
pub struct UdLedger {
    pub delivered: BTreeMap<(HostId, u32, u64), u32>,
}

/// A [`Tap`] feeding a shared [`UdLedger`].
pub struct LedgerTap(pub Rc<RefCell<UdLedger>>);

impl Tap for LedgerTap {
    fn on_copy(&mut self, _from: HostId, to: Option<HostId>, fate: Fate, bytes: &[u8]) {
        let (Some(to), Fate::Delivered) = (to, fate) else { return };
        if !matches!(bytes.first(), Some(&UD_SEND_ONLY | &UD_SEND_ONLY_IMM)) {
            return;
        }
        let Ok(p) = RocePacketRepr::parse(bytes) else { return };
        let id = match p.ext.imm {
            Some(imm) => Some(u64::from(imm)),
            None => p.payload.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
        };
        if let Some(id) = id {
            *self.0.borrow_mut().delivered.entry((to, p.bth.dest_qp, id)).or_default() += 1;
        }
    }
}

/// The 40 bytes a UD receive starts with, and which of them are predicted:
/// for IPv4, 20 zero bytes then the IPv4 header (source at 32, destination
/// at 36); for IPv6, the IPv6 header (source at 8, destination at 24).
fn grh_expectation(src: IpAddr, dst: IpAddr) -> ([u8; 40], [bool; 40]) {
    let mut b = [0u8; 40];
    let mut care = [false; 40];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            b[32..36].copy_from_slice(&s.octets());
            b[36..40].copy_from_slice(&d.octets());
            care[32..40].fill(true);
        }
        _ => {
            b[8..24].copy_from_slice(&roce_proto::gid_to_bytes(src));
            b[24..40].copy_from_slice(&roce_proto::gid_to_bytes(dst));
            care[8..40].fill(true);
        }
    }
    (b, care)
}

pub fn check_ud(
    ctx: &Ctx<'_>,
    obs: &super::completions::Observed<'_>,
    shadow: &mut Shadow,
    f: &mut Findings,
) {
    let (plan, live) = (ctx.plan, ctx.live);
    let ledger = ctx.ledger;
    let mut msgs = BTreeMap::new();
    for (si, s) in plan.streams.iter().enumerate() {
        for (oi, o) in s.ops.iter().enumerate() {
            if let OpKind::UdSend { id, .. } = o.kind {
                msgs.insert(id, (si, oi));
            }
        }
    }
    let mut used = BTreeSet::new();
    let mut times: BTreeMap<u64, u32> = BTreeMap::new();
    for (v, q) in plan.qps.iter().enumerate() {
        if q.conn.is_some() {
            continue;
        }
        let qpn = live.qpns[v];
        let who = format!("host {} UD QP {qpn:#x}", q.host);
        let Some(got) = obs.recvs.get(&(q.host, qpn)) else { continue };
        let list = plan.recvs.iter().position(|l| l.queue == RecvQueue::Qp(v));
        for c in got {
            let w = &c.wc;
            let wqe = list.and_then(|l| plan.recvs[l].wqes.iter().find(|x| x.wr_id == w.wr_id));
            let Some(wqe) = wqe.filter(|_| used.insert(w.wr_id)) else {
                f.fail(
                    FailureKind::Ud,
                    format!("{who}: completion for receive WR {} not posted here (or reused)", w.wr_id),
                );
                continue;
            };
            if w.status != WcStatus::Success || w.opcode != WcOpcode::Recv || c.cq != q.recv_cq {
                f.fail(
                    FailureKind::Ud,
                    format!(
                        "{who}: receive WR {} completed {:?} {:?} on CQ {}",
                        w.wr_id, w.status, w.opcode, c.cq
                    ),
                );
                continue;
            }
            let id = if w.wc_flags & WC_WITH_IMM != 0 {
                u64::from(w.imm_data)
            } else {
                let b = gather(plan, ctx.actual, &wqe.sges, GRH_LEN as usize, 8);
                b.try_into().map(u64::from_le_bytes).unwrap_or(u64::MAX)
            };
            let Some(&(si, oi)) = msgs.get(&id) else {
                f.fail(
                    FailureKind::Ud,
                    format!("{who}: receive WR {} holds unknown message id {id:#x}", w.wr_id),
                );
                continue;
            };
            let sender = plan.streams[si].qp;
            let op = &plan.streams[si].ops[oi];
            let OpKind::UdSend { to, imm, .. } = op.kind else { unreachable!("UD message") };
            let flags = WC_GRH | if imm.is_some() { WC_WITH_IMM } else { 0 };
            let want = (to.qp, GRH_LEN + op.len, live.qpns[sender], flags, imm.unwrap_or(0));
            let got_fields =
                (v, w.byte_len, w.src_qp, w.wc_flags, if imm.is_some() { w.imm_data } else { 0 });
            if want != got_fields {
                f.fail(
                    FailureKind::Ud,
                    format!(
                        "{who}: message {id} (wr {}): expected (dest QP index, len, src_qp, flags, imm) {want:?}, got {got_fields:?}",
                        op.wr_id
                    ),
                );
                continue;
            }
            let n = times.entry(id).or_default();
            *n += 1;
            let carried = ledger.delivered.get(&(q.host, qpn, id)).copied().unwrap_or(0);
            if *n > carried {
                f.fail(FailureKind::Ud, format!("{who}: message {id} received {n} times, the network delivered {carried} intact copies"));
            }
            let src = plan.hosts[plan.qps[sender].host].gids[usize::from(to.sgid_index)];
            let (grh, grh_care) = grh_expectation(src, to.dgid);
            let mut data = grh.to_vec();
            data.extend(plan.gather_init(&op.sges));
            let mut care = grh_care.to_vec();
            care.resize(data.len(), true);
            shadow.scatter(plan, &wqe.sges, &data, Some(&care));
        }
    }
}
