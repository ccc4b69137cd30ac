//! The checks of a finished run against the plan: a shadow model predicts
//! every byte of every host's memory, and each module states and checks one
//! family of rules.

mod accounting;
mod atomics;
mod completions;
mod effects;
mod findings;
mod shadow;
mod ud;

use roce_proto::AsyncEvent;

pub use findings::{FailureKind, Findings};
pub use ud::{LedgerTap, UdLedger};

use crate::application::Completion;
use crate::net::{HostId, Network, RunEnd};
use crate::workload::{Live, Plan};

/// Everything a check may look at.
pub struct Ctx<'a> {
    pub plan: &'a Plan,
    pub live: &'a Live,
    pub net: &'a Network,
    pub end: RunEnd,
    pub completions: &'a [Completion],
    pub events: &'a [(HostId, AsyncEvent)],
    /// Send WRs the application could never post (the queue stayed full).
    pub unposted: usize,
    pub ledger: &'a UdLedger,
    /// Final memory of every host.
    pub actual: &'a [Vec<u8>],
}

/// Runs every check; the findings are empty if the run is correct. The
/// order puts the most telling finding first: liveness, counters,
/// completions, atomics, UD, memory, events.
pub fn verify(ctx: &Ctx<'_>) -> Findings {
    let mut f = Findings::default();
    accounting::check_liveness(ctx, &mut f);
    accounting::check_counters(ctx, &mut f);
    let obs = completions::Observed::new(ctx.completions);
    completions::check_sends(ctx, &obs, &mut f);
    let matches = completions::check_rc_recvs(ctx, &obs, &mut f);
    let mut shadow = shadow::Shadow::new(ctx.plan);
    effects::apply_rc(ctx.plan, &mut shadow);
    effects::apply_sends(ctx.plan, &matches, &mut shadow);
    atomics::check_counters(ctx, &mut shadow, &mut f);
    ud::check_ud(ctx, &obs, &mut shadow, &mut f);
    shadow.compare(ctx.plan, ctx.actual, &mut f);
    // Last: an unexplained error event is usually the echo of a failed WR.
    accounting::check_events(ctx, &mut f);
    f
}
