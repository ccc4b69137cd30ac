//! What `roce perf` and `roce ping` say about the device itself: the
//! counters at the end (`--counters`, like perftest's extra counters), how
//! the ICRC of received packets is checked, and datagrams the kernel
//! refused to send.

use roce::Device;
use serde_json::{json, Value};

/// The device's counters as a block of text: the engine's (named as
/// rdma_rxe's hardware counters, plus drops by reason), then the driver's.
pub fn counters_table(dev: &Device) -> String {
    let c = dev.counters();
    let d = dev.driver_stats();
    let rule = "-".repeat(87);
    let mut out = format!("{rule}\n Device counters ({})\n", dev.local_addr());
    out += &format!(" {:<30}: {}\n", "ICRC check (receive)", dev.rx_icrc_check());
    let gso = match &d.gso_refused {
        Some(why) => format!("off (the kernel refused it: {why})"),
        None => (if d.gso { "on" } else { "off" }).to_string(),
    };
    out += &format!(" {:<30}: GSO {gso}, GRO {}\n", "UDP offloads", if d.gro { "on" } else { "off" });
    for (name, v) in c.iter() {
        out += &format!(" {name:<30}: {v}\n");
    }
    out += &format!(" {:<30}: {}\n", "tx_dropped_socket_full", d.tx_dropped);
    out += &format!(" {:<30}: {}\n", "tx_errors", d.tx_errors);
    out += &format!(" {:<30}: {}\n", "drive_takeovers", d.drive_takeovers);
    if let Some(e) = &d.first_tx_error {
        out += &format!(" {:<30}: {e}\n", "first tx error");
    }
    out + &rule
}

/// The same as JSON.
pub fn counters_json(dev: &Device) -> Value {
    let d = dev.driver_stats();
    let engine: serde_json::Map<String, Value> =
        dev.counters().iter().map(|(k, v)| (k.into(), v.into())).collect();
    json!({
        "device": dev.local_addr().to_string(),
        "icrc_check": dev.rx_icrc_check().to_string(),
        "gso": d.gso,
        "gro": d.gro,
        "gso_refused": d.gso_refused,
        "engine": engine,
        "tx_dropped_socket_full": d.tx_dropped,
        "tx_errors": d.tx_errors,
        "drive_takeovers": d.drive_takeovers,
        "first_tx_error": d.first_tx_error.as_ref().map(|e| e.to_string()),
    })
}

/// `err`, with the first datagram the kernel refused to send appended (the
/// usual cause of a transport that gave up).
pub fn with_send_error(dev: &Device, err: String) -> String {
    match dev.send_error() {
        Some(e) => format!("{err}\n       the kernel refused to send: {e}"),
        None => err,
    }
}

/// A warning for a run that succeeded although some datagram was refused.
pub fn send_error_warning(dev: &Device) -> Option<String> {
    let d = dev.driver_stats();
    d.first_tx_error
        .map(|e| format!("warning: {} datagram(s) refused by the kernel; the first: {e}", d.tx_errors))
}
