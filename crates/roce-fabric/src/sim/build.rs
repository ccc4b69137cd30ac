//! The fabric of a scenario: its ports (one per link end, numbered from 1
//! per node in link order), each port's peer, the switches' buffers, and
//! the routes. Nodes, ports and wire lengths must fit the 16 bits a
//! [`Hop`](super::frame::Hop) names them in.

use std::collections::VecDeque;
use std::rc::Rc;

use roce_proto::{Wc, MAX_DATAGRAM};

use super::flows::FlowState;
use super::port::Port;
use super::{FabricError, Sim};
use crate::faults::Faults;
use crate::hooks::LinkHooks;
use crate::queue::EventQueue;
use crate::report::Report;
use crate::rng::SimRng;
use crate::routing::{Adjacency, Routes};
use crate::scenario::{NodeKind, Scenario, PRIORITIES, PS_PER_S};
use crate::switch::Mmu;

impl<H: LinkHooks> Sim<H> {
    /// The fabric of `scn`: ports, links, switches; no hosts yet.
    pub(crate) fn build(scn: Rc<Scenario>, hooks: H) -> Result<Sim<H>, FabricError> {
        let adj = Adjacency::new(&scn);
        // A `Hop` names nodes, ports and wire lengths in 16 bits.
        let nports: usize = adj.ports.iter().map(Vec::len).sum();
        if scn.nodes.len() > 1 << 16 || nports > 1 << 16 {
            return Err(FabricError::TooLarge { nodes: scn.nodes.len(), ports: nports });
        }
        // The largest datagram, in IPv6 (40 bytes) and UDP (8).
        let largest = scn.framing.data_wire_len(MAX_DATAGRAM + 40 + 8);
        if largest > u16::MAX as u32 {
            return Err(FabricError::FrameTooLong { wire: largest });
        }
        let routes = Routes::build(&scn, &adj)?;
        let mut ports = Vec::new();
        let mut first_port = Vec::with_capacity(scn.nodes.len());
        for (node, plist) in adj.ports.iter().enumerate() {
            first_port.push(ports.len());
            for (k, &(_, link)) in plist.iter().enumerate() {
                let l = &scn.links[link];
                let exact = (8 * PS_PER_S) % l.rate_bps == 0;
                ports.push(Port {
                    node,
                    at_host: scn.nodes[node].kind == NodeKind::Host,
                    number: k as u32 + 1,
                    peer: usize::MAX,
                    link,
                    rate_bps: l.rate_bps,
                    ps_per_byte: exact.then(|| 8 * PS_PER_S / l.rate_bps),
                    delay: l.delay_ps,
                    faults: {
                        let f = Faults {
                            jitter: l.faults.jitter_ps,
                            loss: l.loss,
                            reorder: l.faults.reorder,
                            reorder_delay: l.faults.reorder_delay_ps,
                            duplicate: l.faults.duplicate,
                            corrupt: l.faults.corrupt,
                        };
                        f.any().then(|| Box::new(f))
                    },
                    last_fifo: 0,
                    busy_until: 0,
                    txdone_queued: false,
                    ctrl: VecDeque::new(),
                    queues: Default::default(),
                    qbytes: [0; PRIORITIES],
                    paused: 0,
                    queued: 0,
                    pause_epoch: [0; PRIORITIES],
                    refresh_at: [None; PRIORITIES],
                    wd_epoch: [0; PRIORITIES],
                    wd_active: 0,
                    sent: [0; PRIORITIES],
                    busy_ps: 0,
                    deficit: [0; PRIORITIES],
                    rr_next: 0,
                });
            }
        }
        // Peers: the port at the other end of the same link.
        let mut by_link: Vec<Vec<usize>> = vec![Vec::new(); scn.links.len()];
        for (i, p) in ports.iter().enumerate() {
            by_link[p.link].push(i);
        }
        for ends in &by_link {
            let (x, y) = (ends[0], ends[1]);
            ports[x].peer = y;
            ports[y].peer = x;
        }
        let mut mmu = Vec::with_capacity(scn.nodes.len());
        for (node, spec) in scn.nodes.iter().enumerate() {
            mmu.push(match spec.kind {
                NodeKind::Switch => Some(Mmu::new(
                    &scn.switch,
                    &ports[first_port[node]..first_port[node] + adj.ports[node].len()]
                        .iter()
                        .map(|p| (p.rate_bps, p.delay))
                        .collect::<Vec<_>>(),
                    scn.framing.data_wire_len(MAX_DATAGRAM + 28) as u64,
                )),
                NodeKind::Host => None,
            });
        }
        let seed = scn.seed;
        let nnodes = scn.nodes.len();
        let (nflows, nlinks) = (scn.flows.len(), scn.links.len());
        Ok(Sim {
            scn,
            hooks,
            txs: Vec::new(),
            addrs: Default::default(),
            wakes: Vec::new(),
            touched: Vec::new(),
            touched_flag: vec![false; nnodes],
            paused_queues: 0,
            now: 0,
            heap: EventQueue::default(),
            start_order: Vec::new(),
            next_start: 0,
            real_pending: 0,
            ports,
            first_port,
            slots: Vec::new(),
            free_frames: Vec::new(),
            bufs: Vec::new(),
            scratch: vec![0u8; MAX_DATAGRAM],
            mmu,
            hosts: Vec::new(),
            routes,
            flows: vec![FlowState::default(); nflows],
            flows_done: 0,
            report: Report::default(),
            rng_links: SimRng::new(seed).fork("links"),
            rng_ecn: SimRng::new(seed).fork("ecn"),
            link_up: vec![true; nlinks],
            wc: vec![Wc::EMPTY; 64],
            deadlock_suspect: None,
            ending: None,
        })
    }
}
