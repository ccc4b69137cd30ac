//! An event channel's queue: an eventfd that polls readable exactly while
//! the queue holds something, as the kernel's `rdma_cm` file does (the
//! counter is 1 while the queue is non-empty and 0 otherwise, changed
//! only under the queue's lock; programs poll the fd, never read it).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

/// Locks, ignoring poisoning: a panic caught at the boundary must not make
/// every later call fail.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct EventQueue<T> {
    pub fd: OwnedFd,
    queue: Mutex<VecDeque<T>>,
}

impl<T> EventQueue<T> {
    pub fn new() -> std::io::Result<EventQueue<T>> {
        Ok(EventQueue { fd: crate::sys::eventfd()?, queue: Mutex::new(VecDeque::new()) })
    }

    pub fn push(&self, item: T) {
        let mut q = lock(&self.queue);
        if q.is_empty() {
            // Fails only if the counter would overflow; it is 0 here.
            let _ = crate::sys::write(self.fd.as_raw_fd(), &1u64.to_ne_bytes());
        }
        q.push_back(item);
    }

    pub fn pop(&self) -> Option<T> {
        let mut q = lock(&self.queue);
        let item = q.pop_front()?;
        if q.is_empty() {
            self.clear();
        }
        Some(item)
    }

    /// Takes out the items `take` selects, in order.
    pub fn extract(&self, mut take: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut q = lock(&self.queue);
        let had = !q.is_empty();
        let (out, keep): (VecDeque<T>, VecDeque<T>) = q.drain(..).partition(|i| take(i));
        *q = keep;
        if had && q.is_empty() {
            self.clear();
        }
        out.into()
    }

    fn clear(&self) {
        let _ = crate::sys::read_event(self.fd.as_raw_fd());
    }

    /// The first item, waiting for one unless the program made the fd
    /// non-blocking (then `EAGAIN`, as a read of the kernel's file).
    pub fn take(&self) -> std::io::Result<T> {
        loop {
            if let Some(item) = self.pop() {
                return Ok(item);
            }
            let fd = self.fd.as_raw_fd();
            if crate::sys::is_nonblocking(fd)? {
                return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
            }
            crate::sys::wait_readable(fd)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(q: &EventQueue<u32>) -> bool {
        let mut p = libc::pollfd { fd: q.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd for the call.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn the_fd_polls_readable_exactly_while_items_wait() {
        let q = EventQueue::new().unwrap();
        assert!(!readable(&q));
        q.push(1);
        q.push(2);
        q.push(3);
        assert!(readable(&q));
        assert_eq!(q.extract(|i| *i == 2), vec![2]);
        assert_eq!(q.pop(), Some(1));
        assert!(readable(&q));
        assert_eq!(q.take().unwrap(), 3);
        assert!(!readable(&q));
        // SAFETY: F_SETFL on our own fd.
        unsafe { libc::fcntl(q.fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert_eq!(q.take().unwrap_err().raw_os_error(), Some(libc::EAGAIN));
    }
}
