//! No heap allocation per packet in the steady state.
//!
//! A counting global allocator wraps the system one. Counting is switched on
//! per thread (a const-initialised thread-local flag), so only the test's own
//! work is counted, never the test harness's other threads. Everything is
//! measured inside one `#[test]`, so no two measurements overlap.
//!
//! For each stream (see `support/stream.rs`): 64 KiB RDMA WRITEs at path MTU
//! 4096 (16 packets each, 32 WRs outstanding), 8-byte SENDs (1 packet each, 64
//! outstanding, 64 receives kept posted), both again with a single WR
//! outstanding (so the ACK timer is disarmed and re-armed every message), and
//! 8-byte inline SENDs, the stream
//! first runs long enough for every queue to reach its working size; then
//!
//! 1. *engine only*: the WRs to post are built before counting starts (a
//!    pool), so the count holds what the engine allocates while it posts,
//!    transmits, receives, acknowledges, completes and is polled;
//! 2. *with the caller*: the WRs are built inside the counted window, as an
//!    application does (`SendWr::new(.., vec![sge])`), so the count adds the
//!    caller's one `Vec<Sge>` per WR.
//!
//! The assertions: zero engine allocations per packet for the WRITE and SEND
//! streams; at most one allocation per WR (and none per packet beyond that)
//! for inline SENDs, whose data the engine copies into a `Vec` at post time;
//! with the caller, exactly the caller's allocations per WR. Run with
//! `cargo test -p roce-proto --test no_alloc -- --nocapture` to see the counts.

#[path = "support/stream.rs"]
mod stream;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use roce_proto::PathMtu;
use stream::{Kind, Stream};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static DEALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
}

fn counting() -> bool {
    // A const-initialised Cell without a destructor: no allocation, no
    // registration, usable from inside the allocator.
    ON.try_with(|c| c.get()).unwrap_or(false)
}

// SAFETY: every method forwards to `System` with the same arguments, so the
// `GlobalAlloc` contract (layouts, returned pointers) is System's; the only
// addition is relaxed atomic counting, which neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(l.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged (see the impl's comment).
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(l.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if counting() {
            DEALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(new as u64, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Debug, Clone, Copy)]
struct Count {
    allocs: u64,
    deallocs: u64,
    bytes: u64,
    packets: u64,
    data_packets: u64,
    /// Send WRs completed.
    wrs: u64,
    /// Send and receive WRs posted.
    sends: u64,
    recvs: u64,
}

/// Runs `n` messages with counting on; returns what happened.
fn measure(s: &mut Stream, n: u64) -> Count {
    let (p0, d0, c0) = (s.packets(), s.data_packets(), s.completed);
    let (s0, r0) = (s.posted_sends, s.posted_recvs);
    let (a0, f0, b0) =
        (ALLOCS.load(Ordering::Relaxed), DEALLOCS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
    ON.with(|c| c.set(true));
    s.run_messages(n);
    ON.with(|c| c.set(false));
    Count {
        allocs: ALLOCS.load(Ordering::Relaxed) - a0,
        deallocs: DEALLOCS.load(Ordering::Relaxed) - f0,
        bytes: BYTES.load(Ordering::Relaxed) - b0,
        packets: s.packets() - p0,
        data_packets: s.data_packets() - d0,
        wrs: s.completed - c0,
        sends: s.posted_sends - s0,
        recvs: s.posted_recvs - r0,
    }
}

fn report(name: &str, c: &Count) {
    println!(
        "{name}: {} send WRs completed ({} send + {} receive WRs posted), {} packets ({} data): \
         {} allocations ({} bytes), {} frees; {:.4} allocations/packet, {:.4} allocations/posted WR",
        c.wrs,
        c.sends,
        c.recvs,
        c.packets,
        c.data_packets,
        c.allocs,
        c.bytes,
        c.deallocs,
        c.allocs as f64 / c.packets as f64,
        c.allocs as f64 / (c.sends + c.recvs) as f64,
    );
}

struct Case {
    name: &'static str,
    kind: Kind,
    len: u32,
    depth: usize,
    /// WRs measured.
    n: u64,
}

/// Warms a stream up and measures it twice (engine only, then with the caller).
fn run_case(c: &Case) -> (Count, Count) {
    let mut s = Stream::new(c.kind, c.len, PathMtu::Mtu4096, c.depth, 32);
    // Warm-up: several times the pipeline depth, so every VecDeque (SQ, RQ,
    // CQ, responder queue), the timer set and the ready list have reached
    // their steady-state capacity.
    s.run_messages(20 * c.depth as u64);
    s.check_data();
    // Enough pooled WRs for the measured window plus the in-flight refills.
    let extra = c.n as usize + 2 * c.depth;
    s.fill_pools(extra, if c.kind == Kind::Write { 0 } else { extra });
    let engine = measure(&mut s, c.n);
    report(&format!("{} (engine only)", c.name), &engine);
    s.use_pools = false;
    let caller = measure(&mut s, c.n);
    report(&format!("{} (with the caller's WR construction)", c.name), &caller);
    s.check_data();
    (engine, caller)
}

#[test]
fn steady_state_allocations() {
    let write =
        Case { name: "64 KiB RDMA WRITE, MTU 4096", kind: Kind::Write, len: 64 << 10, depth: 32, n: 2000 };
    let (e, c) = run_case(&write);
    assert_eq!(e.data_packets, 16 * e.wrs, "a 64 KiB WRITE at MTU 4096 is 16 packets");
    assert!(e.packets >= 16_000);
    assert_eq!(e.allocs, 0, "engine allocated in the WRITE stream: {e:?}");
    // The caller's `vec![sge]`, one per WR, and nothing per packet.
    assert_eq!(c.allocs, c.sends, "{c:?}");

    let send = Case { name: "8 B SEND", kind: Kind::Send, len: 8, depth: 64, n: 20_000 };
    let (e, c) = run_case(&send);
    assert_eq!(e.data_packets, e.wrs);
    assert_eq!(e.allocs, 0, "engine allocated in the SEND stream: {e:?}");
    // One `vec![sge]` per send WR and one per receive WR.
    assert_eq!(c.allocs, c.sends + c.recvs, "{c:?}");

    // One WR outstanding: every ACK empties the SQ, disarms the ACK timer
    // (the timer set becomes empty) and the next post re-arms it.
    for (name, kind, len) in [
        ("64 KiB RDMA WRITE, 1 outstanding", Kind::Write, 64 << 10),
        ("8 B SEND, 1 outstanding", Kind::Send, 8),
    ] {
        let (e, c) = run_case(&Case { name, kind, len, depth: 1, n: 2000 });
        assert_eq!(e.allocs, 0, "engine allocated in {name}: {e:?}");
        assert_eq!(c.allocs, c.sends + c.recvs, "{c:?}");
    }

    let inline = Case { name: "8 B inline SEND", kind: Kind::SendInline, len: 8, depth: 64, n: 20_000 };
    let (e, _) = run_case(&inline);
    // post_send copies inline data into a fresh Vec: bounded by WRs posted.
    assert!(e.allocs <= e.sends, "inline SEND: more than one engine allocation per WR: {e:?}");
}
