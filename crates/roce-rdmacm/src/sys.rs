//! The few system calls the library makes itself: eventfds for the event
//! channels (with fcntl(2) and poll(2) to honour and wait on them), and
//! `errno`.
//!
//! Safety: each call passes only a buffer the function borrows for the
//! call's duration, with its true length, or no pointer at all; the file
//! descriptors are ones the caller owns or borrows.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A new eventfd, close-on-exec.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the fd returned is new and ours.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
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

/// Reads (and so zeroes) an eventfd's counter; the error leaves `errno`
/// as the read set it.
pub fn read_event(fd: RawFd) -> io::Result<()> {
    let mut b = [0u8; 8];
    // SAFETY: `b` is valid for 8 bytes of writes for the call.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
    if n != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the program made `fd` non-blocking (`O_NONBLOCK`).
pub fn is_nonblocking(fd: RawFd) -> io::Result<bool> {
    // SAFETY: no pointers.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags & libc::O_NONBLOCK != 0)
}

/// Waits until `fd` polls readable (a signal ends the wait with `EINTR`).
pub fn wait_readable(fd: RawFd) -> io::Result<()> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one `pollfd`, valid for the call.
    if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
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

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Fills `b` with random bytes (getrandom(2); a failure leaves the
/// bytes as they were, for callers that need no secrecy).
pub fn random(b: &mut [u8]) {
    // SAFETY: `b` is valid for `b.len()` bytes of writes for the call.
    let _ = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
}
