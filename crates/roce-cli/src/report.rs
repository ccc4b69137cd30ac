//! What `roce perf` and `roce ping` say about the device itself: the
//! counters at the end (`--counters`, like perftest's extra counters), how
//! the ICRC of received packets is checked, datagrams the kernel refused
//! to send or dropped on receipt, the socket buffers it granted, the timer
//! the driver sleeps on, and a device that died.

use roce::Device;
use serde_json::{json, Value};

use crate::oob::Error;

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
    let b = &d.socket_buffers;
    out += &format!(
        " {:<30}: {}\n",
        "socket receive buffer",
        buffer(b.recv_granted, b.recv_requested, b.recv_forced)
    );
    out += &format!(
        " {:<30}: {}\n",
        "socket send buffer",
        buffer(b.send_granted, b.send_requested, b.send_forced)
    );
    out += &format!(" {:<30}: {}\n", "driver timer", timer(&d));
    if let Some(why) = dev.dead() {
        out += &format!(" {:<30}: DEAD: {why}\n", "device");
    }
    for (name, v) in c.iter() {
        out += &format!(" {name:<30}: {v}\n");
    }
    out += &format!(" {:<30}: {}\n", "tx_dropped_socket_full", d.tx_dropped);
    out += &format!(" {:<30}: {}\n", "tx_errors", d.tx_errors);
    out += &format!(" {:<30}: {}\n", "rx_dropped_socket_full", d.rx_dropped);
    out += &format!(" {:<30}: {}\n", "rx_errors", d.rx_errors);
    out += &format!(" {:<30}: {}\n", "timerfd_failures", d.timerfd_failures);
    out += &format!(" {:<30}: {}\n", "drive_takeovers", d.drive_takeovers);
    if let Some(e) = &d.first_tx_error {
        out += &format!(" {:<30}: {e}\n", "first tx error");
    }
    if let Some(e) = &d.first_rx_error {
        out += &format!(" {:<30}: {e}\n", "first rx error");
    }
    if let Some(w) = &d.socket_buffer_warning {
        out += &format!(" {:<30}: {w}\n", "warning");
    }
    out + &rule
}

/// A socket buffer: what the kernel granted (its bookkeeping included:
/// Linux doubles the size asked) of what was asked, and how.
fn buffer(granted: usize, requested: usize, forced: bool) -> String {
    let how = if forced {
        "forced"
    } else if granted < 2 * requested {
        "capped by net.core.rmem_max/wmem_max"
    } else {
        "not forced"
    };
    format!("{granted} bytes granted for {requested} asked ({how})")
}

/// The timer the driver thread sleeps on.
fn timer(d: &roce::DriverStats) -> String {
    match &d.timer_fallback {
        Some(why) => format!("epoll, millisecond resolution (timerfd failed: {why})"),
        None => "timerfd".to_string(),
    }
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
        "rx_dropped_socket_full": d.rx_dropped,
        "rx_errors": d.rx_errors,
        "timerfd_failures": d.timerfd_failures,
        "timer_fallback": d.timer_fallback,
        "drive_takeovers": d.drive_takeovers,
        "first_tx_error": d.first_tx_error.as_ref().map(|e| e.to_string()),
        "first_rx_error": d.first_rx_error,
        "socket_buffers": {
            "recv_requested": d.socket_buffers.recv_requested,
            "recv_granted": d.socket_buffers.recv_granted,
            "recv_forced": d.socket_buffers.recv_forced,
            "send_requested": d.socket_buffers.send_requested,
            "send_granted": d.socket_buffers.send_granted,
            "send_forced": d.socket_buffers.send_forced,
        },
        "rx_in_flight_max": d.rx_in_flight_max,
        "socket_buffer_warning": d.socket_buffer_warning,
        "dead": dev.dead(),
    })
}

/// `err`, with the first datagram the kernel refused to send appended (the
/// usual cause of a transport that gave up), and why the device died if
/// it did and `err` does not say so already (a failure seen first
/// elsewhere, such as the peer giving up on this end).
pub fn with_send_error(dev: &Device, err: Error) -> Error {
    let mut notes = match dev.send_error() {
        Some(e) => format!("\n       the kernel refused to send: {e}"),
        None => String::new(),
    };
    if let Some(why) = dev.dead() {
        if !err.to_string().contains(&why) && !notes.contains(&why) {
            notes += &format!("\n       the RDMA device is dead: {why}");
        }
    }
    if notes.is_empty() {
        err
    } else {
        Error::WithDevice { source: Box::new(err), notes }
    }
}

/// Devices opened on these UDP ports have their driver thread killed as
/// soon as the tool has opened them, for tests of how the tools report a
/// dead device (see `roce::Device::inject_driver_panic`).
#[cfg(test)]
pub static KILL_ON_OPEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// What a tool calls once it has opened its device. Outside this crate's
/// tests it does nothing; in them it kills the devices `KILL_ON_OPEN`
/// names, and returns once they are dead.
pub fn opened(dev: &Device) {
    #[cfg(test)]
    if KILL_ON_OPEN.lock().unwrap().contains(&dev.local_addr().port()) {
        dev.inject_driver_panic("injected by a test of the tools");
        while dev.dead().is_none() {
            std::thread::yield_now();
        }
    }
    let _ = dev;
}

/// A warning for a run that succeeded although some datagram was refused.
pub fn send_error_warning(dev: &Device) -> Option<String> {
    let d = dev.driver_stats();
    d.first_tx_error
        .map(|e| format!("warning: {} datagram(s) refused by the kernel; the first: {e}", d.tx_errors))
}
