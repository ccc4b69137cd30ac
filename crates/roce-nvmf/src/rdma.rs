//! What the target's and the initiator's queues share on a `roce` device.

use roce::{Access, AttrMask, Device, Pd, Qp, QpAttr, QpBuilder, QpState, Result};

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
