//! One seed, one packet trace: two runs of a seed give byte-identical traces
//! (equal fingerprints, equal records, equal pcap files) and equal reports;
//! another seed gives another trace.

use roce_harness::net::pcap::write_pcap;
use roce_harness::net::TraceMode;
use roce_harness::{simulate, Config};

fn config(trace: TraceMode) -> Config {
    Config { trace, ..Config::default() }
}

fn pcap_bytes(run: &roce_harness::Run) -> Vec<u8> {
    write_pcap(run.net.trace().records(), Vec::new()).expect("pcap into memory")
}

#[test]
fn same_seed_same_trace_other_seed_other_trace() {
    for seed in [3, 11, 12345] {
        let a = simulate(seed, &config(TraceMode::Full));
        let b = simulate(seed, &config(TraceMode::Full));
        let hashed = simulate(seed, &config(TraceMode::Hash));
        let fp = a.net.trace().fingerprint().expect("full mode hashes");
        assert!(a.net.trace().len() > 10, "seed {seed}: too little traffic to compare");
        assert_eq!(Some(fp), b.net.trace().fingerprint(), "seed {seed}: fingerprints differ");
        assert_eq!(Some(fp), hashed.net.trace().fingerprint(), "seed {seed}: Hash and Full modes disagree");
        assert!(a.net.trace().records() == b.net.trace().records(), "seed {seed}: records differ");
        assert!(pcap_bytes(&a) == pcap_bytes(&b), "seed {seed}: pcap files differ");
        let report =
            |r: &roce_harness::Run| r.result.as_ref().map_or_else(|f| (*f.report).clone(), |r| r.clone());
        assert_eq!(report(&a), report(&b), "seed {seed}: reports differ");

        let other = simulate(seed + 1, &config(TraceMode::Hash));
        assert_ne!(Some(fp), other.net.trace().fingerprint(), "seeds {seed} and {} collide", seed + 1);
    }
}

#[test]
fn fingerprint_changes_with_a_single_fault_decision() {
    // Same plan, different network stream: only the link dice differ
    // (faults last until the workload has posted everything).
    let mut cfg = config(TraceMode::Hash);
    cfg.workload.faults.clean_runs = 0.0;
    cfg.workload.mix.early_heal = 0.0;
    let a = simulate(21, &cfg).net.trace().fingerprint();
    cfg.workload.faults.max_loss = 0.0;
    let b = simulate(21, &cfg).net.trace().fingerprint();
    assert_ne!(a, b);
}
