//! The few system calls the library makes itself (the UDP socket is the
//! `roce` driver's): eventfds for completion channels and async events,
//! and `errno`.
//!
//! Safety: each call passes only a buffer the function borrows for the
//! call's duration, with its true length, or no pointer at all; the file
//! descriptors are ones the caller owns or borrows.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A new eventfd in semaphore mode (each read takes one), close-on-exec.
pub fn eventfd_semaphore() -> io::Result<OwnedFd> {
    // Miri has no EFD_SEMAPHORE: its tests (the object model's) only ever
    // write the counter, never read it, so a plain eventfd stands in.
    let flags = if cfg!(miri) { libc::EFD_CLOEXEC } else { libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE };
    // SAFETY: no pointers; the fd returned is new and ours.
    let fd = unsafe { libc::eventfd(0, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a freshly opened descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn write(fd: RawFd, b: &[u8]) -> io::Result<usize> {
    // SAFETY: `b` is valid for `b.len()` bytes for the call.
    let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Reads one count from an eventfd (blocking unless the program made the fd
/// non-blocking); the error leaves `errno` as the read set it.
pub fn read_event(fd: RawFd) -> io::Result<()> {
    let mut b = [0u8; 8];
    // SAFETY: `b` is valid for 8 bytes of writes for the call.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
    if n != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot,
    // valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}
