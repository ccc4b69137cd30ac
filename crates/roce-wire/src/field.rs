//! Big-endian field access on byte slices, and byte ranges named like smoltcp's
//! `field` modules. Callers have checked the length before calling these.

#[inline]
pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn get_u24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

#[inline]
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

#[inline]
pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v`.
#[inline]
pub(crate) fn set_u24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

#[inline]
pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// The Internet checksum (RFC 1071) of `data`, folded, not inverted, continuing
/// from the partial sum `acc`.
pub(crate) fn ones_complement_sum(acc: u32, data: &[u8]) -> u32 {
    // Eight bytes at a time into a wide accumulator (one's-complement
    // addition is associative, so 32-bit halves can be summed and folded
    // at the end); the 16-bit tail as RFC 1071 has it.
    let mut wide = u64::from(acc);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let v = u64::from_be_bytes(w.try_into().expect("8 bytes"));
        wide += (v >> 32) + (v & 0xffff_ffff);
    }
    let mut chunks = words.remainder().chunks_exact(2);
    for c in &mut chunks {
        wide += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        wide += u64::from(*last) << 8;
    }
    while wide >> 16 != 0 {
        wide = (wide & 0xffff) + (wide >> 16);
    }
    wide as u32
}

/// Reads `width` bits of byte `b[at]`, starting `msb` bits below its most
/// significant bit (IBTA bit numbering).
#[inline]
pub(crate) fn get_bits(b: &[u8], at: usize, msb: u32, width: u32) -> u8 {
    (b[at] >> (8 - msb - width)) & ((1u16 << width) - 1) as u8
}

/// Writes the low `width` bits of `v` where `get_bits` reads them.
#[inline]
pub(crate) fn set_bits(b: &mut [u8], at: usize, msb: u32, width: u32, v: u8) {
    let shift = 8 - msb - width;
    let mask = (((1u16 << width) - 1) as u8) << shift;
    b[at] = (b[at] & !mask) | ((v << shift) & mask);
}

/// Named getters and setters over a view's buffer:
/// `getter, setter: kind(offset[, msb, width]);` with kind one of
/// u8 u16 u24 u32 u64 bits gid.
macro_rules! accessors {
    ($view:ident { $( $(#[$m:meta])* $get:ident, $set:ident : $kind:ident ( $($arg:expr),* ) ; )* }) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $( $(#[$m])* #[inline] pub fn $get(&self) -> $crate::field::acc_ty!($kind) {
                $crate::field::acc_get!($kind, self.buffer.as_ref(), $($arg),*)
            } )*
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $( #[inline] pub fn $set(&mut self, v: $crate::field::acc_ty!($kind)) {
                $crate::field::acc_set!($kind, self.buffer.as_mut(), v, $($arg),*)
            } )*
        }
    };
}

macro_rules! acc_ty {
    (u8) => {
        u8
    };
    (u16) => {
        u16
    };
    (u24) => {
        u32
    };
    (u32) => {
        u32
    };
    (u64) => {
        u64
    };
    (bits) => {
        u8
    };
    (flag) => {
        bool
    };
    (gid) => {
        [u8; 16]
    };
}

macro_rules! acc_get {
    (u8, $b:expr, $at:expr) => {
        $b[$at]
    };
    (u16, $b:expr, $at:expr) => {
        $crate::field::get_u16($b, $at)
    };
    (u24, $b:expr, $at:expr) => {
        $crate::field::get_u24($b, $at)
    };
    (u32, $b:expr, $at:expr) => {
        $crate::field::get_u32($b, $at)
    };
    (u64, $b:expr, $at:expr) => {
        $crate::field::get_u64($b, $at)
    };
    (bits, $b:expr, $at:expr, $msb:expr, $w:expr) => {
        $crate::field::get_bits($b, $at, $msb, $w)
    };
    (flag, $b:expr, $at:expr, $msb:expr) => {
        $crate::field::get_bits($b, $at, $msb, 1) != 0
    };
    (gid, $b:expr, $at:expr) => {
        $b[$at..$at + 16].try_into().expect("16 bytes")
    };
}

macro_rules! acc_set {
    (u8, $b:expr, $v:expr, $at:expr) => {
        $b[$at] = $v
    };
    (u16, $b:expr, $v:expr, $at:expr) => {
        $crate::field::set_u16($b, $at, $v)
    };
    (u24, $b:expr, $v:expr, $at:expr) => {
        $crate::field::set_u24($b, $at, $v & 0x00ff_ffff)
    };
    (u32, $b:expr, $v:expr, $at:expr) => {
        $crate::field::set_u32($b, $at, $v)
    };
    (u64, $b:expr, $v:expr, $at:expr) => {
        $crate::field::set_u64($b, $at, $v)
    };
    (bits, $b:expr, $v:expr, $at:expr, $msb:expr, $w:expr) => {
        $crate::field::set_bits($b, $at, $msb, $w, $v)
    };
    (flag, $b:expr, $v:expr, $at:expr, $msb:expr) => {
        $crate::field::set_bits($b, $at, $msb, 1, $v as u8)
    };
    (gid, $b:expr, $v:expr, $at:expr) => {
        $b[$at..$at + 16].copy_from_slice(&$v)
    };
}

pub(crate) use {acc_get, acc_set, acc_ty, accessors};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 as written: 16 bits at a time.
    fn reference(mut acc: u32, data: &[u8]) -> u32 {
        let mut chunks = data.chunks_exact(2);
        for c in &mut chunks {
            acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            acc += u32::from(*last) << 8;
        }
        while acc >> 16 != 0 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc
    }

    proptest! {
        #[test]
        fn wide_sum_matches_rfc_1071(acc in 0u32..0x1_0000, data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(ones_complement_sum(acc, &data), reference(acc, &data));
        }
    }
}
