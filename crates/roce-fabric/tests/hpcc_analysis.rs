//! HPCC's own analysis, `analysis/fct_analysis.py` of the HPCC artifact
//! (alibaba-edu/High-Precision-Congestion-Control, commit 9f4be2a), run on
//! the `fct.txt` we write.
//!
//! This test downloads nothing and the script is not copied here:
//! [`script`] re-implements what it does, step by step, on the file's
//! text — the shell pipeline it runs (`awk` selects the flows with
//! `$4 == 100 && $6 + $7 < T` and prints `slowdown size`, the slowdown
//! clipped at 1 and printed as awk prints numbers; `sort -n -k 2`, ties by
//! the whole line in the C locale), then its Python 2 (`split('\n')[:-2]`,
//! integer-division bins of `step` %, `get_pctl`'s `a[int(len(a) * p)]`,
//! the `%.3f` rows, several files side by side as its "CCs"). It is
//! written from the script's text, apart from `roce_fabric::compare::
//! fct_analysis` (which computes the same table from parsed lines and is
//! what `roce sim compare` prints), so that the two can disagree.
//!
//! What it shows:
//! - on our output the script finds the flows (with the UDP ports of the
//!   wire in the sport/dport columns, as we used to write, it finds none);
//! - on two of our runs, its output is the table `roce sim compare`
//!   prints for them, line for line;
//! - on the baseline's own fat-tree `fct.txt` (when
//!   `shared/fabric-sim-baseline` is beside the repository), too.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use roce_fabric::compare::{compare, fct_analysis};
use roce_fabric::hpcc::{self, read_fct};
use roce_fabric::*;

/// The script's defaults: `-s 5 -t 0 -T 3000000000`.
const STEP: usize = 5;
const NORMAL_DPORT: &str = "100";
const TIME_LIMIT: f64 = 3_000_000_000.0;

/// Why the script would stop.
#[derive(Debug, PartialEq)]
enum ScriptError {
    /// `d[-1]` of an empty bin: an IndexError (fewer lines than bins).
    EmptyBin(usize),
    /// awk's division by zero.
    DivisionByZero,
}

/// awk's number-to-text for `print`: an integral value as an integer,
/// anything else with OFMT `%.6g`.
fn awk_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e16 {
        return format!("{}", v as i64);
    }
    // %.6g: the exponent X of the value rounded to 6 significant digits;
    // fixed notation with 5 - X decimals when -4 <= X < 6, else
    // scientific; trailing zeros (and a bare point) removed.
    let sci = format!("{v:.5e}");
    let x: i32 = sci[sci.find('e').unwrap() + 1..].parse().unwrap();
    let strip = |t: String| {
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t
        }
    };
    if (-4..6).contains(&x) {
        strip(format!("{v:.prec$}", prec = (5 - x) as usize))
    } else {
        let m = strip(sci[..sci.find('e').unwrap()].to_string());
        format!("{m}e{}{:02}", if x < 0 { '-' } else { '+' }, x.abs())
    }
}

/// `awk '{if ($4==100 && $6+$7<T) {slow=$7/$8; print slow<1?1:slow, $5}}'`
fn awk_select(fct_txt: &str) -> Result<String, ScriptError> {
    let mut out = String::new();
    for line in fct_txt.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let num = |s: &str| s.parse::<f64>().unwrap_or(0.0);
        if f[3] == NORMAL_DPORT && num(f[5]) + num(f[6]) < TIME_LIMIT {
            if num(f[7]) == 0.0 {
                return Err(ScriptError::DivisionByZero);
            }
            let slow = num(f[6]) / num(f[7]);
            out += &format!("{} {}\n", awk_number(if slow < 1.0 { 1.0 } else { slow }), f[4]);
        }
    }
    Ok(out)
}

/// `sort -n -k 2` under the C locale: by the number at the start of the
/// second field, equal keys by the whole line's bytes.
fn sort_n_k2(text: &str) -> String {
    let key = |l: &str| -> u64 { l.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0) };
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_by(|a, b| match key(a).cmp(&key(b)) {
        Ordering::Equal => a.as_bytes().cmp(b.as_bytes()),
        o => o,
    });
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The script on the text of one `fct.txt` per "CC": its stdout.
fn script(files: &[&str]) -> Result<String, ScriptError> {
    let pctl = |a: &[f64], p: f64| a[(a.len() as f64 * p) as usize];
    // res[i / step] = [i / 100.] then, per CC: size, p50, p95, p99.
    let mut res: Vec<Vec<f64>> = (0..100).step_by(STEP).map(|i| vec![i as f64 / 100.0]).collect();
    for fct_txt in files {
        let output = sort_n_k2(&awk_select(fct_txt)?);
        let pieces: Vec<&str> = output.split('\n').collect();
        let a = &pieces[..pieces.len().saturating_sub(2)];
        let n = a.len();
        for i in (0..100).step_by(STEP) {
            let (l, r) = (i * n / 100, (i + STEP) * n / 100);
            let d: Vec<(f64, u64)> = a[l..r]
                .iter()
                .map(|x| {
                    let mut w = x.split_whitespace();
                    (w.next().unwrap().parse().unwrap(), w.next().unwrap().parse().unwrap())
                })
                .collect();
            let mut fct: Vec<f64> = d.iter().map(|x| x.0).collect();
            fct.sort_by(|x, y| x.partial_cmp(y).unwrap());
            let last = d.last().ok_or(ScriptError::EmptyBin(i))?;
            res[i / STEP].extend([last.1 as f64, pctl(&fct, 0.5), pctl(&fct, 0.95), pctl(&fct, 0.99)]);
        }
    }
    let mut out = String::new();
    for item in &res {
        out += &format!("{:.3} {}", item[0], item[1] as u64);
        for cc in 0..files.len() {
            let i = 1 + 4 * cc;
            out += &format!("\t{:.3} {:.3} {:.3}", item[i + 1], item[i + 2], item[i + 3]);
        }
        out.push('\n');
    }
    Ok(out)
}

/// A small deterministic mix: 8 hosts on two 100G switches joined by a
/// 100G link, 140 flows of 1 KB to ~400 KB (log-uniform) between random
/// pairs, starting over 700 us. Some pairs repeat (their second flow gets
/// HPCC port 10001).
fn mix(cc: &str) -> Scenario {
    let mut toml = String::from(
        "name = \"mix\"\nframing = \"ppp\"\nhosts = [\"h1..h8\"]\nswitches = [\"s1\", \"s2\"]\n\
         [link_defaults]\nrate = \"100G\"\ndelay = \"1us\"\n\
         [[links]]\na = \"s1\"\nb = \"s2\"\n",
    );
    for h in 1..=8 {
        toml += &format!("[[links]]\na = \"h{h}\"\nb = \"s{}\"\n", 1 + (h - 1) / 4);
    }
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for k in 0..140u64 {
        let src = 1 + next() % 8;
        let dst = 1 + (src + next() % 7) % 8;
        let size = (1000.0 * 400f64.powf((next() % 1000) as f64 / 1000.0)) as u64;
        toml += &format!(
            "[[flows]]\nsrc = \"h{src}\"\ndst = \"h{dst}\"\nsize = {size}\nstart = \"{}ns\"\n",
            k * 5000
        );
    }
    toml += &format!("[nic]\nmtu = 1024\ncc = \"{cc}\"\n");
    toml_scenario::from_str(&toml).unwrap()
}

/// Simulates `scn` and writes its fct.txt and pfc.txt into a fresh
/// directory; returns it.
fn run_into(scn: &Scenario, tag: &str) -> PathBuf {
    let report = simulate(scn, None).unwrap();
    assert_eq!(report.ending, Some(Ending::Completed), "{tag}");
    let dir = std::env::temp_dir().join(format!("roce-hpcc-analysis-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut fct = Vec::new();
    hpcc::write_fct(&mut fct, scn, &report, 1000).unwrap();
    std::fs::write(dir.join("fct.txt"), fct).unwrap();
    let mut pfc = Vec::new();
    hpcc::write_pfc(&mut pfc, scn, &report).unwrap();
    std::fs::write(dir.join("pfc.txt"), pfc).unwrap();
    dir
}

#[test]
fn awk_prints_numbers_as_awk_does() {
    assert_eq!(awk_number(1.0), "1");
    assert_eq!(awk_number(2.0280079), "2.02801");
    assert_eq!(awk_number(53.981098), "53.9811");
    assert_eq!(awk_number(1234567.5), "1.23457e+06");
    assert_eq!(awk_number(9.9999996), "10");
    assert_eq!(sort_n_k2("2 30\n1.5 4\n1 4\n10 4\n"), "1 4\n1.5 4\n10 4\n2 30\n");
}

/// The script finds our flows and gives our library's table; with the
/// wire's ports in the file (what we wrote before) it finds none.
#[test]
fn the_script_reads_our_fct_txt() {
    let scn = mix("dcqcn");
    let dir = run_into(&scn, "one");
    let text = std::fs::read_to_string(dir.join("fct.txt")).unwrap();
    assert!(text.lines().any(|l| l.split(' ').nth(2) == Some("10001")), "a pair's second flow");
    let out = script(&[&text]).unwrap();
    assert_eq!(out.lines().count(), 100 / STEP, "{out}");
    let lines = read_fct(&dir.join("fct.txt")).unwrap();
    let ours = fct_analysis::fct_analysis(&lines, &fct_analysis::AnalysisOptions::default()).unwrap();
    assert_eq!(out, fct_analysis::format_tables(&[&ours]));
    let wire_ports: String = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(' ').collect();
            (f[2], f[3]) = ("49152", "4791");
            f.join(" ") + "\n"
        })
        .collect();
    assert_eq!(script(&[&wire_ports]), Err(ScriptError::EmptyBin(0)));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two of our runs (DCQCN as the "baseline", no congestion control as
/// "ours"): the script's output on both files is the table `roce sim
/// compare` prints for them.
#[test]
fn the_script_gives_the_table_of_roce_sim_compare() {
    let a = run_into(&mix("dcqcn"), "dcqcn");
    let b = run_into(&mix("none"), "none");
    let texts = [a.join("fct.txt"), b.join("fct.txt")].map(|p| std::fs::read_to_string(p).unwrap());
    let expected = script(&[&texts[0], &texts[1]]).unwrap();
    let c = compare(&a, &b).unwrap();
    let printed = format!("{c}");
    let table = c.artifact_bins.as_ref().expect("enough flows for the script's table").script_output();
    assert_eq!(table, expected);
    assert!(printed.contains(&expected), "{printed}");
    // The two runs differ, so the check compares something.
    assert_ne!(c.artifact_bins.as_ref().unwrap().baseline, c.artifact_bins.as_ref().unwrap().ours);
    for d in [a, b] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// On the artifact's own fat-tree output the script and our table agree
/// too (3,201 flows; the last bin's 160 flows end at 29.6 MB).
#[test]
fn the_script_and_our_table_agree_on_the_baselines_fct_txt() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fabric-sim-baseline/runs/fat_ws30_dcqcn/fct.txt");
    if !file.is_file() {
        assert!(std::env::var_os("CI").is_none(), "no baseline at {}", file.display());
        eprintln!("skipped: no baseline at {}", file.display());
        return;
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let out = script(&[&text]).unwrap();
    let lines = read_fct(&file).unwrap();
    let ours = fct_analysis::fct_analysis(&lines, &fct_analysis::AnalysisOptions::default()).unwrap();
    assert_eq!(out, fct_analysis::format_tables(&[&ours]));
    assert_eq!(out.lines().count(), 20);
    assert!(out.starts_with("0.000 "), "{out}");
}
