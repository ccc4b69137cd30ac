//! The latency loops of `roce perf`: perftest's `run_iter_lat_write`,
//! `run_iter_lat_send` and `run_iter_lat`.

use std::time::{Duration, Instant};

use roce::{Mr, WC_ZERO};

use super::{pattern_byte, read_u64, take, wait_one, RdmaSide, Stall};
use crate::oob::Result;
use crate::perf::exchange::{Role, Verdict};
use crate::perf::flow::Lat;
use crate::perf::report;
use crate::perf::Verb;

impl RdmaSide {
    fn lat_result(&self, size: u64, posted: &[Instant], iters: u64, span: Duration) -> Lat {
        let rtt = if matches!(self.verb(), Verb::Read | Verb::Atomic) { 1.0 } else { 2.0 };
        if self.conf.duration.is_some() {
            Lat::Duration(report::lat_dur_report(size, iters, span, rtt))
        } else {
            Lat::Iters(report::lat_report(size, posted, rtt))
        }
    }

    /// `run_iter_lat_write`: each side waits for the peer's counter in the
    /// last byte of its buffer, then writes its own; the server starts.
    pub(super) fn write_lat(&mut self, size: u64) -> Result<Lat> {
        let c = &self.conf;
        let (n, deadline) = (c.iters.unwrap_or(u64::MAX), c.duration.map(|d| Instant::now() + d));
        let server = self.role == Role::Server;
        let res = self.res();
        let (qp, mr) = (&res.qps[0], &res.mrs[0]);
        let (poll_at, post_at) = (res.half + size as usize - 1, size as usize - 1);
        let mut stall = Stall::new(c.timeout);
        let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
        let mut posted = Vec::with_capacity(c.iters.unwrap_or(0) as usize);
        let start = Instant::now();
        while scnt < n || ccnt < n || rcnt < n {
            if rcnt < n && !(scnt < 1 && server) {
                rcnt += 1;
                if !wait_byte(mr, poll_at, rcnt as u8, deadline, &mut stall)? {
                    break;
                }
            }
            if scnt < n {
                if deadline.is_none() {
                    posted.push(Instant::now());
                }
                scnt += 1;
                mr.write(post_at, &[scnt as u8])?;
                qp.post_send(self.wr(0, scnt - 1, size, true))?;
            }
            if ccnt < n {
                wait_one(&res.scq, &mut stall, "an RDMA WRITE")?;
                ccnt += 1;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        let span = start.elapsed();
        // The counter byte goes back to the pattern: with -a, later (larger)
        // messages carry it.
        mr.write(post_at, &[pattern_byte(0, post_at)])?;
        if c.verify && self.peer_is_roce {
            if let Verdict::Bad(m) = self.check_received(size, true) {
                self.failures.push(m);
            }
        }
        Ok(self.lat_result(size, &posted, ccnt, span))
    }

    /// `run_iter_lat_send`: a ping-pong of SENDs; the client starts.
    pub(super) fn send_lat(&mut self, size: u64) -> Result<Lat> {
        let c = self.conf.clone();
        let (n, deadline) = (c.iters.unwrap_or(u64::MAX), c.duration.map(|d| Instant::now() + d));
        let client = self.role == Role::Client;
        let mut stall = Stall::new(c.timeout);
        let (mut scnt, mut rcnt) = (0u64, [0u64]);
        let mut posted = Vec::with_capacity(c.iters.unwrap_or(0) as usize);
        let mut wc = [WC_ZERO];
        let start = Instant::now();
        'run: while scnt < n || rcnt[0] < n {
            if rcnt[0] < n && !(scnt < 1 && client) {
                loop {
                    let wait = stall.left().max(Duration::from_millis(1));
                    let wait =
                        deadline.map_or(wait, |d| wait.min(d.saturating_duration_since(Instant::now())));
                    if take(&self.res().rcq, &mut wc, wait)? == 1 {
                        stall.progress();
                        self.on_recvs(&wc, size, &mut rcnt, n)?;
                        break;
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        break 'run;
                    }
                    stall.check("waiting for the peer's SEND")?;
                }
            }
            if scnt < n {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if deadline.is_none() {
                    posted.push(Instant::now());
                }
                scnt += 1;
                let res = self.res();
                res.qps[0].post_send(self.wr(0, scnt - 1, size, true))?;
                wait_one(&res.scq, &mut stall, "a SEND")?;
            }
        }
        let span = start.elapsed();
        if c.verify && self.peer_is_roce {
            if let Verdict::Bad(m) = self.check_received(size, false) {
                self.failures.push(m);
            }
        }
        Ok(self.lat_result(size, &posted, scnt.min(rcnt[0]), span))
    }

    /// `run_iter_lat`: one READ or atomic at a time.
    pub(super) fn one_at_a_time(&mut self, size: u64) -> Result<Lat> {
        let c = &self.conf;
        let (n, deadline) = (c.iters.unwrap_or(u64::MAX), c.duration.map(|d| Instant::now() + d));
        let check_atomics = c.verify && self.peer_is_roce && self.verb() == Verb::Atomic;
        let res = self.res();
        let mut stall = Stall::new(c.timeout);
        let mut posted = Vec::with_capacity(c.iters.unwrap_or(0) as usize);
        let what = if self.verb() == Verb::Read { "an RDMA READ" } else { "an atomic" };
        let mut bad = None;
        let start = Instant::now();
        let mut done = 0u64;
        while done < n && deadline.is_none_or(|d| Instant::now() < d) {
            if deadline.is_none() {
                posted.push(Instant::now());
            }
            let wr = self.wr(0, done, size, true);
            let slot = wr.sg_list[0].addr - res.mrs[0].addr();
            res.qps[0].post_send(wr)?;
            wait_one(&res.scq, &mut stall, what)?;
            if check_atomics && bad.is_none() {
                // The word starts at 0 and every operation moves it on by one.
                let got = read_u64(&res.mrs[0], slot as usize).unwrap_or(u64::MAX);
                if got != done {
                    bad = Some(format!("data check failed: atomic {done} returned {got}, expected {done}"));
                }
            }
            done += 1;
        }
        let span = start.elapsed();
        self.checked |= check_atomics && bad.is_none();
        self.failures.extend(bad);
        if c.verify && self.verb() == Verb::Read {
            self.check_read(size);
        }
        Ok(self.lat_result(size, &posted, done, span))
    }
}

/// Waits until byte `at` of `mr` equals `want` ([`Mr::wait_byte`]: woken
/// by each receive, or driving the network itself on a busy-polling
/// device). Returns false when the deadline of a timed run passes first.
fn wait_byte(mr: &Mr, at: usize, want: u8, deadline: Option<Instant>, stall: &mut Stall) -> Result<bool> {
    loop {
        let mut wait = stall.left().max(Duration::from_millis(1));
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(Instant::now()));
        }
        if mr.wait_byte(at, want, wait)? {
            stall.progress();
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        stall.check("waiting for the peer's RDMA WRITE")?;
    }
}
