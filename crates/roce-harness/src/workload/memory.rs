//! Memory of a plan: the standard regions every host has, bump allocation
//! inside them, and the final layout (buffer offsets, I/O virtual
//! addresses, initial bytes).

use crate::rng::SimRng;

use super::plan::{HostPlan, MrKind, MrPlan, MrRef, Seg};

/// Index of each standard region in [`HostPlan::mrs`]; regions registered
/// only for invalidation follow.
pub const SRC: usize = 0;
pub const TGT: usize = 1;
pub const LAND: usize = 2;
pub const RECV: usize = 3;
pub const ATOM: usize = 4;
pub const UDOUT: usize = 5;

const STANDARD: [MrKind; 6] =
    [MrKind::Src, MrKind::Tgt, MrKind::Land, MrKind::Recv, MrKind::Atom, MrKind::UdOut];

/// The standard regions of a new host; `src_len` bytes of source data.
pub fn standard_mrs(src_len: usize) -> Vec<MrPlan> {
    STANDARD
        .iter()
        .map(|&kind| MrPlan { kind, len: if kind == MrKind::Src { src_len } else { 0 }, buf_off: 0, iova: 0 })
        .collect()
}

/// Reserves `len` bytes in region `r` after a gap of `gap` bytes, aligned
/// to `align`; returns the segment.
pub fn alloc(hosts: &mut [HostPlan], r: MrRef, len: u32, gap: u64, align: u64) -> Seg {
    let mr = &mut hosts[r.host].mrs[r.mr];
    let off = (mr.len as u64 + gap).next_multiple_of(align);
    mr.len = (off + u64::from(len)) as usize;
    Seg { mr: r, off, len }
}

/// Places every region of a host in its buffer (random gaps; regions that
/// atomics may target 8-byte aligned), picks I/O virtual addresses (small, anywhere,
/// or just below 2^64), and fills the buffer with random bytes.
pub fn layout(rng: &mut SimRng, h: &mut HostPlan) {
    let mut cursor = rng.usize(0, 63);
    for mr in &mut h.mrs {
        mr.len = mr.len.max(16);
        let aligned = matches!(mr.kind, MrKind::Atom | MrKind::Fixed);
        let align = if aligned { 8 } else { 1 };
        cursor = cursor.next_multiple_of(align);
        mr.buf_off = cursor;
        cursor += mr.len + rng.usize(0, 64);
        let len = mr.len as u64;
        // A probe runs past the end of a Fixed region: keep that in 2^64.
        let top = u64::MAX - len - if mr.kind == MrKind::Fixed { 1 << 20 } else { 0 };
        let iova = match rng.below(3) {
            0 => rng.below(1 << 32),
            1 => rng.below(top),
            _ => top - rng.below(1 << 20),
        };
        mr.iova = if aligned { iova & !7 } else { iova };
    }
    h.mem_len = cursor + rng.usize(0, 64);
    h.init = vec![0; h.mem_len];
    rng.fill(&mut h.init);
}
