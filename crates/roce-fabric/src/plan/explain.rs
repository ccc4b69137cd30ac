//! A plan and its check in words: every number with what it is and where
//! its rule comes from.

use std::fmt;

use roce_proto::cc::DcqcnParams;

use super::check::{CheckReport, RunSummary};
use super::{rules, Plan};
use crate::scenario::{Framing, Time, PS_PER_NS, PS_PER_S, PS_PER_US};

/// Fibre's propagation, ns per metre (about 5: MODEL-NOTES §5).
const FIBRE_NS_PER_M: f64 = 5.0;

/// `1.6MB`, `67.9KB`, `900B`: decimal units.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1_000_000_000, "GB"), (1_000_000, "MB"), (1_000, "KB")];
    for (scale, unit) in UNITS {
        if b >= scale {
            let v = format!("{:.2}", b as f64 / scale as f64);
            return format!("{}{unit}", v.trim_end_matches('0').trim_end_matches('.'));
        }
    }
    format!("{b}B")
}

/// `100G`, `25G`, `1.5G`, `400M`.
pub fn fmt_rate(bps: u64) -> String {
    for (scale, unit) in [(1_000_000_000u64, "G"), (1_000_000, "M"), (1_000, "K")] {
        if bps >= scale {
            let v = format!("{:.2}", bps as f64 / scale as f64);
            return format!("{}{unit}", v.trim_end_matches('0').trim_end_matches('.'));
        }
    }
    format!("{bps}")
}

/// `1us`, `250ns`, `3.2ms`.
pub fn fmt_time(ps: Time) -> String {
    let (v, unit) = if ps >= PS_PER_S / 1000 {
        (ps as f64 / (PS_PER_S / 1000) as f64, "ms")
    } else if ps >= PS_PER_US {
        (ps as f64 / PS_PER_US as f64, "us")
    } else {
        (ps as f64 / PS_PER_NS as f64, "ns")
    };
    let v = format!("{v:.3}");
    format!("{}{unit}", v.trim_end_matches('0').trim_end_matches('.'))
}

fn alpha_text(a: f64) -> String {
    if a >= 1.0 {
        format!("{a}")
    } else {
        format!("1/{}", (1.0 / a).round())
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.input;
        let framing = match i.framing {
            Framing::Ethernet => "Ethernet: header, 802.1Q tag, FCS, preamble and gap, 42 B",
            Framing::Ppp => "HPCC's PPP framing, 2 B",
        };
        writeln!(
            f,
            "PFC/ECN plan for {}: {} hosts, {} switches, NICs at {}b/s",
            self.name,
            self.hosts,
            self.switches,
            fmt_rate(self.nic_rate_bps)
        )?;
        writeln!(
            f,
            "  MTU {}: largest frame {} B on the wire (payload + {} B of RoCEv2/UDP/IPv4 headers + {framing})",
            i.mtu,
            self.largest_frame,
            super::headroom::ROCE_IP_OVERHEAD
        )?;
        let lossless: Vec<String> = self.lossless().iter().map(u8::to_string).collect();
        writeln!(
            f,
            "  buffer {} per switch; lossless priorities {}; headroom x {}",
            fmt_bytes(i.buffer_bytes),
            lossless.join(","),
            i.headroom_scale
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "Headroom per switch port and lossless priority, bytes (IEEE 802.1Qbb: what still arrives after the switch decides XOFF):"
        )?;
        writeln!(
            f,
            "  {:>5} {:<6} {:>5} {:<16} {:>8} {:>4} {:>9} {:>14} {:>14} {:>10} {:>9}",
            "ports",
            "facing",
            "rate",
            "cable",
            "frame@sw",
            "PFC",
            "cable x2",
            "D-Intf",
            "D-Resp",
            "frame@peer",
            "headroom"
        )?;
        for c in &self.classes {
            let t = &c.terms;
            let metres = c.delay_ps as f64 / PS_PER_NS as f64 / FIBRE_NS_PER_M;
            writeln!(
                f,
                "  {:>5} {:<6} {:>5} {:<16} {:>8} {:>4} {:>9} {:>14} {:>14} {:>10} {:>9}",
                c.ports,
                if c.facing_host { "host" } else { "switch" },
                fmt_rate(c.rate_bps),
                format!("{} (~{:.0} m)", fmt_time(c.delay_ps), metres),
                t.frame_at_switch,
                t.pfc_frame,
                t.cable,
                format!("{} ({})", t.interface, fmt_rate(t.interface_rate)),
                format!("{} ({})", t.response, fmt_rate(t.response_rate)),
                t.frame_at_peer,
                c.headroom_bytes
            )?;
        }
        writeln!(f, "  frame@sw   the largest frame the switch may have begun sending on the port when it decides XOFF; the PFC frame waits for it")?;
        writeln!(f, "  PFC        the PFC frame itself (64 B, plus preamble and gap on Ethernet)")?;
        writeln!(f, "  cable x2   2 x one-way delay x rate: the PFC frame's way to the peer and what the peer sent meanwhile (fibre ~5 ns/m)")?;
        writeln!(f, "  D-Intf     the two ends' MAC/PHY delays, IEEE 802.3's bound at the rate in brackets (the nearest listed rate below when the port's is not listed)")?;
        writeln!(f, "  D-Resp     the peer's time to act on a PFC frame, IEEE 802.3's bound (e.g. 394 pause quanta of 512 bit times at 100G)")?;
        writeln!(f, "  frame@peer the largest frame the peer may have begun sending when it stops: a frame is never cut")?;
        writeln!(
            f,
            "  headroom   the sum x {}: what the switch reserves per port and lossless priority (`headroom_rtts` = 2 x scale for the cable, `headroom_extra` per rate for the rest)",
            i.headroom_scale
        )?;
        for c in &self.classes {
            let need = c.terms.simulated_need();
            writeln!(
                f,
                "             {} {}-facing: the simulator's peers act at once and have no interface delay, so they need {need} B of it ({:.0} %)",
                fmt_rate(c.rate_bps),
                if c.facing_host { "host" } else { "switch" },
                100.0 * need as f64 / c.headroom_bytes.max(1) as f64
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Shared buffer and PFC thresholds per switch (dynamic threshold: an ingress queue pauses its peer when its shared bytes reach alpha x the free shared buffer;"
        )?;
        writeln!(
            f,
            "  alpha 1/8 at the NIC rate, doubled per doubling of the port's rate: the HPCC artifact's MMU; XON {} largest frames below XOFF):",
            rules::XON_FRAMES
        )?;
        for g in &self.groups {
            let more = if g.count > 1 { format!(" and {} more alike", g.count - 1) } else { String::new() };
            writeln!(
                f,
                "  {}{more}: {} ports; headroom {} + reserves {} of {}: shared pool {}",
                g.example,
                g.ports,
                fmt_bytes(g.headroom_total),
                fmt_bytes(g.reserve_total),
                fmt_bytes(i.buffer_bytes),
                fmt_bytes(g.pool)
            )?;
            for t in &g.thresholds {
                let c = &self.classes[t.class];
                writeln!(
                    f,
                    "    ingress from {} ({} x {}): alpha {}; XOFF at {} B with one congested queue, {} B with every lossless queue congested; XON {} B below: {} B / {} B",
                    if c.facing_host { "hosts" } else { "switches" },
                    t.ports,
                    fmt_rate(c.rate_bps),
                    alpha_text(c.alpha),
                    t.xoff_one,
                    t.xoff_all,
                    t.xoff_one - t.xon_one,
                    t.xon_one,
                    t.xon_all
                )?;
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "ECN at switch egress (RED on the queue: no mark below Kmin, probability rising to Pmax at Kmax, every packet above;"
        )?;
        writeln!(
            f,
            "  Kmin 100 KB and Kmax 400 KB x rate/25G, Pmax 0.2: the HPCC artifact's run.py for DCQCN):"
        )?;
        for e in &self.ecn {
            write!(
                f,
                "  {}: Kmin {}, Kmax {}, Pmax {}",
                fmt_rate(e.rule.rate_bps),
                fmt_bytes(e.rule.kmin),
                fmt_bytes(e.rule.kmax),
                e.rule.pmax
            )?;
            match &e.lowered {
                Some(l) => writeln!(
                    f,
                    "  (lowered from {}: at {}, {} ingress ports of {} overload it and pause at {} in all, so Kmax must stay below that: ECN before PFC, DCQCN paper §5)",
                    fmt_bytes(e.published.kmax),
                    l.group,
                    l.k,
                    fmt_rate(l.ingress_rate_bps),
                    fmt_bytes(l.bound)
                )?,
                None => writeln!(f, "  (marks before any ingress feeding it pauses: ECN before PFC holds)")?,
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "DCQCN at the NICs (the `{}` set{}; R_AI 5 Mb/s and R_HAI 50 Mb/s x rate/25G, as the HPCC artifact's run.py scales the firmware's):",
            self.nic.dcqcn_set,
            match self.nic.dcqcn_set.as_str() {
                "hpcc" => ": the HPCC artifact's model of NVIDIA's DCQCN with run.py's values",
                "nvidia" => ": NVIDIA ConnectX firmware defaults",
                _ => ": the DCQCN paper's values",
            }
        )?;
        let mut p = DcqcnParams::named(&self.nic.dcqcn_set).unwrap_or_else(|_| DcqcnParams::hpcc());
        for kv in &self.nic.dcqcn_params {
            // The plan's own overrides; a bad one cannot come from `plan`.
            let _ = p.set_kv(kv);
        }
        let get = |k: &str| p.get(k).unwrap_or_default();
        writeln!(
            f,
            "  g {} (alpha updated every {}), a rate cut at most every {}, rate-increase timer {}, F = {}, R_AI {}, R_HAI {}, a CNP at most every {} per QP, minimum rate {}",
            get("g"),
            get("alpha_period"),
            get("rate_decrease_period"),
            get("rate_increase_period"),
            get("fast_recovery_steps"),
            get("ai_rate_bps"),
            get("hai_rate_bps"),
            get("min_time_between_cnps"),
            get("min_rate_bps")
        )?;
        writeln!(f, "  PFC frames carry XOFF/XON; the headroom above does not depend on their pause time.")
    }
}

fn fmt_run(f: &mut fmt::Formatter<'_>, r: &RunSummary) -> fmt::Result {
    let slow = r.slowdown.map_or("-".to_string(), |s| format!("{:.3} / {:.3} / {:.3}", s.p50, s.p95, s.p99));
    writeln!(
        f,
        "  {}: {} of {} flows finished, {} simulated",
        r.name,
        r.finished,
        r.flows,
        fmt_time(r.end_ps)
    )?;
    writeln!(
        f,
        "    drops {} ({} for want of buffer); XOFFs sent {}; paused {} in all, longest {}, {} ports; ECN marks {}; slowdown p50/p95/p99 {slow}",
        r.drops(),
        r.drops_buffer,
        r.pauses_sent,
        fmt_time(r.pause.total_ps),
        fmt_time(r.pause.longest_ps),
        r.pause.ports,
        r.ecn_marks
    )?;
    match &r.fullest {
        Some(p) => writeln!(
            f,
            "    fullest headroom: {}, {} B of {} B ({:.0} %)",
            p.name,
            p.used.peak_bytes,
            p.used.headroom_bytes,
            100.0 * p.used.peak_bytes as f64 / p.used.headroom_bytes.max(1) as f64
        )?,
        None => writeln!(f, "    no headroom used: no frame arrived after an XOFF")?,
    }
    for p in r.refusing_ports.iter().take(5) {
        writeln!(
            f,
            "    {} refused {} frames (its {} B headroom full)",
            p.name, p.used.refused, p.used.headroom_bytes
        )?;
    }
    if r.refusing_ports.len() > 5 {
        writeln!(f, "    ... {} ports refused frames in all", r.refusing_ports.len())?;
    }
    Ok(())
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Check by simulation with the plan (drops must be 0; paused: PAUSE to RESUME per port and priority; slowdown: FCT / standalone FCT):"
        )?;
        for r in self.runs() {
            fmt_run(f, r)?;
        }
        let problems = self.problems();
        if problems.is_empty() {
            writeln!(f, "verdict: the plan HOLDS (no drops, every flow finished)")
        } else {
            writeln!(f, "verdict: the plan DOES NOT HOLD")?;
            for p in problems {
                writeln!(f, "  {p}")?;
            }
            Ok(())
        }
    }
}
