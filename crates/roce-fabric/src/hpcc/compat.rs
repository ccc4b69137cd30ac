//! `ns3_compat`: the modelling choices where the HPCC ns-3 artifact
//! (`simulation/src/point-to-point/model/rdma-hw.cc`, `switch-node.cc`,
//! `scratch/third.cc`) differs from what RoCE NICs and switches do, each
//! switchable, all turned to the artifact's behaviour by [`ns3_compat`].
//!
//! The default stays what a RoCE fabric does; the preset is how the model
//! is proved against the artifact's results. Each choice alone, and all
//! together, run on the baseline's fat-tree WebSearch run by
//! `crates/roce-fabric/sweeps/fat-tree-ns3-ablation.toml` (its figures are
//! in `docs/fabric-fidelity.md`): the one that moves the small flows'
//! tails is [`Choice::AcksQueuedWithData`].
//!
//! Facts of the artifact behind each choice:
//! - [`Choice::AckPerPacket`]: the receiver ACKs every in-order packet
//!   (`ReceiverCheckSeq` resets its milestone on each one, whatever
//!   `L2_ACK_INTERVAL` says); a RoCE responder coalesces, here an ACK is
//!   asked for every [`NicConfig::ack_req_every`] packets.
//! - [`Choice::AcksQueuedWithData`]: the artifact's switches queue ACKs
//!   with their flow's data (`SwitchNode::m_ackHighPrio` is never set, so
//!   `ACK_HIGH_PRIO 1` reaches only the NICs, which still send ACKs
//!   first); a RoCE fabric gives ACKs and CNPs their own priority.
//! - [`Choice::CnpsWithTheirFlow`]: the artifact's CNP is a flag in the
//!   ACK of every CE-marked packet (`ReceiveUdp`: `SetCnp`), so it travels
//!   with the flow and is not rate-limited at the receiver; here a CNP is
//!   its own packet (RoCEv2 opcode 0x81) at `cnp_dscp`, at most one per
//!   `min_time_between_cnps` per QP.
//!
//! Already the artifact's in every run of its files (not choices): DCQCN's
//! first CNP starts the alpha and decrease timers without cutting, the
//! increase timer restarts at each cut, no byte counter (`hpcc` set);
//! ECN marked at dequeue on the egress queue's bytes; PFC XOFF/XON
//! without a pause timer; a new QP starts at line rate.

use crate::scenario::{AckClass, NicConfig, Scenario};

/// One modelling choice of the artifact's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// An ACK for every packet (`nic.ack_req_every = 1`).
    AckPerPacket,
    /// Switches queue ACKs and CNPs at their packet's own class, an ACK
    /// with its flow's data (`switch.ack_class = "packet"`).
    AcksQueuedWithData,
    /// CNPs in their flow's class and one per marked packet
    /// (`cnp_dscp` = the lossless priority x 8, `min_time_between_cnps=0`).
    CnpsWithTheirFlow,
}

impl Choice {
    /// Every choice, in the ablation's order.
    pub const ALL: [Choice; 3] =
        [Choice::AckPerPacket, Choice::AcksQueuedWithData, Choice::CnpsWithTheirFlow];

    pub fn name(self) -> &'static str {
        match self {
            Choice::AckPerPacket => "ack-per-packet",
            Choice::AcksQueuedWithData => "acks-queued-with-data",
            Choice::CnpsWithTheirFlow => "cnps-with-their-flow",
        }
    }

    /// Turns this choice to the artifact's behaviour in `scn`.
    pub fn apply(self, scn: &mut Scenario) {
        match self {
            Choice::AckPerPacket => scn.nic.ack_req_every = 1,
            Choice::AcksQueuedWithData => scn.switch.ack_class = AckClass::Packet,
            Choice::CnpsWithTheirFlow => {
                // The flows' class: the lowest lossless priority, where
                // the artifact's flows (and ours from its files) run.
                let mask = scn.switch.lossless_mask;
                let prio = if mask == 0 { 0 } else { mask.trailing_zeros() as u8 };
                set_param(&mut scn.nic, "cnp_dscp", &(u32::from(prio) * 8).to_string());
                set_param(&mut scn.nic, "min_time_between_cnps", "0ns");
            }
        }
    }
}

/// Sets `key` among the NIC's DCQCN overrides (replacing an earlier one).
fn set_param(nic: &mut NicConfig, key: &str, value: &str) {
    let prefix = format!("{key}=");
    nic.dcqcn_params.retain(|p| !p.trim_start().starts_with(&prefix));
    nic.dcqcn_params.push(format!("{key}={value}"));
}

/// Turns every [`Choice`] to the artifact's behaviour.
pub fn ns3_compat(scn: &mut Scenario) {
    for c in Choice::ALL {
        c.apply(scn);
    }
}
