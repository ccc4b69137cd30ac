//! What a seed draws beside its workload (TigerBeetle's VOPR swarm: every
//! seed turns some features on and leaves others off, so that the checker
//! meets each feature alone and in every company):
//!
//! * congestion control per host: off, or DCQCN with a named parameter set
//!   (`paper`, `nvidia`, `hpcc` at the host's line rate) and some of its
//!   fields varied, a line rate and a CNP interval; the reaction point of
//!   each of the host's RC requesters then meets congestion notifications
//!   (CNPs, Annex A17.9.3) at drawn times;
//! * encryption (AES-128-GCM, `Engine::set_qp_keys`) on some RC QP pairs;
//! * faults that end: the links' random faults stop at `heal_at`, and some
//!   links go dark for a while before that (a blackout: every packet is
//!   lost);
//! * a switched fabric instead of the mesh: one switch (a star) or two
//!   (the hosts split between them, one link between the switches, maybe
//!   oversubscribed), PFC on every priority (lossless) and ECN marking on,
//!   so that the engines see real CE marks and send their own CNPs; the
//!   links' faults are drawn on each host's own link, and the RC QPs' ACK
//!   timeouts are raised to what the fabric's round trip needs;
//! * a device cap on unacknowledged request bytes across a host's QPs
//!   (`EngineConfig::tx_budget_bytes`, which the UDP driver always sets),
//!   from a few packets (the QPs take turns at every ACK) to more than
//!   their windows hold;
//! * a heal phase: every operation must have completed by `deadline`, a
//!   bound computed from the plan (the last posting, the ACK timeouts, the
//!   RNR timers and the time the plan's bytes take at the slowest rate).
//!
//! The mix draws from its own random stream, so a seed's workload (hosts,
//! QPs, work requests, link parameters) is the same with or without it
//! (on a switched fabric, but for the ACK timeouts).

use roce_proto::cc::{DcqcnParams, Fraction};
use roce_proto::config::CnpConfig;
use roce_proto::time::{ack_timeout, rnr_timer};
use roce_proto::{DirectionKey, Duration, Instant, QpKeys};

use super::gen::safe_timeout;
use super::params::{MixParams, US};
use super::plan::{Blackout, CnpInjection, HostCc, Mix, OpKind, Plan, Switched};
use crate::rng::SimRng;

/// Draws the mix of a plan (the plan keeps its workload; only `plan.mix`
/// is set, and on a switched fabric the RC QPs' ACK timeouts raised).
pub fn draw(rng: &mut SimRng, plan: &mut Plan, p: &MixParams) {
    let mut m = Mix { cc: vec![None; plan.hosts.len()], ..Mix::default() };
    let last_post = last_post(plan);
    // From a stream of its own: every other draw stays as it was.
    m.fabric = switched(&mut rng.fork("fabric"), plan.hosts.len(), p.switched_runs);
    m.tx_caps = tx_caps(&mut rng.fork("tx-cap"), plan.hosts.len(), p.capped_runs);
    if let Some(f) = &mut m.fabric {
        raise_timeouts(plan, f);
        f.headroom_rtts = headroom_rtts(plan, f);
    }
    if rng.chance(p.cc_runs) {
        for h in 0..plan.hosts.len() {
            if rng.chance(0.75) {
                m.cc[h] = Some(host_cc(rng));
            }
        }
        cnps(rng, plan, &mut m, last_post);
    }
    if rng.chance(p.crypto_runs) {
        for (i, q) in plan.qps.iter().enumerate() {
            let Some(c) = q.conn else { continue };
            // Each pair once, from its lower QP.
            if c.peer > i && rng.chance(0.5) {
                let (a, b) = (direction_key(rng), direction_key(rng));
                m.crypto.push((i, QpKeys { tx: a.clone(), rx: b.clone() }));
                m.crypto.push((c.peer, QpKeys { tx: b, rx: a }));
            }
        }
    }
    if !p.heal {
        m.deadline = Instant(u64::MAX - 1);
        plan.mix = m;
        return;
    }
    let faulty = plan.links.iter().any(|(_, l)| l.loss + l.reorder + l.duplicate + l.corrupt > 0.0);
    if faulty {
        // Some faulty seeds heal while the workload still posts, the others
        // after its last WR.
        let end = last_post.0 + 500 * US;
        let at = if rng.chance(p.early_heal) { rng.range(50 * US, end) } else { end + rng.below(2_000 * US) };
        m.heal_at = Some(Instant(at));
        if rng.chance(p.blackout_runs) {
            for _ in 0..rng.range(1, 3) {
                let (link, _) = *rng.pick(&plan.links);
                let from = rng.below(at);
                let len = rng.range(10 * US, 20_000 * US).min(at - from);
                m.blackouts.push(Blackout { link, from: Instant(from), until: Instant(from + len) });
            }
        }
    }
    m.deadline = deadline(plan, &m, last_post);
    plan.mix = m;
}

/// One switch or two, with `hosts` split between them, on `runs` of the
/// seeds.
/// Each host's cap on unacknowledged request bytes, on a seed that draws
/// caps.
fn tx_caps(rng: &mut SimRng, hosts: usize, runs: f64) -> Vec<Option<u64>> {
    if !rng.chance(runs) {
        return Vec::new();
    }
    (0..hosts).map(|_| rng.chance(0.75).then(|| *rng.pick(&[8 << 10, 32 << 10, 1 << 20]))).collect()
}

fn switched(rng: &mut SimRng, hosts: usize, runs: f64) -> Option<Switched> {
    if !rng.chance(runs) {
        return None;
    }
    let split = if hosts >= 2 && rng.chance(0.5) {
        let a = rng.range(1, hosts as u64 - 1) as usize;
        vec![a, hosts - a]
    } else {
        vec![hosts]
    };
    let host_rate_bps = *rng.pick(&[10, 25, 40, 100]) * 1_000_000_000;
    // Oversubscribed by up to 4 (a single host on each side: 1).
    let trunk_rate_bps = host_rate_bps / *rng.pick(&[1, 2, 4]);
    // Low thresholds (a few frames queued): the harness's workloads are
    // small, and the engines should meet CE marks often.
    let kmin = *rng.pick(&[0, 1_000, 4_000, 16_000]);
    Some(Switched {
        split,
        host_rate_bps,
        trunk_rate_bps,
        delay: Duration(rng.range(500, 5_000)),
        kmin,
        kmax: kmin + *rng.pick(&[2_000, 8_000, 32_000]),
        pmax: *rng.pick(&[0.05, 0.2, 0.5, 1.0]),
        buffer_bytes: *rng.pick(&[32 << 20, 1 << 20, 256 << 10]),
        headroom_rtts: 3.0,
    })
}

/// On a switched fabric every link has a rate, the trunk between two
/// switches may be 4 times slower than a host's link and is shared by
/// every host, and frames queue in the switches (strict priority: a low
/// traffic class waits while a higher one has frames). The plan's ACK
/// timeouts were drawn for the mesh (whose links may have no rate, and
/// some timeouts just above its round trip): each RC QP's is raised to
/// what the fabric's round trip needs, the mesh's rule for rated links
/// (`gen::safe_timeout`) with the fabric's path (three links at most, the
/// host link's faults no worse than the mesh links' it stands for) and
/// the send window's serialisation at the slowest link's rate. Shorter,
/// the requesters time out on answers queued in a switch, their
/// retransmissions fill the slow trunk further, and a QP of a low class
/// meets retry_cnt + 1 timeouts in a row (a retry exhaustion no loss
/// explains).
fn raise_timeouts(plan: &mut Plan, f: &Switched) {
    let faults = plan.links.iter().map(|(_, l)| l.max_one_way()).max().unwrap_or(Duration::ZERO);
    let worst = Duration(3 * f.delay.0 + faults.0);
    // A window takes 1 ms at 10 Gb/s, as on the mesh.
    let serialise = 1_000 * US * 10_000_000_000 / f.slowest_bps().max(1);
    let min = safe_timeout(worst, serialise);
    for c in plan.qps.iter_mut().filter_map(|q| q.conn.as_mut()) {
        c.timeout = c.timeout.max(min);
    }
}

/// The largest frame on the wire, bytes: a 4096-byte payload with its
/// Ethernet, IPv6, UDP, BTH, RETH and ICRC headers, rounded up.
const MAX_FRAME: u64 = 4_500;

/// PFC's headroom (IEEE 802.1Qbb): what an ingress must still take once
/// it sent XOFF. The XOFF waits for the frame the switch is sending on
/// that port, crosses the link, the peer finishes the frame it is sending
/// and that crosses back: two link delays and two or three largest
/// frames. On a host's link the harness's faults add what was sent
/// before the pause but arrives after it, late by jitter or a reordering
/// delay, and a duplicated copy doubles it. The HPCC artifact's 3 round
/// trips at the link's rate assume long links and small frames; with the
/// harness's 0.5-5 us links, 10 Gb/s and 4 KB frames they hold less than
/// one frame, and a lossless switch dropped frames. In round trips of the
/// slowest link (the others get more than they need): `(2 (2 delay +
/// late) + 6 frames) / (rate x delay)`.
fn headroom_rtts(plan: &Plan, f: &Switched) -> f64 {
    let late = plan.links.iter().map(|(_, l)| l.jitter.0 + l.reorder_delay.0).max().unwrap_or(0);
    let delay = f.delay.0.max(1) as f64;
    let bytes_per_ns = f.slowest_bps() as f64 / 8e9;
    let need = 2.0 * (2.0 * delay + late as f64) * bytes_per_ns + 6.0 * MAX_FRAME as f64;
    need / (bytes_per_ns * delay)
}

/// The latest posting time of any WR.
fn last_post(plan: &Plan) -> Instant {
    let sends = plan.streams.iter().flat_map(|s| s.ops.iter().map(|o| o.post_at));
    let recvs = plan.recvs.iter().flat_map(|r| r.wqes.iter().map(|w| w.post_at));
    sends.chain(recvs).max().unwrap_or(Instant::ZERO)
}

/// DCQCN from a named set with some fields varied, a line rate, and the
/// notification point's CNP spacing.
fn host_cc(rng: &mut SimRng) -> HostCc {
    let line_rate_bps = *rng.pick(&[10, 25, 40, 100]) * 1_000_000_000;
    let set = *rng.pick(&DcqcnParams::SET_NAMES);
    let mut p = match set {
        "hpcc" => DcqcnParams::hpcc_at(line_rate_bps),
        name => DcqcnParams::named(name).expect("a known set"),
    };
    if rng.chance(0.5) {
        p.g = *rng.pick(&[Fraction::new(1, 256), Fraction::new(1, 16), Fraction::new(5, 1024)]);
    }
    if rng.chance(0.5) {
        p.rate_decrease_period = Duration(rng.range(US, 60 * US));
    }
    if rng.chance(0.5) {
        p.rate_increase_period = Duration(rng.range(5 * US, 300 * US));
        p.alpha_period = Duration(rng.range(US, 60 * US));
    }
    if rng.chance(0.5) {
        p.min_rate_bps = *rng.pick(&[100_000_000, 500_000_000, 1_000_000_000]);
    }
    if rng.chance(0.3) {
        p.rate_on_first_cnp_bps = line_rate_bps / rng.range(2, 10);
    }
    if rng.chance(0.3) {
        p.byte_counter_bytes = rng.range(0, 1 << 20);
        p.fast_recovery_steps = rng.range(1, 5) as u32;
    }
    p.min_time_between_cnps = Duration(*rng.pick(&[0, US, 4 * US, 50 * US]));
    p.validate().expect("drawn inside the ranges");
    let cnp = CnpConfig { enabled: true, min_interval: p.min_time_between_cnps, dscp: Some(p.cnp_dscp) };
    HostCc { set, params: p, line_rate_bps, cnp }
}

/// Up to 8 CNPs for each RC requester of a host with congestion control,
/// while its stream posts and a little after.
fn cnps(rng: &mut SimRng, plan: &Plan, m: &mut Mix, last_post: Instant) {
    for s in &plan.streams {
        let q = &plan.qps[s.qp];
        if q.conn.is_none() || m.cc[q.host].is_none() || s.ops.is_empty() {
            continue;
        }
        let start = s.ops[0].post_at.0;
        let end = s.ops.iter().map(|o| o.post_at.0).max().unwrap_or(start).max(last_post.0) + 300 * US;
        for _ in 0..rng.below(9) {
            m.cnps.push(CnpInjection { at: Instant(rng.range(start, end)), qp: s.qp });
        }
    }
    m.cnps.sort_by_key(|c| c.at);
}

fn direction_key(rng: &mut SimRng) -> DirectionKey {
    let mut k = DirectionKey { key: [0; 16], salt: [0; 4] };
    rng.fill(&mut k.key);
    rng.fill(&mut k.salt);
    k
}

/// The heal bound: once no fault strikes and every WR is posted, each
/// outstanding request is retransmitted within one ACK timeout (the engine
/// does not back off, IBTA vol. 1 §9.7.6.1.3 leaves it free to) and then
/// answered; a probe's requester whose NAK was lost spends retry_cnt plus
/// one timeouts on a responder that stays mute (§9.7.6.1.3); an RNR NAK
/// costs one RNR timer; the rest is the time the plan's bytes take at the
/// slowest rate any requester may be cut to. Each of these is counted
/// several times over: the bound catches a stuck QP, not a slow one.
fn deadline(plan: &Plan, m: &Mix, last_post: Instant) -> Instant {
    let conns = plan.qps.iter().filter_map(|q| q.conn);
    let ack = conns.clone().filter_map(|c| ack_timeout(c.timeout)).map(|d| d.0).max().unwrap_or(0);
    let retries = conns.clone().map(|c| u64::from(c.retry_cnt)).max().unwrap_or(0);
    let rnr = conns.map(|c| rnr_timer(c.min_rnr_timer).0).max().unwrap_or(0);
    let bytes: u64 = plan
        .streams
        .iter()
        .flat_map(|s| s.ops.iter())
        .map(|o| u64::from(o.len) + if matches!(o.kind, OpKind::Read { .. }) { 64 } else { 1024 })
        .sum();
    let link_rate = match &m.fabric {
        Some(f) => f.slowest_bps(),
        None => plan.links.iter().filter_map(|(_, l)| l.rate_bps).min().unwrap_or(u64::MAX),
    };
    let cc_rate = m.cc.iter().flatten().map(|c| c.params.min_rate_bps).min().unwrap_or(u64::MAX);
    let slowest = link_rate.min(cc_rate);
    let wire = if slowest == u64::MAX { 0 } else { bytes.saturating_mul(8_000_000_000) / slowest };
    let start = last_post.max(m.faults_end());
    Instant(start.0 + (retries + 4) * ack + 16 * rnr + 2 * wire + 10_000 * US)
}
