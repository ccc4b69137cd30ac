//! perftest's output: the test information block, the address lines and
//! the result tables, with the statistics behind them (`print_report_bw`,
//! `print_report_lat`), computed from wall-clock timestamps.

use std::time::{Duration, Instant};

use super::exchange::{BwReport, KeyMsg};
use super::{Kind, Test, Verb};

/// The line perftest draws between blocks.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

const BW_HEADER_MB: &str = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const BW_HEADER_GB: &str = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// Samples of one latency run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatReport {
    pub size: u64,
    pub iters: u64,
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
}

/// A latency run bounded by time (`-D`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatDurReport {
    pub size: u64,
    pub iters: u64,
    pub t_avg: f64,
    pub tps: f64,
}

/// What the information block shows.
pub struct HeaderInfo<'a> {
    pub test: Test,
    pub atomic_name: &'a str,
    pub duplex: bool,
    pub server: bool,
    pub device: String,
    pub qps: usize,
    pub tx_depth: u32,
    pub rx_depth: u32,
    pub cq_mod: u32,
    pub mtu: usize,
    pub out_reads: u32,
    /// How received ICRCs are checked (`Device::rx_icrc_check`).
    pub icrc_check: String,
    /// `--encrypt`: how the packets are protected.
    pub encryption: Option<&'static str>,
}

/// `ctx_print_test_info`.
pub fn header(h: &HeaderInfo<'_>) -> String {
    let mut title = format!("{} ", h.test.verb.perftest_name());
    if h.test.verb == Verb::Atomic {
        title.push_str(h.atomic_name);
        title.push(' ');
    }
    match h.test.kind {
        Kind::Bw if h.duplex => title.push_str("Bidirectional BW "),
        Kind::Bw => title.push_str("BW "),
        Kind::Lat => title.push_str("Latency "),
    }
    title.push_str("Test");
    let mut s = format!("{RESULT_LINE}\n                    {title}\n");
    s += &format!(" Dual-port       : OFF\t\tDevice         : {}\n", h.device);
    s += &format!(" Number of qps   : {}\t\tTransport type : IB\n", h.qps);
    s += " Connection type : RC\t\tUsing SRQ      : OFF\n";
    s += " PCIe relax order: OFF\n";
    s += " ibv_wr* API     : OFF\n";
    if !h.server || h.duplex {
        s += &format!(" TX depth        : {}\n", h.tx_depth);
    }
    if h.test.verb == Verb::Send && (h.server || h.duplex) {
        s += &format!(" RX depth        : {}\n", h.rx_depth);
    }
    if h.test.kind == Kind::Bw {
        s += &format!(" CQ Moderation   : {}\n", h.cq_mod);
    }
    s += &format!(" Mtu             : {}[B]\n", h.mtu);
    s += " Link type       : Ethernet\n";
    s += " GID index       : 0\n";
    if matches!(h.test.verb, Verb::Read | Verb::Atomic) {
        s += &format!(" Outstand reads  : {}\n", h.out_reads);
    } else {
        s += " Max inline data : 0[B]\n";
    }
    s += " rdma_cm QPs\t : OFF\n";
    s += " Data ex. method : Ethernet\n";
    s += &format!(" ICRC check      : {}\n", h.icrc_check);
    if let Some(e) = h.encryption {
        s += &format!(" Encryption      : {e}\n");
    }
    s += RESULT_LINE;
    s
}

/// C's `%#0<width>x`: "0x" and zero padding to `width` characters, but a
/// plain zero-padded 0 (the `#` flag adds no prefix to zero).
pub fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// `ctx_print_pingpong_data`: the address line and the GID line of a QP.
pub fn address(side: &str, k: &KeyMsg, verb: Verb) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_alt_hex(k.lid.into(), 4),
        c_alt_hex(k.qpn.into(), 6),
        c_alt_hex(k.psn.into(), 6)
    );
    if verb == Verb::Read {
        s += &format!(" OUT {}", c_alt_hex(k.out_reads.into(), 4));
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        s += &format!(" RKey {} VAddr {}", c_alt_hex(k.rkey.into(), 8), c_alt_hex(k.vaddr, 16));
    }
    let gid: Vec<String> = k.gid.iter().map(|b| format!("{b:02}")).collect();
    s += &format!("\n GID: {}", gid.join(":"));
    s
}

pub fn bw_header(gbits: bool) -> &'static str {
    if gbits {
        BW_HEADER_GB
    } else {
        BW_HEADER_MB
    }
}

pub fn lat_header(duration: bool) -> &'static str {
    if duration {
        LAT_DUR_HEADER
    } else {
        LAT_HEADER
    }
}

/// `print_full_bw_report`: one row; `peer` is added in bidirectional runs.
pub fn bw_row(r: &BwReport, peer: Option<&BwReport>, gbits: bool) -> String {
    let (mut peak, mut avg, mut rate) = (r.bw_peak, r.bw_avg, r.msg_rate);
    if let Some(p) = peer {
        peak += p.bw_peak;
        avg += p.bw_avg;
        rate += p.msg_rate;
    }
    if gbits && avg < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.size, r.iters, peak, avg, rate
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            r.size, r.iters, peak, avg, rate
        )
    }
}

pub fn lat_row(r: &LatReport) -> String {
    format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        r.size, r.iters, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p99_9
    )
}

pub fn lat_dur_row(r: &LatDurReport) -> String {
    format!(" {:<7}       {}            {:<7.2}        {:<7.2}", r.size, r.iters, r.t_avg, r.tps)
}

/// Bytes per second expressed in MB/sec (2^20 bytes) or Gb/sec (10^9 bits).
fn bw_unit(bytes_per_sec: f64, gbits: bool) -> f64 {
    if gbits {
        bytes_per_sec / 125_000_000.0
    } else {
        bytes_per_sec / 1_048_576.0
    }
}

/// Most (i, j) pairs the peak search visits before it samples.
const PEAK_BUDGET: usize = 20_000_000;

/// `print_report_bw`: `posted[k]`/`completed[k]` are the times work request
/// k (over all QPs) was posted and seen complete; completions are reported
/// every `cq_mod` requests. The peak is the best rate over any run of
/// consecutive requests that ends at a completion.
pub fn bw_report(
    size: u64,
    posted: &[Instant],
    completed: &[Instant],
    cq_mod: usize,
    gbits: bool,
) -> BwReport {
    let n = posted.len().min(completed.len());
    if n == 0 {
        return BwReport { size, ..BwReport::default() };
    }
    let total = completed[n - 1].saturating_duration_since(posted[0]).as_secs_f64();
    let cq_mod = cq_mod.max(1);
    // Completion points: every cq_mod-th request and the last one.
    let mut ends: Vec<usize> = (cq_mod - 1..n).step_by(cq_mod).collect();
    if ends.last() != Some(&(n - 1)) {
        ends.push(n - 1);
    }
    let mut starts: Vec<usize> = (0..n).collect();
    while starts.len() * ends.len() > PEAK_BUDGET {
        starts = starts.into_iter().step_by(2).collect();
        if ends.len() > 1000 {
            ends = ends.into_iter().step_by(2).chain(std::iter::once(n - 1)).collect();
            ends.dedup();
        }
    }
    let mut best = total / n as f64;
    for &i in &starts {
        let from = ends.partition_point(|&j| j < i);
        for &j in &ends[from..] {
            let t = completed[j].saturating_duration_since(posted[i]).as_secs_f64() / (j - i + 1) as f64;
            if t < best {
                best = t;
            }
        }
    }
    let per_sec = |t: f64| if t > 0.0 { 1.0 / t } else { 0.0 };
    BwReport {
        size,
        iters: n as u64,
        bw_peak: bw_unit(size as f64 * per_sec(best), gbits),
        bw_avg: bw_unit(size as f64 * n as f64 * per_sec(total), gbits),
        msg_rate: n as f64 * per_sec(total) / 1e6,
    }
}

/// A report from a count and a time span (duration runs, receivers).
pub fn bw_report_span(size: u64, count: u64, span: Duration, gbits: bool) -> BwReport {
    let secs = span.as_secs_f64();
    let rate = if secs > 0.0 { count as f64 / secs } else { 0.0 };
    BwReport {
        size,
        iters: count,
        bw_peak: 0.0,
        bw_avg: bw_unit(size as f64 * rate, gbits),
        msg_rate: rate / 1e6,
    }
}

/// Requests at the tail of the sorted samples perftest leaves out.
const LAT_MEASURE_TAIL: usize = 2;

/// `print_report_lat`: the gaps between consecutive posts, divided by
/// `rtt_factor` (2 for ping-pong tests, where a gap is a round trip).
pub fn lat_report(size: u64, posted: &[Instant], rtt_factor: f64) -> LatReport {
    let us = |d: Duration| d.as_secs_f64() * 1e6 / rtt_factor;
    let mut delta: Vec<f64> = posted.windows(2).map(|w| us(w[1].saturating_duration_since(w[0]))).collect();
    delta.sort_by(f64::total_cmp);
    let iters = posted.len() as u64;
    if delta.len() <= LAT_MEASURE_TAIL {
        let v = delta.first().copied().unwrap_or(0.0);
        return LatReport {
            size,
            iters,
            t_min: v,
            t_max: v,
            t_typical: v,
            t_avg: v,
            t_stdev: 0.0,
            p99: v,
            p99_9: v,
        };
    }
    let m = delta.len() - LAT_MEASURE_TAIL;
    let median = if (m - 1) % 2 == 1 { (delta[m / 2] + delta[m / 2 - 1]) / 2.0 } else { delta[m / 2] };
    let avg = delta[..m].iter().sum::<f64>() / m as f64;
    let var = delta[..m].iter().map(|d| (d - avg).powi(2)).sum::<f64>() / m as f64;
    let at = |q: f64| delta[((m as f64 * q).ceil() as usize).min(delta.len() - 1)];
    LatReport {
        size,
        iters,
        t_min: delta[0],
        t_max: delta[m],
        t_typical: median,
        t_avg: avg,
        t_stdev: var.sqrt(),
        p99: at(0.99),
        p99_9: at(0.999),
    }
}

/// `print_report_lat_duration`.
pub fn lat_dur_report(size: u64, iters: u64, span: Duration, rtt_factor: f64) -> LatDurReport {
    let secs = span.as_secs_f64();
    let (t_avg, tps) = if iters > 0 && secs > 0.0 {
        (secs * 1e6 / rtt_factor / iters as f64, iters as f64 / secs)
    } else {
        (0.0, 0.0)
    };
    LatDurReport { size, iters, t_avg, tps }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_look_like_perftest() {
        let r = BwReport { size: 4096, iters: 5, bw_peak: 2.56, bw_avg: 2.56, msg_rate: 0.000656 };
        assert_eq!(
            bw_row(&r, None, false),
            " 4096       5                2.56               2.56   \t\t   0.000656"
        );
        let l = LatReport {
            size: 64,
            iters: 5,
            t_min: 536.33,
            t_max: 671.67,
            t_typical: 579.37,
            t_avg: 579.37,
            t_stdev: 43.0,
            p99: 671.67,
            p99_9: 671.67,
        };
        assert_eq!(
            lat_row(&l),
            " 64      5          536.33         671.67       579.37   \t       579.37      \t43.00  \t\t671.67  \t\t671.67 "
        );
    }

    #[test]
    fn address_lines_look_like_perftest() {
        let k = KeyMsg {
            qpn: 0x14,
            psn: 0x7ab9c9,
            rkey: 0x524,
            vaddr: 0x5621ec672000,
            gid: crate::oob::gid_bytes("10.47.0.2".parse().unwrap()),
            out_reads: 0x80,
            ..KeyMsg::default()
        };
        assert_eq!(
            address("local", &k, Verb::Write),
            " local address: LID 0000 QPN 0x0014 PSN 0x7ab9c9 RKey 0x000524 VAddr 0x005621ec672000\n \
             GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:47:00:02"
        );
        assert!(address("remote", &k, Verb::Read).contains("PSN 0x7ab9c9 OUT 0x80 RKey"));
        assert!(!address("remote", &k, Verb::Send).contains("RKey"));
    }

    #[test]
    fn latency_statistics_follow_perftest() {
        let t0 = Instant::now();
        let gaps = [10u64, 20, 30, 40, 1000];
        let mut posted = vec![t0];
        for g in gaps {
            posted.push(*posted.last().unwrap() + Duration::from_micros(g));
        }
        let r = lat_report(2, &posted, 2.0);
        assert_eq!(r.iters, 6);
        // sorted gaps /2: 5 10 15 20 500; measured: the first 3
        assert_eq!((r.t_min, r.t_max, r.t_typical), (5.0, 20.0, 10.0));
        assert!((r.t_avg - 10.0).abs() < 1e-9);
    }

    #[test]
    fn bandwidth_of_evenly_spaced_completions() {
        let t0 = Instant::now();
        let posted: Vec<Instant> = (0..10).map(|_| t0).collect();
        let completed: Vec<Instant> = (0..10).map(|i| t0 + Duration::from_millis(i + 1)).collect();
        let r = bw_report(1_048_576, &posted, &completed, 1, false);
        assert_eq!(r.iters, 10);
        assert!((r.bw_avg - 1000.0).abs() < 1e-6, "{r:?}");
        assert!((r.bw_peak - 1000.0).abs() < 1e-6, "{r:?}");
        assert!((r.msg_rate - 0.001).abs() < 1e-9);
    }
}
