//! The boilerplate every zero-copy header view shares.

/// Declares `pub struct $name<T: AsRef<[u8]>>` with `new_unchecked`,
/// `new_checked` (length >= `$len`), `into_inner` and `as_bytes`.
macro_rules! header_view {
    ($(#[$m:meta])* $name:ident, $len:expr, $hdr:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps `buffer` without checking its length; accessors may panic
            /// on a short buffer. Use `new_checked` for untrusted bytes.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps `buffer`, failing if it is shorter than the header.
            #[inline]
            pub fn new_checked(buffer: T) -> $crate::error::Result<Self> {
                let have = buffer.as_ref().len();
                if have < $len {
                    return Err($crate::error::WireError::Truncated { header: $hdr, need: $len, have });
                }
                Ok($name { buffer })
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's bytes (and whatever follows them in the buffer).
            pub fn as_bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}

pub(crate) use header_view;
