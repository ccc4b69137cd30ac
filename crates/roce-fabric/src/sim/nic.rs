//! The host NIC: one egress queue per priority in front of the wire (a PFC
//! pause holds its priority's frames there), fed by the `roce-proto`
//! engine up to a cap; ACKs and CNPs at the ACK priority; on receive, the
//! datagram goes to the engine (or, while the NIC is stalled, to a backlog
//! that pauses the peer when it grows), and the engine's timer is armed
//! for its next deadline. Time for the engine is `now / 1000` ns, rounded
//! down; its deadlines (whole nanoseconds) are scheduled exactly.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};

use roce_proto::cc::{CcAlgorithm, DcqcnParams};
use roce_proto::config::CnpConfig;
use roce_proto::{DatagramMeta, Engine, EngineConfig, IcrcCheck, Instant};
use roce_wire::bth::Bth;
use roce_wire::opcode::{self, Operation, Transport};

use super::flows::FlowHost;
use super::frame::{Frame, Hop};
use super::port::{PfcSend, Port};
use super::{Ev, FabricError, Sim};
use crate::datagram::Datagram;
use crate::hooks::{self, Fate, LinkHooks};
use crate::routing::flow_hash;
use crate::scenario::{host_ip, ip_node, AckClass, NodeId, Scenario, Time, PRIORITIES, PS_PER_NS};

/// Bytes of frames a NIC takes from its engine ahead of the wire (the
/// frames waiting for a paused priority count).
const NIC_QUEUE_CAP: u64 = 256 * 1024;

/// A host: its NIC (ports, egress queues, receive backlog, the engine's
/// timer) and the engine behind it.
pub(super) struct Host {
    /// The NIC's (first) port.
    pub(super) port: usize,
    /// With more than one port: the port towards each node (a mesh's
    /// hosts); empty: every frame leaves by `port`.
    pub(super) egress: Vec<u32>,
    pub(super) engine: Engine,
    /// What the scenario's flows use on this host (`None` for a host a
    /// client drives).
    pub(super) fl: Option<FlowHost>,
    pub(super) timer_at: Option<Time>,
    /// Bytes waiting in the NIC's egress queues.
    pub(super) nic_queued: u64,
    pub(super) stalled: bool,
    pub(super) rx_backlog: VecDeque<Hop>,
    pub(super) rx_bytes: u64,
    pub(super) xoff_sent: bool,
}

impl Host {
    pub(super) fn new(port: usize, egress: Vec<u32>, engine: Engine, fl: Option<FlowHost>) -> Host {
        Host {
            port,
            egress,
            engine,
            fl,
            timer_at: None,
            nic_queued: 0,
            stalled: false,
            rx_backlog: VecDeque::new(),
            rx_bytes: 0,
            xoff_sent: false,
        }
    }
}

fn cc_of(scn: &Scenario, rate: u64) -> Result<(CcAlgorithm, CnpConfig), FabricError> {
    let nic = &scn.nic;
    match nic.cc.as_str() {
        "none" => Ok((CcAlgorithm::None, CnpConfig::default())),
        "dcqcn" => {
            let mut p = if nic.dcqcn_set.eq_ignore_ascii_case("hpcc") {
                DcqcnParams::hpcc_at(rate)
            } else {
                DcqcnParams::named(&nic.dcqcn_set).map_err(FabricError::DcqcnSet)?
            };
            for kv in &nic.dcqcn_params {
                p.set_kv(kv).map_err(|source| FabricError::DcqcnParameter { kv: kv.clone(), source })?;
            }
            p.validate().map_err(FabricError::DcqcnParameters)?;
            let cnp =
                CnpConfig { enabled: true, min_interval: p.min_time_between_cnps, dscp: Some(p.cnp_dscp) };
            Ok((CcAlgorithm::Dcqcn(p), cnp))
        }
        other => Err(FabricError::UnknownCc(other.to_string())),
    }
}

/// The engine of a scenario's host `node` behind a NIC of `rate_bps`: its
/// address ([`host_ip`]), the scenario's congestion control (DCQCN sends
/// CNPs), ECN on, the NIC's send window and ACK requests; seeded from the
/// scenario's seed and the node.
pub(crate) fn host_engine(scn: &Scenario, node: NodeId, rate: u64) -> Result<Engine, FabricError> {
    let ip = host_ip(node);
    let mut cfg = EngineConfig::new(vec![IpAddr::V4(Ipv4Addr::from(ip))]);
    let (cc, cnp) = cc_of(scn, rate)?;
    cfg.cc = cc;
    cfg.cnp = cnp;
    cfg.line_rate_bps = rate;
    cfg.ecn = true;
    cfg.max_unacked_psns = scn.nic.max_unacked_psns;
    cfg.ack_req_every = scn.nic.ack_req_every;
    let seed = scn.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (node as u64);
    Ok(Engine::new(cfg, seed))
}

/// What a datagram is to the NIC's classifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An RC ACK (IBTA vol. 1 §9.7.5): sent at the ACK priority.
    Ack,
    /// A RoCEv2 CNP (Annex A17.9.3): sent at the ACK priority, counted.
    Cnp,
    /// Anything else: sent at its traffic class's priority.
    Data,
}

/// The kind of an engine's datagram (BTH first), read through the wire
/// crate's BTH view and opcode table.
fn kind_of(datagram: &[u8]) -> Kind {
    let info = Bth::new_checked(datagram).ok().and_then(|bth| opcode::lookup(bth.opcode()));
    match info.map(|i| (i.transport, i.operation)) {
        Some((_, Operation::Cnp)) => Kind::Cnp,
        Some((Transport::Rc, Operation::Acknowledge)) => Kind::Ack,
        _ => Kind::Data,
    }
}

impl<H: LinkHooks> Sim<H> {
    /// The scenario's hosts: each an engine behind its NIC, with the verbs
    /// objects its flows use.
    pub(super) fn make_hosts(&mut self) -> Result<(), FabricError> {
        let scn = self.scn.clone();
        self.hosts = (0..scn.nodes.len()).map(|_| None).collect();
        for node in scn.hosts().collect::<Vec<_>>() {
            let port = self.first_port[node];
            let rate = self.ports[port].rate_bps;
            let mut engine = host_engine(&scn, node, rate)?;
            let fl = FlowHost::new(&mut engine, scn.nic.chunk_bytes as usize)
                .map_err(|(verb, source)| FabricError::Engine { host: node, verb, source })?;
            self.hosts[node] = Some(Host::new(port, Vec::new(), engine, Some(fl)));
        }
        Ok(())
    }

    /// The next frame a host NIC sends: a PFC frame, else the highest
    /// unpaused priority's, else whatever the engine has now (frames for a
    /// paused priority wait in their queue).
    ///
    /// A NIC with several ports (a mesh's host) puts what the engine gives
    /// in the queue of the port towards its destination, and starts that
    /// port.
    pub(super) fn host_dequeue(&mut self, node: NodeId, p: usize) -> Option<Hop> {
        if let Some(f) = self.ports[p].ctrl.pop_front() {
            return Some(f);
        }
        loop {
            let port = &mut self.ports[p];
            if let Some(q) = Port::highest(port.queued & !port.paused) {
                let hop = port.dequeue(q).expect("non-empty");
                let wire = hop.wire as u64;
                port.qbytes[q] -= wire;
                port.sent[q] += 1;
                self.hosts[node].as_mut().expect("host").nic_queued -= wire;
                return Some(hop);
            }
            if self.hosts[node].as_ref().expect("host").nic_queued >= NIC_QUEUE_CAP {
                return None;
            }
            let (hop, q) = self.poll_engine(node)?;
            let (q, wire, dst) = (q as usize, hop.wire as u64, hop.dst as usize);
            let h = self.hosts[node].as_mut().expect("host");
            let out = if h.egress.is_empty() { p } else { h.egress[dst] as usize };
            let port = &mut self.ports[out];
            if out == p && port.queued == 0 && port.paused & (1 << q) == 0 {
                // Nothing ahead of it: it goes now, without queueing.
                port.sent[q] += 1;
                return Some(hop);
            }
            h.nic_queued += wire;
            port.enqueue(q, hop);
            port.qbytes[q] += wire;
            if out != p {
                self.start_tx(out);
            }
        }
    }

    /// One datagram from the engine as a frame, and the priority of the
    /// NIC queue it goes to. The frame carries the priority switches
    /// queue it at: the same, except for ACKs and CNPs under
    /// [`AckClass::Packet`] (the NIC sends them at `ack_priority`, the
    /// switches queue them at their own traffic class).
    pub(super) fn poll_engine(&mut self, node: NodeId) -> Option<(Hop, u8)> {
        let now = Instant::from_nanos(self.now / PS_PER_NS);
        let (t, dst_host) = loop {
            let h = self.hosts[node].as_mut().expect("host");
            let t = h.engine.poll_transmit(now, &mut self.scratch)?;
            if self.addrs.is_empty() {
                break (t, None);
            }
            // A client's hosts: the destination by its address.
            if let Some(&dst) = self.addrs.get(&t.meta.dst) {
                break (t, Some(dst));
            }
            self.report.counters.dropped_unroutable += 1;
            if H::ACTIVE {
                self.hooks.on_copy(&hooks::Copy {
                    sent: self.now,
                    arrive: None,
                    from: node,
                    to: None,
                    copy: 0,
                    fate: Fate::Unroutable,
                    tx: &t,
                    bytes: &self.scratch[..t.len],
                });
            }
        };
        let h = self.hosts[node].as_mut().expect("host");
        let bytes = Datagram::store_carried(&self.scratch[..t.len], t.carried, &mut self.bufs);
        let kind = kind_of(&self.scratch[..t.len]);
        let ack = kind != Kind::Data;
        if kind == Kind::Cnp {
            self.report.counters.cnps += 1;
        }
        let own = (t.traffic_class >> 5) & 7;
        let prio = match (ack, self.scn.nic.ack_priority) {
            (true, Some(p)) => p,
            _ => own,
        };
        let wire_prio = match self.scn.switch.ack_class {
            AckClass::Packet => own,
            AckClass::Nic => prio,
        };
        let (src_ip, dst_ip) = match (t.meta.src, t.meta.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (u32::from(s), u32::from(d)),
            _ => (0, 0),
        };
        if let Some(fl) = h.fl.as_mut().filter(|f| !ack && f.sports_unknown > 0) {
            if let Some(&flow) = fl.qp_flow.get(&t.qpn) {
                if self.flows[flow].sport == 0 && self.scn.flows[flow].src == node {
                    self.flows[flow].sport = t.meta.src_port;
                    fl.sports_unknown -= 1;
                }
            }
        }
        let ip_header = if t.meta.dst.is_ipv4() { 20 } else { 40 };
        let wire = self.scn.framing.data_wire_len(ip_header + 8 + t.len);
        self.report.counters.host_tx_frames += 1;
        self.report.counters.host_tx_bytes += wire as u64;
        let fid = self.alloc_frame(
            Frame { pfc: false, wire, src_ip, dst_ip, sport: t.meta.src_port, dport: t.meta.dst_port },
            bytes,
        );
        if H::ACTIVE {
            self.txs[fid as usize] = Some(t);
        }
        let hop = Hop {
            fid,
            hash: flow_hash(src_ip, dst_ip, t.meta.src_port, t.meta.dst_port),
            // Node numbers and wire lengths fit 16 bits (`validate`).
            dst: dst_host.unwrap_or_else(|| ip_node(dst_ip)) as u16,
            wire: wire as u16,
            in_port: 0,
            bits: (wire_prio & 7) | (t.traffic_class & 3) << 3,
        };
        Some((hop, prio))
    }

    pub(super) fn host_receive(&mut self, node: NodeId, hop: Hop) {
        let h = self.hosts[node].as_mut().expect("host");
        if h.stalled {
            let wire = hop.wire as u64;
            if h.rx_bytes + wire > 2 * self.scn.nic.rx_xoff_bytes {
                // Past the XOFF point by more than a headroom's worth: a
                // sender that ignores the pause loses frames here.
                self.report.counters.dropped_nic_rx += 1;
                self.drop_frame(hop);
                return;
            }
            h.rx_backlog.push_back(hop);
            h.rx_bytes += wire;
            if h.rx_bytes >= self.scn.nic.rx_xoff_bytes && !h.xoff_sent {
                h.xoff_sent = true;
                let p = h.port;
                self.send_pfc(p, hop.prio(), PfcSend::Xoff);
            }
            return;
        }
        self.deliver(node, hop);
        self.host_after_input(node);
    }

    pub(super) fn deliver(&mut self, node: NodeId, hop: Hop) {
        let fid = hop.fid;
        let f = self.slots[fid as usize].frame.as_ref().expect("frame");
        let ecn = hop.ecn();
        let meta = match self.txs.get(fid as usize).copied().flatten() {
            // A client's host: the engine's addresses, v4 or v6.
            Some(tx) => DatagramMeta { ecn, ipv4_id: tx.meta.ipv4_id.or(Some(0)), ..tx.meta },
            None => DatagramMeta {
                src: IpAddr::V4(Ipv4Addr::from(f.src_ip)),
                dst: IpAddr::V4(Ipv4Addr::from(f.dst_ip)),
                src_port: f.sport,
                dst_port: f.dport,
                ecn,
                ipv4_id: Some(0),
            },
        };
        let now = Instant::from_nanos(self.now / PS_PER_NS);
        let h = self.hosts[node].as_mut().expect("host");
        self.report.counters.host_rx_frames += 1;
        self.report.counters.host_rx_bytes += f.wire as u64;
        let d = &self.slots[fid as usize].bytes;
        let n = d.len();
        d.write_carried_to(&mut self.scratch);
        let check = h.engine.handle_datagram(now, &meta, &self.scratch[..n]);
        if matches!(check, IcrcCheck::Failed | IcrcCheck::Malformed) {
            self.report.counters.engine_rx_errors += 1;
        }
        self.free_frame(fid);
    }

    /// After the engine took input: reap completions, keep the flows
    /// posted, start the wire, re-arm the engine's timer.
    pub(super) fn host_after_input(&mut self, node: NodeId) {
        if self.hosts[node].as_ref().is_some_and(|h| h.fl.is_none()) && !self.touched_flag[node] {
            self.touched_flag[node] = true;
            self.touched.push(node);
        }
        self.reap(node);
        let p = self.hosts[node].as_ref().expect("host").port;
        self.start_tx(p);
        self.arm_timer(node);
    }

    pub(super) fn arm_timer(&mut self, node: NodeId) {
        let p = self.hosts[node].as_ref().expect("host").port;
        let busy = self.now < self.ports[p].busy_until;
        let h = self.hosts[node].as_mut().expect("host");
        let Some(dl) = h.engine.poll_timeout() else {
            h.timer_at = None;
            return;
        };
        let now_ns = self.now / PS_PER_NS;
        let at = if dl.as_nanos() > now_ns {
            dl.as_nanos() * PS_PER_NS
        } else if busy {
            // Due now, but the wire is busy: the end of the frame wakes
            // the NIC, and the engine with it.
            self.wake_at_tx_end(p);
            return;
        } else {
            (now_ns + 1) * PS_PER_NS
        };
        // `timer_at` is the earliest wake-up queued: a later one is not
        // queued (that wake-up re-arms), an earlier one replaces it.
        if h.timer_at.is_none_or(|q| at < q) {
            h.timer_at = Some(at);
            self.push(at, Ev::HostTimer(node as u32));
        }
    }

    /// The NIC stops draining its receive side (a scripted stall): frames
    /// wait in its backlog, and past `rx_xoff` it pauses its peer.
    pub(super) fn nic_stall(&mut self, host: NodeId) {
        self.hosts[host].as_mut().expect("host").stalled = true;
    }

    /// The NIC drains again: its backlog is delivered, an XOFF it sent is
    /// ended by XON on every lossless priority.
    pub(super) fn nic_resume(&mut self, host: NodeId) {
        let h = self.hosts[host].as_mut().expect("host");
        h.stalled = false;
        let backlog: Vec<Hop> = h.rx_backlog.drain(..).collect();
        h.rx_bytes = 0;
        let xoff = std::mem::replace(&mut h.xoff_sent, false);
        let p = h.port;
        for hop in backlog {
            self.deliver(host, hop);
        }
        if xoff {
            for q in 0..PRIORITIES as u8 {
                if self.scn.switch.lossless_mask & (1 << q) != 0 {
                    self.send_pfc(p, q, PfcSend::Xon);
                }
            }
        }
        self.host_after_input(host);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTH with opcode `op`, the rest zero.
    fn bth(op: u8) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0] = op;
        b
    }

    /// Exactly the RC ACK (0x11) and the CNP (0x81) go at the ACK
    /// priority: not an atomic ACK, a READ response or a request.
    #[test]
    fn acks_and_cnps_are_told_apart_by_the_opcode_table() {
        assert_eq!(kind_of(&bth(0x11)), Kind::Ack);
        assert_eq!(kind_of(&bth(roce_wire::opcode::CNP)), Kind::Cnp);
        for op in [0x00, 0x0a, 0x0d, 0x12, 0x24, 0x64] {
            assert_eq!(kind_of(&bth(op)), Kind::Data, "opcode {op:#x}");
        }
        // Every byte value agrees with the opcode bytes the NIC used to match.
        for op in 0..=255u8 {
            let want = match op {
                0x11 => Kind::Ack,
                0x81 => Kind::Cnp,
                _ => Kind::Data,
            };
            assert_eq!(kind_of(&bth(op)), want, "opcode {op:#x}");
        }
        // Shorter than a BTH: not an ACK.
        assert_eq!(kind_of(&[0x11; 4]), Kind::Data);
    }
}
