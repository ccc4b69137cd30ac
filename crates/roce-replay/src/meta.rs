//! The job's parallelism (`meta-*.yaml` beside a trace): `dp_size`,
//! `pp_size`, `tp_size`, `vpp_size` (and `dsp_size`, `world_size`,
//! `trial_name`, `run_id`, which are checked or ignored).
//!
//! The file is a flat `key: value` map; only that subset of YAML is read.

use std::path::Path;

use crate::error::ReplayError;
use crate::trace::Op;

/// A job's parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobMeta {
    /// Data-parallel size.
    pub dp_size: u32,
    /// Pipeline-parallel size (stages).
    pub pp_size: u32,
    /// Tensor-parallel size.
    pub tp_size: u32,
    /// Virtual pipeline size (model chunks per stage).
    pub vpp_size: u32,
    /// Data-sequence (context) parallel size: ranks that split a sample's
    /// sequence and join the data-parallel gradient collectives. The
    /// traces keep one of them per data-parallel rank and stage.
    pub dsp_size: u32,
}

impl JobMeta {
    /// Parses the metadata file.
    pub fn read(path: &Path) -> Result<JobMeta, ReplayError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ReplayError::Io { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    /// Parses metadata text (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<JobMeta, ReplayError> {
        let bad = |line: usize, what: String| ReplayError::BadMeta { path: path.into(), line, what };
        let (mut dp, mut pp, mut tp, mut vpp, mut dsp, mut world) =
            (None, None, Some(1), Some(1), Some(1), None);
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() || line == "---" {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                return Err(bad(i + 1, format!("expected `key: value`, found `{line}`")));
            };
            let (key, value) = (key.trim(), value.trim());
            let slot = match key {
                "dp_size" => &mut dp,
                "pp_size" => &mut pp,
                "tp_size" => &mut tp,
                "vpp_size" => &mut vpp,
                "dsp_size" => &mut dsp,
                "world_size" => &mut world,
                _ => continue,
            };
            let v: u32 = value
                .parse()
                .map_err(|_| bad(i + 1, format!("{key} must be a positive integer, found `{value}`")))?;
            if v == 0 {
                return Err(bad(i + 1, format!("{key} must be positive")));
            }
            *slot = Some(v);
        }
        let need = |v: Option<u32>, key: &str| v.ok_or_else(|| bad(0, format!("{key} missing")));
        let meta = JobMeta {
            dp_size: need(dp, "dp_size")?,
            pp_size: need(pp, "pp_size")?,
            tp_size: need(tp, "tp_size")?,
            vpp_size: need(vpp, "vpp_size")?,
            dsp_size: need(dsp, "dsp_size")?,
        };
        if let Some(w) = world {
            let product: u64 = [meta.dp_size, meta.pp_size, meta.tp_size, meta.dsp_size]
                .iter()
                .map(|&v| u64::from(v))
                .product();
            if u64::from(w) != product {
                return Err(bad(
                    0,
                    format!("world_size {w} is not dp_size x pp_size x tp_size x dsp_size = {product}"),
                ));
            }
        }
        Ok(meta)
    }

    /// The parallelism a trace shows (sizes from the largest ranks
    /// recorded; `tp_size` counts the ranks recorded per data-parallel
    /// rank and stage, which is 1 where a trace keeps one rank of each
    /// tensor-parallel group).
    pub fn infer(ops: &[Op]) -> JobMeta {
        let dp = ops.iter().map(|o| o.dp_rank).max().unwrap_or(0) + 1;
        let pp = ops.iter().map(|o| o.stage).max().unwrap_or(0) + 1;
        let mut ranks: Vec<(u32, u32, u32)> = ops.iter().map(|o| (o.dp_rank, o.stage, o.rank)).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let mut tp = 1;
        let mut run = 0;
        for (i, r) in ranks.iter().enumerate() {
            run = if i > 0 && (ranks[i - 1].0, ranks[i - 1].1) == (r.0, r.1) { run + 1 } else { 1 };
            tp = tp.max(run);
        }
        JobMeta { dp_size: dp, pp_size: pp, tp_size: tp, vpp_size: 1, dsp_size: 1 }
    }

    /// Checks that every row fits the parallelism.
    pub fn check(&self, ops: &[Op]) -> Result<(), ReplayError> {
        if let Some(o) = ops.iter().find(|o| o.dp_rank >= self.dp_size || o.stage >= self.pp_size) {
            return Err(ReplayError::MetaMismatch(format!(
                "rank {} has dp_rank {} and stage {}, beyond dp_size {} / pp_size {}",
                o.rank, o.dp_rank, o.stage, self.dp_size, self.pp_size
            )));
        }
        let seen = JobMeta::infer(ops);
        if seen.tp_size > self.tp_size * self.dsp_size {
            return Err(ReplayError::MetaMismatch(format!(
                "{} ranks recorded for one data-parallel rank and stage, beyond tp_size x dsp_size {}",
                seen.tp_size,
                self.tp_size * self.dsp_size
            )));
        }
        Ok(())
    }
}
