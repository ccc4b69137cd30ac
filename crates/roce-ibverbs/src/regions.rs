//! The application memory registered with each device, so that no bytes
//! are registered with two devices (two engines) at once: a buffer's
//! accesses are sequential only within one engine (see
//! `roce_proto::MemBuf::from_raw_parts`' contract, which the library
//! upholds through this).

use std::sync::{Mutex, MutexGuard};

struct Region {
    start: usize,
    end: usize,
    device: usize,
    id: u64,
}

static REGIONS: Mutex<(u64, Vec<Region>)> = Mutex::new((0, Vec::new()));

/// The table, ignoring poisoning (a panic caught at the library's boundary
/// must not make every later registration fail).
fn regions() -> MutexGuard<'static, (u64, Vec<Region>)> {
    REGIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A registration's record; removed when dropped.
pub struct Registration {
    id: u64,
}

/// Records `[start, start + len)` for `device` (any stable per-device
/// value), or `None` if some of it is registered with another device.
pub fn register(start: usize, len: usize, device: usize) -> Option<Registration> {
    let end = start.checked_add(len)?;
    let mut g = regions();
    if g.1.iter().any(|r| r.device != device && r.start < end && start < r.end) {
        return None;
    }
    g.0 += 1;
    let id = g.0;
    g.1.push(Region { start, end, device, id });
    Some(Registration { id })
}

impl Drop for Registration {
    fn drop(&mut self) {
        regions().1.retain(|r| r.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn overlap_with_another_device_is_refused() {
        let a = super::register(0x1000, 0x1000, 1).unwrap();
        let _b = super::register(0x1800, 0x1000, 1).unwrap();
        assert!(super::register(0x1fff, 1, 2).is_none());
        let c = super::register(0x3000, 0x10, 2).unwrap();
        drop(a);
        drop(c);
        assert!(super::register(0x27f0, 0x10, 2).is_none(), "b still covers it");
    }
}
