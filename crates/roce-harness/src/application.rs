//! The application side of a run: posts the plan's work requests at their
//! times, and after every step drains every CQ and async event queue,
//! recording what it saw for the checks.
//!
//! Like a real application with small queues, it keeps a backlog per queue:
//! a WR that meets a full send queue, receive queue or SRQ waits (in order)
//! and is posted again after the next step that may have freed a slot.

use std::collections::{BTreeMap, VecDeque};

use roce_proto::{AsyncEvent, Instant, VerbsError, Wc, WcOpcode, WcStatus};

use crate::net::{App, HostId, LinkParams, Network};
use crate::workload::{Live, Plan, RecvQueue};

/// A completion as the application polled it.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub host: HostId,
    /// Index of the CQ in the host's plan.
    pub cq: usize,
    pub at: Instant,
    pub wc: Wc,
}

impl Completion {
    /// Receive-side completions (flushed receive WRs included).
    pub fn is_recv(&self) -> bool {
        matches!(self.wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    }
}

/// A work completion to fill `poll_cq` buffers with.
/// Its status is an error, so an entry `poll_cq` did not fill cannot pass
/// for a success.
pub fn blank_wc() -> Wc {
    Wc { status: WcStatus::GeneralErr, ..Wc::EMPTY }
}

/// A timed posting, or an event of the seed's mix.
#[derive(Debug, Clone, Copy)]
enum Action {
    Send {
        stream: usize,
        op: usize,
    },
    Recv {
        list: usize,
        wqe: usize,
    },
    /// The mix's `cnps[i]` reaches its QP.
    Cnp(usize),
    /// The links' random faults end.
    Heal,
}

/// Which queue an action posts to (its backlog).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Queue {
    Send(usize),
    Recv(usize),
}

impl Action {
    /// The queue a posting waits in (`None`: not a posting).
    fn queue(self) -> Option<Queue> {
        match self {
            Action::Send { stream, .. } => Some(Queue::Send(stream)),
            Action::Recv { list, .. } => Some(Queue::Recv(list)),
            Action::Cnp(_) | Action::Heal => None,
        }
    }
}

/// Posts WRs and polls CQs; an [`App`] for [`Network::run`].
pub struct Application<'a> {
    plan: &'a Plan,
    live: &'a Live,
    actions: Vec<(Instant, Action)>,
    /// WRs waiting for room in their queue, in posting order.
    backlog: BTreeMap<Queue, VecDeque<Action>>,
    pub completions: Vec<Completion>,
    pub events: Vec<(HostId, AsyncEvent)>,
    /// Verbs calls that failed other than with a full queue (the plan must
    /// never cause one).
    pub errors: Vec<String>,
    /// WRs that found their queue full and had to wait.
    pub queue_full: u64,
    buf: Vec<Wc>,
}

impl<'a> Application<'a> {
    /// Receive WRs come first among actions due at the same time.
    pub fn new(plan: &'a Plan, live: &'a Live) -> Application<'a> {
        let mut actions = Vec::new();
        for (list, r) in plan.recvs.iter().enumerate() {
            actions.extend(r.wqes.iter().enumerate().map(|(wqe, w)| (w.post_at, Action::Recv { list, wqe })));
        }
        for (stream, s) in plan.streams.iter().enumerate() {
            actions.extend(s.ops.iter().enumerate().map(|(op, o)| (o.post_at, Action::Send { stream, op })));
        }
        let mix = &plan.mix;
        actions.extend(mix.cnps.iter().enumerate().map(|(i, c)| (c.at, Action::Cnp(i))));
        actions.extend(mix.heal_at.map(|t| (t, Action::Heal)));
        actions.sort_by_key(|a| a.0);
        Application {
            plan,
            live,
            actions,
            backlog: BTreeMap::new(),
            completions: Vec::new(),
            events: Vec::new(),
            errors: Vec::new(),
            queue_full: 0,
            buf: vec![blank_wc(); 64],
        }
    }

    /// Queues a wake-up for every action.
    pub fn schedule(&self, net: &mut Network) {
        for (i, (t, _)) in self.actions.iter().enumerate() {
            net.schedule_wake(*t, i as u64);
        }
    }

    /// Send WRs still waiting for room in a send queue. (Receive WRs may
    /// wait forever: a plan posts a few more than its messages need.)
    pub fn unposted_sends(&self) -> usize {
        self.backlog.iter().filter(|(q, _)| matches!(q, Queue::Send(_))).map(|(_, b)| b.len()).sum()
    }

    /// Posts one WR; `Err(None)` if its queue is full.
    fn post(&self, net: &mut Network, a: Action) -> Result<(), Option<String>> {
        let (plan, live) = (self.plan, self.live);
        let (r, wr_id) = match a {
            Action::Send { stream, op } => {
                let s = &plan.streams[stream];
                let wr = live.send_wr(plan, &s.ops[op]);
                (net.engine_mut(plan.qps[s.qp].host).post_send(live.qpns[s.qp], wr), s.ops[op].wr_id)
            }
            Action::Cnp(_) | Action::Heal => unreachable!("not a posting"),
            Action::Recv { list, wqe } => {
                let l = &plan.recvs[list];
                let w = &l.wqes[wqe];
                let wr = live.recv_wr(w);
                let r = match l.queue {
                    RecvQueue::Qp(q) => net.engine_mut(plan.qps[q].host).post_recv(live.qpns[q], wr),
                    RecvQueue::Srq { host, srq } => {
                        net.engine_mut(host).post_srq_recv(live.hosts[host].srqs[srq], wr)
                    }
                };
                (r, w.wr_id)
            }
        };
        match r {
            Ok(()) => Ok(()),
            Err(VerbsError::QueueFull(_)) => Err(None),
            Err(e) => Err(Some(format!("posting wr {wr_id}: {e}"))),
        }
    }

    /// Posts what a queue's backlog holds until the queue is full again.
    fn drain(&mut self, net: &mut Network, q: Queue) {
        while let Some(&a) = self.backlog.get(&q).and_then(|b| b.front()) {
            match self.post(net, a) {
                Err(None) => return,
                Err(Some(e)) => self.errors.push(e),
                Ok(()) => {}
            }
            self.backlog.get_mut(&q).expect("non-empty").pop_front();
        }
        self.backlog.remove(&q);
    }

    /// Drains every CQ and event queue.
    pub fn poll(&mut self, net: &mut Network) {
        let at = net.now();
        for (host, h) in self.live.hosts.iter().enumerate() {
            for (cq, &id) in h.cqs.iter().enumerate() {
                loop {
                    match net.engine_mut(host).poll_cq(id, &mut self.buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            let new = self.buf[..n].iter().map(|&wc| Completion { host, cq, at, wc });
                            self.completions.extend(new);
                        }
                        Err(e) => {
                            self.errors.push(format!("host {host} CQ {cq}: {e}"));
                            break;
                        }
                    }
                }
            }
            while let Some(ev) = net.engine_mut(host).poll_event() {
                self.events.push((host, ev));
            }
        }
    }
}

/// Every link keeps its delay, jitter and rate and loses its faults.
fn heal(plan: &Plan, net: &mut Network) {
    for &(link, p) in &plan.links {
        let clean = LinkParams { loss: 0.0, reorder: 0.0, duplicate: 0.0, corrupt: 0.0, ..p };
        net.set_link(link.0, link.1, clean);
    }
}

impl App for Application<'_> {
    fn on_step(&mut self, net: &mut Network, wakes: &[u64]) {
        // Earlier WRs waiting for room go first.
        let waiting: Vec<Queue> = self.backlog.keys().copied().collect();
        for q in waiting {
            self.drain(net, q);
        }
        for &w in wakes {
            let a = self.actions[w as usize].1;
            match (a, a.queue()) {
                (_, Some(q)) => {
                    self.backlog.entry(q).or_default().push_back(a);
                    self.drain(net, q);
                    if self.backlog.contains_key(&q) {
                        self.queue_full += 1;
                    }
                }
                (Action::Cnp(i), None) => {
                    let qp = self.plan.mix.cnps[i].qp;
                    let (meta, bytes) = self.live.cnp(self.plan, qp);
                    net.inject(self.plan.qps[qp].host, &meta, &bytes);
                }
                (_, None) => heal(self.plan, net),
            }
        }
        self.poll(net);
    }
}
