//! What the target's and the initiator's queues share on a `roce` device.

use std::time::{Duration, Instant};

use roce::{Access, AttrMask, Cq, Device, Pd, Qp, QpAttr, QpBuilder, QpState, Result, Wc};

/// The longest a queue's thread with work outstanding spins on its CQ
/// before it sleeps: longer than a command's turn-around on a fast path.
/// 128 KiB reads at QD8 complete every 100-200 us on loopback, and a
/// 100 us spin fell asleep between them, the driver thread and a futex
/// wake-up carrying each completion (4,500 IOPS against 6,300-8,200 with
/// 1 ms, same machine, alternating runs).
const MAX_SPIN: Duration = Duration::from_millis(1);

/// The shortest: a 4 KiB read's turn-around on loopback.
const MIN_SPIN: Duration = Duration::from_micros(50);

/// A queue thread's spin, adapted to its peer as Linux's hybrid polling
/// adapts its sleep: a spin that ends in a completion doubles the next
/// one's budget (up to [`MAX_SPIN`]), one that runs out halves it (down to
/// [`MIN_SPIN`]). Against a near, fast peer the thread never sleeps while
/// commands are out; against a slow one (an emulated VM, a distant host,
/// answers milliseconds apart) it stops burning a core waiting.
#[derive(Debug, Clone)]
pub(crate) struct Spin {
    budget: Duration,
}

impl Default for Spin {
    fn default() -> Spin {
        Spin { budget: MAX_SPIN }
    }
}

impl Spin {
    /// Completions on `cq`, waiting up to `wait` for the first. While
    /// `busy()` (work outstanding: responses on the target, commands on
    /// the host) the thread spins for up to its budget driving the
    /// device's socket itself (`Cq::poll_or_drive` for `qpn`'s sends):
    /// what arrives is handled without the driver thread's wake-up and
    /// this thread's. Then it hands the socket back and sleeps in
    /// `Cq::wait`.
    pub(crate) fn next_completions(
        &mut self,
        cq: &Cq,
        qpn: u32,
        busy: impl Fn() -> bool,
        wcs: &mut [Wc],
        wait: Duration,
    ) -> Result<usize> {
        let start = Instant::now();
        let spin = wait.min(self.budget);
        let mut spun = false;
        while busy() && start.elapsed() < spin {
            spun = true;
            let n = cq.poll_or_drive(wcs, &[qpn], 1)?;
            if n > 0 {
                self.budget = (self.budget * 2).min(MAX_SPIN);
                return Ok(n);
            }
            std::hint::spin_loop();
        }
        if spun && spin == self.budget {
            self.budget = (self.budget / 2).max(MIN_SPIN);
        }
        let n = cq.poll_or_drive(wcs, &[], 1)?;
        if n > 0 || wait.is_zero() {
            return Ok(n);
        }
        match cq.wait(wcs, wait.saturating_sub(start.elapsed())) {
            Err(roce::Error::Timeout(_)) => Ok(0),
            r => r,
        }
    }

    /// The budget of the next spin.
    #[cfg(test)]
    fn budget(&self) -> Duration {
        self.budget
    }
}

/// An RC QP in INIT for a queue of `entries` commands: receives for as
/// many capsules, sends for a data transfer and a capsule each, inline
/// capsules up to an SQE, one SGE each way, its own CQ; remote `access`.
pub(crate) fn capsule_qp(dev: &Device, entries: usize, access: Access) -> Result<(Pd, Qp)> {
    let cq = dev.create_cq(4 * entries + 16)?;
    let pd = dev.alloc_pd()?;
    let qp = pd.create_qp(
        QpBuilder::rc(&cq)
            .max_send_wr(2 * entries as u32 + 8)
            .max_recv_wr(entries as u32)
            .max_sge(1, 1)
            .max_inline_data(64),
    )?;
    let init = QpAttr { qp_state: QpState::Init, qp_access_flags: access, ..QpAttr::default() };
    qp.modify(&init, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)?;
    Ok((pd, qp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce::{alloc_buffer, DeviceConfig, RecvWr};

    /// The budget halves while spins run out, down to the floor, stays put
    /// when the caller's wait (not the budget) ends the spin or nothing is
    /// outstanding, and doubles when a spin finds a completion.
    #[test]
    fn spin_budget_follows_the_peer() {
        let dev = Device::open(DeviceConfig::new("127.0.0.28:4791".parse().unwrap())).unwrap();
        let (pd, qp) = capsule_qp(&dev, 4, Access::NONE).unwrap();
        let cq = qp.recv_cq();
        let mut wcs = [Wc::EMPTY; 4];
        let mut s = Spin::default();
        assert_eq!(s.budget(), MAX_SPIN);
        let mut budgets = Vec::new();
        for _ in 0..7 {
            let n = s.next_completions(cq, qp.qpn(), || true, &mut wcs, MAX_SPIN + MIN_SPIN).unwrap();
            assert_eq!(n, 0);
            budgets.push(s.budget().as_micros());
        }
        assert_eq!(budgets, [500, 250, 125, 62, 50, 50, 50]);
        // Nothing outstanding, or a wait shorter than the budget: no news.
        s.next_completions(cq, qp.qpn(), || false, &mut wcs, MIN_SPIN).unwrap();
        s.next_completions(cq, qp.qpn(), || true, &mut wcs, MIN_SPIN / 2).unwrap();
        assert_eq!(s.budget(), MIN_SPIN);
        // A completion (a receive flushed by the move to ERR) found while
        // spinning doubles it.
        let mr = pd.reg_mr(alloc_buffer(64), Access::LOCAL_WRITE).unwrap();
        qp.post_recv(RecvWr { wr_id: 1, sg_list: vec![mr.sge(0, 64)] }).unwrap();
        qp.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, AttrMask::STATE).unwrap();
        let n = s.next_completions(cq, qp.qpn(), || true, &mut wcs, MAX_SPIN).unwrap();
        assert_eq!((n, wcs[0].wr_id), (1, 1));
        assert_eq!(s.budget(), 2 * MIN_SPIN);
    }
}
