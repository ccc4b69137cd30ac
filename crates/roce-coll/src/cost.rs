//! The cost model that picks an algorithm (NCCL tuner style:
//! `time = latency * steps + bytes_on_the_wire / bandwidth`).

/// Measurable parameters of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Per-step latency (one message's one-way latency plus software
    /// overhead), ns.
    pub alpha_ns: f64,
    /// Per-rank link bandwidth, bytes per second.
    pub link_bytes_per_s: f64,
    /// Reduction throughput of one core, bytes per second.
    pub reduce_bytes_per_s: f64,
}

impl Default for Params {
    fn default() -> Params {
        Params { alpha_ns: 20_000.0, link_bytes_per_s: 2.0e9, reduce_bytes_per_s: 8.0e9 }
    }
}
