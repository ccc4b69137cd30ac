//! A fio external I/O engine on roce's NVMe/RDMA initiator, so that
//! storage people benchmark and verify roce with the tool they already
//! use, as SPDK ships one for its initiator:
//!
//! ```text
//! cargo build --release -p roce-fio
//! fio --name=t --ioengine=external:target/release/libroce_fio.so --thread=1 \
//!     '--filename=traddr=127.0.0.2 trsvcid=4420 subnqn=nqn.2026-11.io.roce\:disk ns=1' \
//!     --rw=randwrite --bs=4k --iodepth=32 --size=64M --verify=crc32c
//! ```
//!
//! Each file (see [`spec`] for the name's keys) is a namespace of a
//! subsystem; each job connects its own controller with one I/O queue of
//! twice its `iodepth` entries, at least 32 (fio's reads, writes, trims
//! as Dataset Management deallocate, and syncs as Flush), and the jobs of
//! one process share the device on their address. A device owns UDP 4791 of its address, so
//! jobs that fio forks into processes each need a `hostaddr=` of their
//! own; `thread=1` runs them in one process on one device.
//!
//! The C interface fio calls is [`get_ioengine`]; fio's structures are
//! declared in `abi` (fio 3.33's layouts, checked at start-up).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

mod abi;
mod engine;
pub mod spec;

use abi::{ddir, File, FioFile, IoU, IoUnit, IoengineOps, ThreadData};
use engine::{Conn, Job, Outcome, Refused, Request};
use spec::Spec;

/// Jobs by `thread_data`.
static JOBS: Mutex<Option<HashMap<usize, Arc<Mutex<Job>>>>> = Mutex::new(None);
/// The reason of each failed `io_u`, for `errdetails`.
static FAILED: Mutex<Option<HashMap<usize, String>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn job(td: *mut ThreadData) -> Option<Arc<Mutex<Job>>> {
    lock(&JOBS).as_ref()?.get(&(td as usize)).cloned()
}

fn note_failure(handle: usize, why: Option<String>) {
    let mut f = lock(&FAILED);
    let map = f.get_or_insert_with(HashMap::new);
    match why {
        Some(w) => {
            map.insert(handle, w);
        }
        None => {
            map.remove(&handle);
        }
    }
}

/// Runs a callback's body; a panic becomes `failed` (it must not unwind
/// into fio).
fn guard<T>(failed: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        eprintln!("roce-fio: internal error (a panic), the call fails");
        failed
    })
}

fn report(what: &str, e: &str) -> c_int {
    eprintln!("roce-fio: {what}: {e}");
    1
}

unsafe extern "C" fn init(td: *mut ThreadData) -> c_int {
    guard(1, || {
        if let Err(e) = abi::check_fio_version() {
            return report("fio", &e);
        }
        lock(&JOBS).get_or_insert_with(HashMap::new).insert(td as usize, Arc::default());
        0
    })
}

unsafe extern "C" fn io_u_init(td: *mut ThreadData, _io_u: *mut IoU) -> c_int {
    guard(1, || {
        if let Some(j) = job(td) {
            let mut j = lock(&j);
            j.io_units = j.io_units.saturating_add(1);
        }
        0
    })
}

unsafe extern "C" fn get_file_size(td: *mut ThreadData, f: *mut FioFile) -> c_int {
    // SAFETY: fio's file (abi's argument).
    let Some(mut f) = (unsafe { File::from_raw(f) }) else { return 1 };
    guard(1, || {
        if let Err(e) = abi::check_fio_version() {
            return report("fio", &e);
        }
        if let Some(j) = job(td) {
            if let Some(c) = lock(&j).conns.get(&f.key()) {
                f.set_size(c.size());
                return 0;
            }
        }
        let name = f.name();
        match Spec::parse(&name).map_err(|e| e.to_string()).and_then(|s| engine::probe_size(&s)) {
            Ok(size) => {
                f.set_size(size);
                0
            }
            Err(e) => report(&name, &e),
        }
    })
}

unsafe extern "C" fn open_file(td: *mut ThreadData, f: *mut FioFile) -> c_int {
    // SAFETY: fio's file (abi's argument).
    let Some(mut f) = (unsafe { File::from_raw(f) }) else { return 1 };
    guard(1, || {
        let name = f.name();
        let Some(j) = job(td) else { return report(&name, "the engine was not initialised") };
        let mut j = lock(&j);
        if let Some(c) = j.conns.get(&f.key()) {
            f.set_size(c.size());
            return 0;
        }
        let spec = match Spec::parse(&name) {
            Ok(s) => s,
            Err(e) => return report(&name, &e.to_string()),
        };
        // More entries than I/Os in flight (the Linux host has 128): a
        // target frees an entry only when its response's SEND is
        // acknowledged, after we may have sent the next command.
        let entries = j.io_units.saturating_mul(2).max(32);
        match Conn::open(&spec, entries, 1 << 20) {
            Ok(c) => {
                f.set_size(c.size());
                j.conns.insert(f.key(), c);
                0
            }
            Err(e) => report(&name, &e),
        }
    })
}

unsafe extern "C" fn close_file(td: *mut ThreadData, f: *mut FioFile) -> c_int {
    // SAFETY: fio's file (abi's argument).
    let Some(f) = (unsafe { File::from_raw(f) }) else { return 0 };
    guard(1, || {
        let conn = job(td).and_then(|j| lock(&j).conns.remove(&f.key()));
        match conn.map(Conn::close) {
            Some(Err(e)) => report(&f.name(), &format!("disconnecting: {e}")),
            _ => 0,
        }
    })
}

/// There is no page cache between fio and the namespace to drop.
unsafe extern "C" fn invalidate(_td: *mut ThreadData, _f: *mut FioFile) -> c_int {
    0
}

unsafe extern "C" fn queue(td: *mut ThreadData, io_u: *mut IoU) -> c_int {
    // SAFETY: fio passes an io_u it just put in flight (abi's argument).
    let Some(mut u) = (unsafe { IoUnit::from_raw(io_u) }) else { return abi::FIO_Q_COMPLETED };
    let handle = u.handle();
    let refused = guard(Err(Refused { errno: libc::EIO, why: "internal error".into() }), || {
        let Some(j) = job(td) else {
            return Err(Refused { errno: libc::EINVAL, why: "the engine was not initialised".into() });
        };
        let mut j = lock(&j);
        let (file, offset, len, dir) = (u.file(), u.offset(), u.len(), u.ddir());
        let Some(conn) = j.conns.get_mut(&file) else {
            return Err(Refused { errno: libc::EBADF, why: "the file is not open".into() });
        };
        let req = match dir {
            ddir::READ => Request::Read { offset, len: len as usize },
            ddir::WRITE => Request::Write { offset, data: u.buffer() },
            ddir::TRIM => Request::Trim { offset, len },
            ddir::SYNC | ddir::DATASYNC | ddir::SYNC_FILE_RANGE => Request::Flush,
            d => return Err(Refused { errno: libc::EINVAL, why: format!("fio data direction {d}") }),
        };
        conn.submit(handle, req)
    });
    match refused {
        Ok(true) => abi::FIO_Q_QUEUED,
        Ok(false) => abi::FIO_Q_BUSY,
        Err(r) => {
            u.set_result(r.errno);
            note_failure(handle, Some(r.why));
            abi::FIO_Q_COMPLETED
        }
    }
}

/// Sends the commands `queue` took since the last commit, each
/// connection's in one post.
unsafe extern "C" fn commit(td: *mut ThreadData) -> c_int {
    guard(-libc::EIO, || {
        let Some(j) = job(td) else { return -libc::EINVAL };
        let mut j = lock(&j);
        for (_, conn) in j.conns.iter_mut() {
            if let Err(e) = conn.flush() {
                // fio takes a negative errno from commit as the job's error.
                report("commit", &e);
                return -libc::EIO;
            }
        }
        0
    })
}

/// Hands an outcome to its io_u.
fn complete(handle: usize, outcome: Outcome) {
    // SAFETY: `handle` is an io_u `queue` put in flight, not yet returned
    // from `event` (the connection records each handle once).
    if let Some(mut u) = unsafe { IoUnit::from_raw(handle as *mut IoU) } {
        match outcome {
            Ok(()) => {
                u.set_result(0);
                note_failure(handle, None);
            }
            Err(r) => {
                u.set_result(r.errno);
                note_failure(handle, Some(r.why));
            }
        }
    }
}

unsafe extern "C" fn getevents(
    td: *mut ThreadData,
    min: c_uint,
    max: c_uint,
    t: *const libc::timespec,
) -> c_int {
    // SAFETY: fio's optional timeout.
    let limit = (!t.is_null()).then(|| unsafe {
        Duration::new((*t).tv_sec.max(0) as u64, (*t).tv_nsec.clamp(0, 999_999_999) as u32)
    });
    guard(-libc::EIO, || {
        let Some(j) = job(td) else { return -libc::EINVAL };
        let mut j = lock(&j);
        let deadline = limit.map(|l| Instant::now() + l);
        let (min, max) = (min as usize, (max as usize).max(1));
        let mut batch = Vec::new();
        loop {
            let several = j.conns.len() > 1;
            let want_more = j.ready.len() < min;
            for (_, conn) in j.conns.iter_mut() {
                let left = deadline
                    .map_or(Duration::from_millis(100), |d| d.saturating_duration_since(Instant::now()));
                let wait = if !want_more {
                    Duration::ZERO
                } else if several {
                    left.min(Duration::from_millis(1))
                } else {
                    left.min(Duration::from_millis(100))
                };
                let mut dest = |h: usize, copy: &mut engine::CopyOut<'_>| {
                    // SAFETY: as in `complete`; this borrow ends before it.
                    match unsafe { IoUnit::from_raw(h as *mut IoU) } {
                        Some(mut u) => copy(u.buffer()),
                        None => Ok(()),
                    }
                };
                if let Err(e) = conn.reap(wait, &mut batch, &mut dest) {
                    eprintln!("roce-fio: {e}");
                    return -libc::EIO;
                }
            }
            for (h, outcome) in batch.drain(..) {
                complete(h, outcome);
                j.ready.push(h);
            }
            let outstanding: usize = j.conns.values().map(Conn::outstanding).sum();
            if j.ready.len() >= min || outstanding == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        let n = j.ready.len().min(max);
        let taken: Vec<usize> = j.ready.drain(..n).collect();
        j.events = taken;
        n as c_int
    })
}

unsafe extern "C" fn event(td: *mut ThreadData, i: c_int) -> *mut IoU {
    guard(std::ptr::null_mut(), || {
        job(td)
            .and_then(|j| lock(&j).events.get(usize::try_from(i).ok()?).copied())
            .map_or(std::ptr::null_mut(), |h| h as *mut IoU)
    })
}

unsafe extern "C" fn errdetails(io_u: *mut IoU) -> *mut c_char {
    let why = lock(&FAILED).as_ref().and_then(|m| m.get(&(io_u as usize)).cloned());
    abi::c_string(&format!("roce-fio: {}", why.as_deref().unwrap_or("the I/O failed")))
}

unsafe extern "C" fn cleanup(td: *mut ThreadData) {
    guard((), || {
        let Some(j) = lock(&JOBS).as_mut().and_then(|m| m.remove(&(td as usize))) else { return };
        let conns: Vec<Conn> = lock(&j).conns.drain().map(|(_, c)| c).collect();
        for c in conns {
            if let Err(e) = c.close() {
                eprintln!("roce-fio: disconnecting: {e}");
            }
        }
    })
}

/// The engine's table (fio writes its `dlhandle` into it).
static OPS: OnceLock<usize> = OnceLock::new();

/// fio's entry point for an external engine: the ops table.
///
/// # Safety
/// `out` is null or points to a writable `struct ioengine_ops *`.
#[no_mangle]
pub unsafe extern "C" fn get_ioengine(out: *mut *mut IoengineOps) {
    if out.is_null() {
        return;
    }
    let ops = *OPS.get_or_init(|| {
        Box::into_raw(Box::new(IoengineOps {
            list: [std::ptr::null_mut(); 2],
            name: c"roce-nvmf".as_ptr(),
            version: abi::FIO_IOOPS_VERSION,
            flags: abi::FIO_DISKLESSIO
                | abi::FIO_RAWIO
                | abi::FIO_NOEXTEND
                | abi::FIO_NODISKUTIL
                | abi::FIO_MEMALIGN,
            dlhandle: std::ptr::null_mut(),
            // None: with a setup, fio leaves the file sizes to it and
            // skips `get_file_size`.
            setup: None,
            init: Some(init),
            post_init: None,
            prep: None,
            queue: Some(queue),
            commit: Some(commit),
            getevents: Some(getevents),
            event: Some(event),
            errdetails: Some(errdetails),
            cancel: None,
            cleanup: Some(cleanup),
            open_file: Some(open_file),
            close_file: Some(close_file),
            invalidate: Some(invalidate),
            unlink_file: None,
            get_file_size: Some(get_file_size),
            prepopulate_file: None,
            terminate: None,
            iomem_alloc: None,
            iomem_free: None,
            io_u_init: Some(io_u_init),
            io_u_free: None,
            get_zoned_model: None,
            report_zones: None,
            reset_wp: None,
            get_max_open_zones: None,
            option_struct_size: 0,
            options: std::ptr::null_mut(),
        })) as usize
    });
    // SAFETY: the caller's contract.
    unsafe { *out = ops as *mut IoengineOps };
}
