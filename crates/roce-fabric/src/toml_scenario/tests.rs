use super::units::*;
use super::*;
use crate::scenario::*;

const FULL: &str = r#"
name = "full"
seed = 7
framing = "ppp"
stop = "2.5ms"
deadlock_check = "50us"
hosts = ["x"]
switches = ["s0", "s1"]

[[host_group]]
prefix = "h"
count = 3
attach = "s0"
rate = "25Gbps"
delay = "500ns"

[link_defaults]
rate = "400G"
delay = "1us"

[[links]]
a = "s0"
b = "s1"
loss = 0.001

[[links]]
a = "x"
b = "s1"
rate = "100Gb/s"

[[flows]]
src = "h1"
dst = "x"
size = "1MiB"
start = "10us"
priority = 5
op = "send"
dport = 200

[[incast]]
senders = 2
receiver = "h3"
size = 4096
start = "1us"
stagger = "250ns"

[switch]
buffer = "12MB"
reserve = "2KiB"
headroom_rtts = 2.5
lossless = [3, 4]
pfc = true
ecn = false
scheduling = "dwrr"
dwrr_weights = [0, 1, 2, 3, 4, 5, 6, 7]
ack_class = "packet"
pfc_threshold = { kind = "dynamic", base_shift = 2, base_rate = "25G", resume_offset = "1KB" }

[[switch.headroom_extra]]
rate = "25G"
bytes = "31.25KB"

[[switch.ecn_rules]]
rate = "25G"
kmin = "5KB"
kmax = "200KB"
pmax = 0.01

[nic]
mtu = 4096
cc = "dcqcn"
dcqcn_set = "paper"
dcqcn_params = ["g=1/256"]
ack_priority = "flow"
chunk = "1MiB"
max_unacked_psns = 64
rx_xoff = "128KB"

[[routes]]
switch = "s0"
dst = "x"
via = "s1"

[[events]]
at = "1ms"
kind = "link_down"
a = "s1"
b = "s0"

[[events]]
at = "1.5ms"
kind = "nic_resume"
host = "h2"

[watchdog]
timeout = "100us"
restore = "1ms"

[monitor]
ports = ["s0:4", "s1->x", "h1:1"]
interval = "2us"
flow_rates = true
"#;

#[test]
fn every_field_reaches_the_scenario() {
    let s = from_str(FULL).unwrap();
    let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["x", "h1", "h2", "h3", "s0", "s1"]);
    assert_eq!(s.nodes[4].kind, NodeKind::Switch);
    assert_eq!(s.name, "full");
    assert_eq!(s.seed, 7);
    assert_eq!(s.framing, Framing::Ppp);
    assert_eq!(s.stop_ps, Some(2_500 * PS_PER_US));
    assert_eq!(s.deadlock_check_ps, 50 * PS_PER_US);
    let l = |a, b, rate_bps, delay_ps, loss| LinkSpec {
        a,
        b,
        rate_bps,
        delay_ps,
        loss,
        faults: LinkFaults::default(),
    };
    assert_eq!(
        s.links,
        vec![
            l(1, 4, 25_000_000_000, 500_000, 0.0),
            l(2, 4, 25_000_000_000, 500_000, 0.0),
            l(3, 4, 25_000_000_000, 500_000, 0.0),
            l(4, 5, 400_000_000_000, PS_PER_US, 0.001),
            l(0, 5, 100_000_000_000, PS_PER_US, 0.0),
        ]
    );
    assert_eq!(
        s.flows,
        vec![
            FlowSpec {
                src: 1,
                dst: 0,
                priority: 5,
                size: 1 << 20,
                start_ps: 10 * PS_PER_US,
                op: FlowOp::Send,
                dport: 200,
            },
            FlowSpec {
                src: 0,
                dst: 3,
                priority: 3,
                size: 4096,
                start_ps: PS_PER_US,
                op: FlowOp::Write,
                dport: HPCC_FLOW_DPORT,
            },
            FlowSpec {
                src: 1,
                dst: 3,
                priority: 3,
                size: 4096,
                start_ps: PS_PER_US + 250_000,
                op: FlowOp::Write,
                dport: HPCC_FLOW_DPORT,
            },
        ]
    );
    assert_eq!(
        s.switch,
        SwitchConfig {
            buffer_bytes: 12_000_000,
            reserve_bytes: 2048,
            headroom_rtts: 2.5,
            pfc: PfcThreshold::Dynamic { base_shift: 2, base_rate_bps: 25_000_000_000, resume_offset: 1000 },
            lossless_mask: 0b1_1000,
            pfc_enabled: true,
            ecn_enabled: false,
            ecn: vec![EcnRule { rate_bps: 25_000_000_000, kmin: 5000, kmax: 200_000, pmax: 0.01 }],
            scheduling: Scheduling::Dwrr { weights: [0, 1, 2, 3, 4, 5, 6, 7] },
            pause_quanta: None,
            headroom_extra: vec![HeadroomRule { rate_bps: 25_000_000_000, extra_bytes: 31_250 }],
            ack_class: AckClass::Packet,
        }
    );
    assert_eq!(
        s.nic,
        NicConfig {
            mtu: 4096,
            cc: "dcqcn".into(),
            dcqcn_set: "paper".into(),
            dcqcn_params: vec!["g=1/256".into()],
            ack_priority: None,
            chunk_bytes: 1 << 20,
            max_unacked_psns: 64,
            ack_req_every: 64,
            rx_xoff_bytes: 128_000,
        }
    );
    assert_eq!(s.routes, vec![RouteSpec { switch: 4, dst: 0, via: 5 }]);
    assert_eq!(
        s.events,
        vec![
            TimedEvent { at_ps: PS_PER_MS, kind: EventKind::LinkDown { link: 3 } },
            TimedEvent { at_ps: 1_500 * PS_PER_US, kind: EventKind::NicResume { host: 2 } },
        ]
    );
    assert_eq!(s.watchdog, Some(WatchdogConfig { timeout_ps: 100 * PS_PER_US, restore_ps: PS_PER_MS }));
    // s1's ports: 1 = s0, 2 = x.
    assert_eq!(
        s.monitor,
        MonitorConfig { ports: vec![(4, 4), (5, 2), (1, 1)], interval_ps: 2 * PS_PER_US, flow_rates: true }
    );
    assert_eq!(port_towards(&s, 5, 0), Some(2));
    assert_eq!(peer_of(&s, 5, 2), Some(0));
    assert_eq!(peer_of(&s, 5, 3), None);
    assert_eq!(peer_of(&s, 5, 0), None);
}

#[test]
fn the_documented_example_parses() {
    let src = include_str!("../toml_scenario.rs");
    let start = src.find("//! ```toml\n").unwrap() + "//! ```toml\n".len();
    let end = start + src[start..].find("//! ```\n").unwrap();
    let text: String = src[start..end]
        .lines()
        .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start_matches(' ')))
        .collect();
    let s = from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(s.name, "example");
    assert_eq!(s.nodes.len(), 13);
    assert_eq!(s.flows.len(), 8);
    assert!(matches!(s.switch.pfc, PfcThreshold::Static { xoff: 40_000, xon: 20_000 }));
    let sw = s.nodes.iter().position(|n| n.name == "sw").unwrap();
    assert_eq!(s.monitor.ports, vec![(sw, 9), (sw, 8)]);
}

#[test]
fn defaults_when_sections_are_absent() {
    let s = from_str("hosts = [\"a\", \"b\"]\nswitches = [\"s\"]\n[link_defaults]\nrate = \"100G\"\ndelay = \"1us\"\n[[links]]\na = \"a\"\nb = \"s\"\n[[links]]\na = \"b\"\nb = \"s\"\n").unwrap();
    assert_eq!(s.name, "scenario");
    assert_eq!(s.seed, 1);
    assert_eq!(s.switch, SwitchConfig::hpcc());
    assert_eq!(s.nic, NicConfig::hpcc());
    assert_eq!(s.framing, Framing::Ethernet);
    assert_eq!(s.deadlock_check_ps, 100 * PS_PER_US);
    assert_eq!(s.stop_ps, None);
    assert_eq!(s.watchdog, None);
    assert_eq!(s.monitor, MonitorConfig::default());
    assert!(s.flows.is_empty() && s.routes.is_empty() && s.events.is_empty());
}

#[test]
fn from_path_names_after_the_file() {
    let dir = std::env::temp_dir().join(format!("roce-fabric-toml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("my-run.toml");
    std::fs::write(&p, "hosts = [\"a\"]\nswitches = [\"s\"]\n[[links]]\na = \"a\"\nb = \"s\"\nrate = \"1G\"\ndelay = \"1ns\"\n").unwrap();
    assert_eq!(from_path(&p).unwrap().name, "my-run");
    let missing = dir.join("absent.toml");
    assert!(matches!(from_path(&missing), Err(ScenarioError::Io { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn units() {
    let r = |t: &str| parse_with_units(t, RATE_UNITS, "b/s");
    assert_eq!(r("100Gbps"), Ok(100_000_000_000));
    assert_eq!(r("400G"), Ok(400_000_000_000));
    assert_eq!(r("2.5 Gb/s"), Ok(2_500_000_000));
    assert_eq!(r("10mbps"), Ok(10_000_000));
    assert_eq!(r("1_000bps"), Ok(1000));
    assert!(r("100").is_err());
    assert!(r("100Xbps").is_err());
    assert!(r("Gbps").is_err());
    assert!(r("1.5bps").is_err());
    let t = |t: &str| parse_with_units(t, TIME_UNITS, "ps");
    assert_eq!(t("1us"), Ok(PS_PER_US));
    assert_eq!(t("1µs"), Ok(PS_PER_US));
    assert_eq!(t("500ns"), Ok(500_000));
    assert_eq!(t("0.5ps").map_err(|e| e.contains("whole")), Err(true));
    assert_eq!(t("1.25ms"), Ok(1_250 * PS_PER_US));
    assert_eq!(t("2s"), Ok(2 * PS_PER_S));
    assert_eq!(t("0"), Ok(0));
    assert!(t("1.2.3us").is_err());
    assert!(t("99999999999s").is_err());
    let b = |t: &str| parse_with_units(t, SIZE_UNITS, "B");
    assert_eq!(b("500KB"), Ok(500_000));
    assert_eq!(b("1MiB"), Ok(1 << 20));
    assert_eq!(b("1.5KiB"), Ok(1536));
    assert_eq!(b("64B"), Ok(64));
    assert_eq!(b("2GB"), Ok(2_000_000_000));
    assert_eq!(duration("k", &Qty::Int(0)).unwrap(), 0);
    assert!(matches!(duration("k", &Qty::Int(5)), Err(ScenarioError::BadValue { .. })));
    assert!(matches!(rate("k", &Qty::Int(0)), Err(ScenarioError::BadValue { .. })));
}

#[test]
fn name_ranges() {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(expand_names("k", &v(&["h1..h3", "x"])).unwrap(), v(&["h1", "h2", "h3", "x"]));
    assert_eq!(expand_names("k", &v(&["h8..10"])).unwrap(), v(&["h8", "h9", "h10"]));
    assert_eq!(expand_names("k", &v(&["h01..h03"])).unwrap(), v(&["h01", "h02", "h03"]));
    assert_eq!(expand_names("k", &v(&["7..8"])).unwrap(), v(&["7", "8"]));
    for bad in ["h3..h1", "h1..g3", "h..h3", "h1.."] {
        let e = expand_names("k", &v(&[bad])).unwrap_err();
        assert!(e.to_string().contains(bad), "{e}");
    }
}

/// A small valid scenario with `extra` appended, parsed.
fn with(extra: &str) -> Result<Scenario, ScenarioError> {
    from_str(&format!(
        "hosts = [\"h1..h3\"]\nswitches = [\"s\", \"t\"]\n[link_defaults]\nrate = \"100G\"\ndelay = \"1us\"\n\
         [[links]]\na = \"h1\"\nb = \"s\"\n[[links]]\na = \"h2\"\nb = \"s\"\n[[links]]\na = \"h3\"\nb = \"t\"\n\
         [[links]]\na = \"s\"\nb = \"t\"\n{extra}"
    ))
}

fn err(extra: &str) -> String {
    match with(extra) {
        Ok(_) => panic!("accepted: {extra}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_base_is_valid() {
    with("").unwrap();
}

#[test]
fn errors_name_the_key_and_value() {
    let cases: &[(&str, &[&str])] = &[
        ("bogus = 1\n", &["bogus"]),
        ("[switch]\nbufer = \"1MB\"\n", &["bufer"]),
        ("[[links]]\na = \"s\"\nb = \"nowhere\"\n", &["links[4].b", "nowhere"]),
        ("[[links]]\na = \"t\"\nb = \"t\"\n", &["links[4]", "itself"]),
        ("[[links]]\na = \"h1\"\nb = \"t\"\n", &["h1", "2 links"]),
        ("[[links]]\na = \"s\"\nb = \"t\"\nrate = \"0G\"\n", &["links[4].rate", "above zero"]),
        ("[[links]]\na = \"s\"\nb = \"t\"\ndelay = \"1 fortnight\"\n", &["links[4].delay", "fortnight"]),
        ("[[flows]]\nsrc = \"h1\"\ndst = \"h1\"\nsize = 1\n", &["flows[0]", "itself"]),
        ("[[flows]]\nsrc = \"h1\"\ndst = \"s\"\nsize = 1\n", &["flows[0].dst", "switch"]),
        ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = 0\n", &["flows[0].size"]),
        ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = \"1XB\"\n", &["flows[0].size", "1XB"]),
        ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = 1\npriority = 8\n", &["flows[0].priority", "8"]),
        ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = 1\nop = \"read\"\n", &["read"]),
        ("[[flows]]\nsrc = \"h1\"\ndst = \"h2\"\nsize = 1\nstart = 10\n", &["flows[0].start", "unit"]),
        ("[switch]\nlossless = [9]\n", &["switch.lossless[0]", "9"]),
        (
            "[[switch.ecn_rules]]\nrate = \"100G\"\nkmin = \"2MB\"\nkmax = \"1MB\"\npmax = 0.1\n",
            &["switch.ecn_rules[0]", "kmin"],
        ),
        (
            "[[switch.ecn_rules]]\nrate = \"100G\"\nkmin = \"1MB\"\nkmax = \"2MB\"\npmax = 1.5\n",
            &["switch.ecn_rules[0].pmax", "1.5"],
        ),
        ("[switch]\npfc_threshold = { kind = \"static\", xoff = \"10KB\", xon = \"20KB\" }\n", &["xon"]),
        ("[switch]\npfc_threshold = { kind = \"static\", xoff = \"10KB\" }\n", &["xon"]),
        ("[switch]\npfc_threshold = { kind = \"fixed\" }\n", &["fixed"]),
        ("[switch]\nscheduling = \"dwrr\"\ndwrr_weights = [1, 2]\n", &["dwrr_weights"]),
        ("[switch]\nscheduling = \"dwrr\"\n", &["dwrr_weights"]),
        ("[switch]\nscheduling = \"wfq\"\n", &["switch.scheduling", "wfq"]),
        ("[nic]\nmtu = 1500\n", &["nic.mtu", "1500"]),
        ("[nic]\nmax_unacked_psns = 0\n", &["nic.max_unacked_psns", "0"]),
        ("[nic]\ncc = \"hpcc\"\n", &["nic.cc", "hpcc"]),
        ("[nic]\ndcqcn_set = \"cisco\"\n", &["nic.dcqcn_set", "cisco"]),
        ("[nic]\ndcqcn_params = [\"nonsense=1\"]\n", &["nic.dcqcn_params[0]", "nonsense"]),
        ("[nic]\nack_priority = \"never\"\n", &["nic.ack_priority", "never"]),
        ("[nic]\nack_priority = 9\n", &["nic.ack_priority", "9"]),
        ("[[routes]]\nswitch = \"h1\"\ndst = \"h3\"\nvia = \"t\"\n", &["routes[0].switch", "host"]),
        ("[[routes]]\nswitch = \"s\"\ndst = \"h3\"\nvia = \"h3\"\n", &["routes[0].via", "no link"]),
        (
            "[[events]]\nat = \"1us\"\nkind = \"link_down\"\na = \"h1\"\nb = \"h2\"\n",
            &["events[0]", "no link"],
        ),
        ("[[events]]\nat = \"1us\"\nkind = \"nic_stall\"\nhost = \"s\"\n", &["events[0].host", "switch"]),
        ("[[events]]\nat = \"1us\"\nkind = \"nic_stall\"\na = \"s\"\n", &["events[0]", "host"]),
        ("[[events]]\nat = \"1us\"\nkind = \"explode\"\nhost = \"h1\"\n", &["events[0].kind", "explode"]),
        ("[watchdog]\ntimeout = \"0\"\nrestore = \"1us\"\n", &["watchdog.timeout"]),
        ("[monitor]\nports = [\"s:9\"]\n", &["monitor.ports[0]", "s:9", "1..=3"]),
        ("[monitor]\nports = [\"s->h3\"]\n", &["monitor.ports[0]", "no link"]),
        ("[monitor]\nports = [\"s\"]\n", &["monitor.ports[0]"]),
        ("[[incast]]\nsenders = 5\nreceiver = \"h1\"\nsize = 1\n", &["incast[0].senders", "5"]),
        (
            "[[incast]]\nsenders = [\"h1..h2\"]\nreceiver = \"h1\"\nsize = 1\n",
            &["incast[0].senders", "receiver"],
        ),
        ("[[incast]]\nsenders = [\"zz\"]\nreceiver = \"h1\"\nsize = 1\n", &["incast[0].senders", "zz"]),
        ("[[host_group]]\nprefix = \"h\"\ncount = 1\n", &["h1", "twice"]),
        ("[[host_group]]\nprefix = \"g\"\ncount = 0\n", &["host_group[0].count"]),
        ("[[host_group]]\nprefix = \"g\"\ncount = 1\n", &["g1", "0 links"]),
        ("[[host_group]]\nprefix = \"g:\"\ncount = 1\n", &["host_group[0].prefix"]),
        ("[[host_group]]\nprefix = \"g\"\ncount = 1\nrate = \"1G\"\n", &["host_group[0]", "attach"]),
    ];
    for (extra, needles) in cases {
        let e = err(extra);
        for n in *needles {
            assert!(e.contains(n), "error for {extra:?} is {e:?}, lacks {n:?}");
        }
    }
    // Without link defaults, a link needs its rate and delay.
    let e = from_str("hosts = [\"a\"]\nswitches = [\"s\"]\n[[links]]\na = \"a\"\nb = \"s\"\n").unwrap_err();
    assert!(e.to_string().contains("links[0].rate"), "{e}");
    let e = from_str("hosts = [\"a\"]\nswitches = [\"a\"]\n").unwrap_err();
    assert!(matches!(e, ScenarioError::DuplicateName(ref n) if n == "a"), "{e}");
}

#[test]
fn writes_what_it_reads() {
    let mut all: Vec<Scenario> =
        crate::builtin::NAMES.iter().map(|n| crate::builtin::scenario(n).unwrap()).collect();
    all.push(from_str(FULL).unwrap());
    all.push(with("").unwrap());
    let mut faulty = with("").unwrap();
    faulty.links[0].loss = 0.01;
    faulty.links[0].faults = LinkFaults {
        jitter_ps: 100 * PS_PER_NS,
        reorder: 0.02,
        reorder_delay_ps: 2 * PS_PER_US,
        duplicate: 0.003,
        corrupt: 0.001,
    };
    all.push(faulty);
    for s in &all {
        let text = to_toml(s);
        let back = from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(&back, s, "{text}");
    }
}

#[test]
fn link_faults_are_read_and_checked() {
    let s = with(
        "[[links]]\na = \"s\"\nb = \"t\"\nfaults = { jitter = \"50ns\", reorder = 0.1, reorder_delay = \"1us\", duplicate = 0.2, corrupt = 0.3 }\n",
    )
    .unwrap();
    let f = s.links.last().unwrap().faults;
    assert_eq!(
        f,
        LinkFaults {
            jitter_ps: 50 * PS_PER_NS,
            reorder: 0.1,
            reorder_delay_ps: PS_PER_US,
            duplicate: 0.2,
            corrupt: 0.3
        }
    );
    for (bad, key) in [
        ("faults = { corrupt = 1.5 }", "links[4].faults.corrupt"),
        ("faults = { jitter = \"soon\" }", "links[4].faults.jitter"),
        ("faults = { drop = 0.1 }", "drop"),
    ] {
        let e = with(&format!("[[links]]\na = \"s\"\nb = \"t\"\n{bad}\n")).unwrap_err().to_string();
        assert!(e.contains(key), "{bad}: {e}");
    }
}

#[test]
fn writing_renumbers_interleaved_nodes_hosts_first() {
    let mut s = with("[[flows]]\nsrc = \"h1\"\ndst = \"h3\"\nsize = \"1MB\"\n").unwrap();
    // Move the switch "s" (id 3) to the front.
    let order = [3usize, 0, 1, 2, 4];
    let new_id = |old: usize| order.iter().position(|&o| o == old).unwrap();
    s.nodes = order.iter().map(|&o| s.nodes[o].clone()).collect();
    for l in &mut s.links {
        (l.a, l.b) = (new_id(l.a), new_id(l.b));
    }
    for f in &mut s.flows {
        (f.src, f.dst) = (new_id(f.src), new_id(f.dst));
    }
    validate(&s).unwrap();
    let back = from_str(&to_toml(&s)).unwrap();
    let names = |x: &Scenario| x.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&back), ["h1", "h2", "h3", "s", "t"]);
    let ends = |x: &Scenario| {
        x.links.iter().map(|l| (x.nodes[l.a].name.clone(), x.nodes[l.b].name.clone())).collect::<Vec<_>>()
    };
    assert_eq!(ends(&back), ends(&s));
    assert_eq!(back.nodes[back.flows[0].src].name, "h1");
    assert_eq!(back.nodes[back.flows[0].dst].name, "h3");
}

#[test]
fn units_are_written_exactly() {
    assert_eq!(fmt_rate(100_000_000_000), Qty::Text("100Gbps".into()));
    assert_eq!(fmt_rate(2_500_000_000), Qty::Text("2500Mbps".into()));
    assert_eq!(fmt_rate(7), Qty::Text("7bps".into()));
    assert_eq!(fmt_time(0), Qty::Text("0".into()));
    assert_eq!(fmt_time(1_500_000), Qty::Text("1500ns".into()));
    assert_eq!(fmt_time(3), Qty::Text("3ps".into()));
    assert_eq!(fmt_size(4096), Qty::Text("4KiB".into()));
    assert_eq!(fmt_size(1_000_000), Qty::Text("1MB".into()));
    assert_eq!(fmt_size(1001), Qty::Int(1001));
    assert_eq!(fmt_size(0), Qty::Int(0));
}

#[test]
fn validate_catches_what_a_built_scenario_gets_wrong() {
    let good = with("[[flows]]\nsrc = \"h1\"\ndst = \"h3\"\nsize = 1\n").unwrap();
    validate(&good).unwrap();
    let mut s = good.clone();
    s.flows[0].dst = 99;
    assert!(validate(&s).unwrap_err().to_string().contains("flows[0].dst"));
    let mut s = good.clone();
    s.links[0].b = s.links[0].a;
    assert!(matches!(validate(&s), Err(ScenarioError::SelfLink { .. })));
    let mut s = good.clone();
    s.links[1].rate_bps = 0;
    assert!(validate(&s).unwrap_err().to_string().contains("links[1].rate"));
    let mut s = good.clone();
    s.events.push(TimedEvent { at_ps: 0, kind: EventKind::LinkUp { link: 4 } });
    assert!(validate(&s).unwrap_err().to_string().contains("events[0]"));
    let mut s = good.clone();
    s.switch.ecn.reverse();
    assert!(validate(&s).unwrap_err().to_string().contains("ascending"));
    let mut s = good;
    s.nodes[1].name = "h1".into();
    assert!(matches!(validate(&s), Err(ScenarioError::DuplicateName(_))));
}
