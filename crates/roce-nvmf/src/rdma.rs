//! What the target's and the initiator's queues share on a `roce` device.

use std::time::{Duration, Instant};

use roce::{Access, AttrMask, Cq, Device, Pd, Qp, QpAttr, QpBuilder, QpState, Result, Wc};

/// How long a queue's thread with work outstanding spins on its CQ
/// before it sleeps. Longer than a command's turn-around: 128 KiB reads
/// at QD8 complete every 100-200 us on loopback, and a 100 us spin fell
/// asleep between them, the driver thread and a futex wake-up carrying
/// each completion (4,500 IOPS against 6,300-8,200 with 1 ms, same
/// machine, alternating runs).
const SPIN: Duration = Duration::from_millis(1);

/// Completions on `cq`, waiting up to `wait` for the first. While
/// `busy()` (work outstanding: responses on the target, commands on the
/// host) the thread spins for up to [`SPIN`] driving the device's socket
/// itself (`Cq::poll_or_drive` for `qpn`'s sends): what arrives is
/// handled without the driver thread's wake-up and this thread's. Then it
/// hands the socket back and sleeps in `Cq::wait`.
pub(crate) fn next_completions(
    cq: &Cq,
    qpn: u32,
    busy: impl Fn() -> bool,
    wcs: &mut [Wc],
    wait: Duration,
) -> Result<usize> {
    let start = Instant::now();
    let spin = wait.min(SPIN);
    while busy() && start.elapsed() < spin {
        let n = cq.poll_or_drive(wcs, &[qpn], 1)?;
        if n > 0 {
            return Ok(n);
        }
        std::hint::spin_loop();
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
