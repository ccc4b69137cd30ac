//! The grid file read, its base normalised, its points built.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::{Table, Value};

use super::SweepError;
use crate::plan::check::{parse_cdf, poisson_flows};
use crate::scenario::{validate, Scenario, ScenarioError};
use crate::{builtin, hpcc, toml_scenario};

/// The most points a grid may have (a grid past this is a typo, not a
/// study).
pub const MAX_POINTS: usize = 100_000;

/// The prefix of the keys that set the `[workload]`.
const WORKLOAD_PREFIX: &str = "workload.";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GridFile {
    name: Option<String>,
    #[serde(default)]
    skip_invalid: bool,
    base: BaseFile,
    workload: Option<Table>,
    #[serde(default)]
    axis: Vec<AxisFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BaseFile {
    builtin: Option<String>,
    scenario: Option<PathBuf>,
    hpcc_run: Option<PathBuf>,
    hpcc_topology: Option<PathBuf>,
    max_flows: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AxisFile {
    key: Option<String>,
    values: Vec<Value>,
    name: Option<String>,
    labels: Option<Vec<String>>,
}

/// A `[workload]` once a point's settings are in it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadFile {
    cdf: PathBuf,
    load: f64,
    duration: String,
    seed: Option<u64>,
}

/// One axis of the grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The table's column for it.
    pub name: String,
    /// The dotted key it sets; `None`: each value is a table of settings
    /// (dotted keys and their values), all made together.
    pub key: Option<String>,
    pub values: Vec<Value>,
    /// Each value as the table shows it.
    pub labels: Vec<String>,
}

/// A grid read from its file.
#[derive(Debug, Clone)]
pub struct Grid {
    pub name: String,
    pub axes: Vec<Axis>,
    pub skip_invalid: bool,
    /// The base scenario in the scenario format, every setting explicit.
    base: Table,
    workload: Option<Table>,
    /// IB payload per packet for the standalone FCT when the base says it
    /// (an HPCC run's PACKET_PAYLOAD_SIZE); otherwise each point's MTU.
    payload: Option<u64>,
    /// The grid file's directory, which its paths are relative to.
    dir: PathBuf,
}

/// One point of a grid, built.
#[derive(Debug, Clone)]
pub struct Point {
    pub index: usize,
    /// Its value on each axis, as the table shows it.
    pub values: Vec<String>,
    pub scenario: Scenario,
    /// IB payload per packet for the standalone FCT.
    pub payload: u64,
}

impl Grid {
    /// Reads a grid file (format in the module documentation of
    /// [`crate::sweep`]).
    pub fn from_path(path: &Path) -> Result<Grid, SweepError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| SweepError::Io { path: path.to_path_buf(), source })?;
        let stem = path.file_stem().map_or_else(|| "sweep".into(), |s| s.to_string_lossy().into_owned());
        let dir = path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Grid::parse(&text, path, &stem, &dir)
    }

    /// Reads a grid from `text`; `path` names it in errors, `stem` is its
    /// default name and `dir` what its paths are relative to.
    pub fn parse(text: &str, path: &Path, stem: &str, dir: &Path) -> Result<Grid, SweepError> {
        let file: GridFile = toml::from_str(text)
            .map_err(|e| SweepError::Syntax { path: path.to_path_buf(), message: e.to_string() })?;
        let (scenario, payload) = load_base(&file.base, dir)?;
        let base: Table = toml_scenario::to_toml(&scenario)
            .parse()
            .map_err(|e| SweepError::Grid(format!("the base scenario does not write back as TOML: {e}")))?;
        let mut axes = Vec::with_capacity(file.axis.len());
        for a in file.axis {
            let what = a.key.clone().or_else(|| a.name.clone()).unwrap_or_default();
            let key_err = |reason: &str| SweepError::Key { key: what.clone(), reason: reason.into() };
            match &a.key {
                Some(key) => check_key(key).map_err(|r| key_err(&r))?,
                None => {
                    if a.name.is_none() {
                        return Err(SweepError::Grid(
                            "an [[axis]] without a key (its values are tables of settings) needs a name"
                                .into(),
                        ));
                    }
                    for v in &a.values {
                        let Value::Table(t) = v else {
                            return Err(key_err("without a key, every value is a table of settings"));
                        };
                        let mut keys = Vec::new();
                        flatten(t, "", &mut keys);
                        for (k, _) in keys {
                            check_key(&k).map_err(|r| key_err(&format!("{k}: {r}")))?;
                        }
                    }
                }
            }
            if a.values.is_empty() {
                return Err(key_err("no values"));
            }
            let labels = match a.labels {
                Some(l) if l.len() != a.values.len() => {
                    return Err(key_err(&format!("{} labels for {} values", l.len(), a.values.len())))
                }
                Some(l) => l,
                None => a.values.iter().map(label).collect(),
            };
            let name = a.name.or(a.key.clone()).expect("a key or a name, checked");
            if name == "point" || super::FIGURES.contains(&name.as_str()) {
                return Err(SweepError::Grid(format!(
                    "axis name {name:?} is a column of the table already; give the axis another name"
                )));
            }
            if axes.iter().any(|x: &Axis| x.name == name) {
                return Err(SweepError::Grid(format!("two axes are named {name:?}")));
            }
            axes.push(Axis { name, key: a.key, values: a.values, labels });
        }
        if axes.is_empty() {
            return Err(SweepError::Grid("the grid has no [[axis]]".into()));
        }
        let points = axes.iter().try_fold(1usize, |n, a| n.checked_mul(a.values.len()));
        if points.is_none_or(|n| n > MAX_POINTS) {
            return Err(SweepError::Grid(format!("the grid has more than {MAX_POINTS} points")));
        }
        let grid = Grid {
            name: file.name.unwrap_or_else(|| stem.to_string()),
            axes,
            skip_invalid: file.skip_invalid,
            base,
            workload: file.workload,
            payload,
            dir: dir.to_path_buf(),
        };
        // Every key must address the base: tried with each axis's first
        // value, so a typo fails before any point runs.
        let mut trial = (grid.base.clone(), grid.workload.clone());
        for a in &grid.axes {
            grid.set(&mut trial.0, &mut trial.1, a, &a.values[0])?;
        }
        // A key the format does not know, or a value of the wrong type,
        // is the grid's fault whatever the point: found here too. (A
        // value the scenario's checks reject is the point's, below.)
        if let Err(ScenarioError::Syntax(m)) = toml_scenario::from_str(&trial.0.to_string()) {
            return Err(SweepError::Grid(format!("with each axis at its first value: {m}")));
        }
        Ok(grid)
    }

    /// How many points the grid has.
    pub fn points(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    /// The base scenario in the scenario format: the text the axes' keys
    /// address.
    pub fn base_toml(&self) -> String {
        self.base.to_string()
    }

    /// Point `index`'s value on each axis (the last axis varies fastest).
    /// `None` past the last point.
    pub fn values(&self, index: usize) -> Option<Vec<&Value>> {
        Some(self.value_indices(index)?.into_iter().zip(&self.axes).map(|(k, a)| &a.values[k]).collect())
    }

    /// Point `index`'s values as the table shows them.
    pub fn labels(&self, index: usize) -> Option<Vec<String>> {
        Some(
            self.value_indices(index)?
                .into_iter()
                .zip(&self.axes)
                .map(|(k, a)| a.labels[k].clone())
                .collect(),
        )
    }

    /// Point `index`'s position on each axis.
    pub fn value_indices(&self, index: usize) -> Option<Vec<usize>> {
        if index >= self.points() {
            return None;
        }
        let mut rest = index;
        let mut out = vec![0; self.axes.len()];
        for (i, a) in self.axes.iter().enumerate().rev() {
            out[i] = rest % a.values.len();
            rest /= a.values.len();
        }
        Some(out)
    }

    /// Builds point `index`: the base with the point's settings, its
    /// workload generated, checked as any scenario is.
    pub fn point(&self, index: usize) -> Result<Point, SweepError> {
        let values = self.values(index).ok_or_else(|| {
            SweepError::Grid(format!(
                "no point {index}: the grid has {} (0..={})",
                self.points(),
                self.points() - 1
            ))
        })?;
        let labels = self.labels(index).expect("index checked");
        let bad = |reason: String| SweepError::Point { index, values: self.describe(&labels), reason };
        let mut base = self.base.clone();
        let mut workload = self.workload.clone();
        for (a, v) in self.axes.iter().zip(&values) {
            self.set(&mut base, &mut workload, a, v)?;
        }
        let mut scenario = toml_scenario::from_str(&base.to_string()).map_err(|e| bad(e.to_string()))?;
        if let Some(w) = workload {
            scenario.flows = self.generate(&scenario, w).map_err(|e| bad(e.to_string()))?;
        }
        validate(&scenario).map_err(|e| bad(e.to_string()))?;
        let payload = self.payload.unwrap_or(u64::from(scenario.nic.mtu));
        Ok(Point { index, values: labels, scenario, payload })
    }

    /// `kmin=100KB, nic.dcqcn_set=paper`.
    pub fn describe(&self, labels: &[String]) -> String {
        self.axes.iter().zip(labels).map(|(a, l)| format!("{}={l}", a.name)).collect::<Vec<_>>().join(", ")
    }

    /// Sets axis `a` to `v` in the scenario or the workload.
    fn set(
        &self,
        base: &mut Table,
        workload: &mut Option<Table>,
        a: &Axis,
        v: &Value,
    ) -> Result<(), SweepError> {
        match (&a.key, v) {
            (Some(key), v) => set_key(base, workload, key, v),
            (None, Value::Table(t)) => {
                let mut keys = Vec::new();
                flatten(t, "", &mut keys);
                keys.into_iter().try_for_each(|(k, v)| set_key(base, workload, &k, v))
            }
            (None, _) => {
                Err(SweepError::Key { key: a.name.clone(), reason: "a value is not a table".into() })
            }
        }
    }

    /// The workload `w` (a point's `[workload]`) on `scn`.
    fn generate(&self, scn: &Scenario, w: Table) -> Result<Vec<crate::FlowSpec>, SweepError> {
        let w: WorkloadFile = Value::Table(w)
            .try_into()
            .map_err(|e: toml::de::Error| SweepError::Grid(format!("[workload]: {}", e.message())))?;
        let path = self.dir.join(&w.cdf);
        let text =
            std::fs::read_to_string(&path).map_err(|source| SweepError::Io { path: path.clone(), source })?;
        let cdf = parse_cdf(&text)?;
        let duration = toml_scenario::parse_duration("workload.duration", &w.duration)?;
        Ok(poisson_flows(scn, &cdf, w.load, duration, w.seed.unwrap_or(scn.seed))?)
    }
}

/// Sets `key` to `v` in the scenario, or in the workload for `workload.*`.
fn set_key(base: &mut Table, workload: &mut Option<Table>, key: &str, v: &Value) -> Result<(), SweepError> {
    let key_err = |reason: String| SweepError::Key { key: key.to_string(), reason };
    let (root, path) = match key.strip_prefix(WORKLOAD_PREFIX) {
        Some(rest) => {
            let w = workload.as_mut().ok_or_else(|| key_err("the grid has no [workload]".into()))?;
            (w, rest)
        }
        None => (base, key),
    };
    let segs: Vec<&str> = path.split('.').collect();
    let n = set_in_table(root, &segs, v).map_err(key_err)?;
    if n == 0 {
        return Err(key_err("`*` matches no element (the list is empty)".into()));
    }
    Ok(())
}

/// A key's segments are not empty.
fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err("an empty segment".into());
    }
    Ok(())
}

/// A table of settings as (dotted key, value) pairs: nested tables are
/// walked (`{ nic = { mtu = 4096 } }` is `nic.mtu`), so a setting merges
/// into the base's table rather than replacing it.
fn flatten<'a>(t: &'a Table, prefix: &str, out: &mut Vec<(String, &'a Value)>) {
    for (k, v) in t {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            Value::Table(inner) => flatten(inner, &key, out),
            v => out.push((key, v)),
        }
    }
}

/// A value as the table shows it: strings bare, everything else as TOML.
fn label(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The base scenario and, for an HPCC run, its payload.
fn load_base(b: &BaseFile, dir: &Path) -> Result<(Scenario, Option<u64>), SweepError> {
    let given = [b.builtin.is_some(), b.scenario.is_some(), b.hpcc_run.is_some()];
    if given.iter().filter(|&&g| g).count() != 1 {
        return Err(SweepError::Grid("[base] takes exactly one of builtin, scenario and hpcc_run".into()));
    }
    if b.hpcc_topology.is_some() != b.hpcc_run.is_some() {
        return Err(SweepError::Grid("[base] hpcc_run and hpcc_topology go together".into()));
    }
    let (mut scn, payload) = if let Some(name) = &b.builtin {
        let scn = builtin::scenario(name).ok_or_else(|| {
            SweepError::Grid(format!(
                "no built-in scenario {name:?}; there are: {}",
                builtin::NAMES.join(", ")
            ))
        })?;
        (scn, None)
    } else if let Some(file) = &b.scenario {
        (toml_scenario::from_path(&dir.join(file))?, None)
    } else {
        let (run, topo) = (b.hpcc_run.as_ref(), b.hpcc_topology.as_ref());
        let run = hpcc::load_run_full(&dir.join(run.expect("checked")), &dir.join(topo.expect("checked")))?;
        let payload = u64::from(run.payload());
        (run.scenario, Some(payload))
    };
    if let Some(n) = b.max_flows {
        if n == 0 {
            return Err(SweepError::Grid("[base] max_flows must be at least 1".into()));
        }
        scn.flows.truncate(n);
    }
    Ok((scn, payload))
}

/// Sets `segs` under `t` to `v`; returns how many places were set. The
/// error says which segment did not fit.
fn set_in_table(t: &mut Table, segs: &[&str], v: &Value) -> Result<usize, String> {
    let (first, rest) = segs.split_first().expect("keys have a segment");
    if rest.is_empty() {
        t.insert((*first).to_string(), v.clone());
        return Ok(1);
    }
    let next = t.entry((*first).to_string()).or_insert_with(|| Value::Table(Table::new()));
    set_in_value(next, first, rest, v)
}

fn set_in_value(at: &mut Value, name: &str, segs: &[&str], v: &Value) -> Result<usize, String> {
    match at {
        Value::Table(t) => set_in_table(t, segs, v).map_err(|e| format!("{name}.{e}")),
        Value::Array(items) => {
            let (first, rest) = segs.split_first().expect("keys have a segment");
            let chosen: Vec<usize> = if *first == "*" {
                (0..items.len()).collect()
            } else {
                let i: usize =
                    first.parse().map_err(|_| format!("{name} is a list: index it with a number or `*`"))?;
                if i >= items.len() {
                    return Err(format!("{name} has {} elements, no [{i}]", items.len()));
                }
                vec![i]
            };
            let mut n = 0;
            for i in chosen {
                let item = &mut items[i];
                n += if rest.is_empty() {
                    *item = v.clone();
                    1
                } else {
                    set_in_value(item, &format!("{name}.{i}"), rest, v)?
                };
            }
            Ok(n)
        }
        other => Err(format!("{name} is a {}, which has no keys", other.type_str())),
    }
}
