//! The raw UDP receiver the benches measure against: `recvmmsg` with GRO,
//! as the driver receives, optionally checking one CRC32 per datagram (the
//! least work the ICRC demands), counting the bytes that arrive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use roce::udp::{RxMeta, UdpIo, BATCH, RX_BUF};

/// A receiving thread.
pub struct RawRx {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    bad: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

impl RawRx {
    /// Receives on `rx` until stopped; `check`: verify the CRC32 in each
    /// datagram's last four bytes.
    pub fn spawn(mut rx: UdpIo, check: bool) -> RawRx {
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let bad = Arc::new(AtomicU64::new(0));
        let (s2, b2, bad2) = (stop.clone(), bytes.clone(), bad.clone());
        let thread = std::thread::spawn(move || {
            let mut bufs = vec![vec![0u8; RX_BUF]; BATCH];
            let mut metas = vec![RxMeta::default(); BATCH];
            while !s2.load(Ordering::Relaxed) {
                let n = rx.recv(&mut bufs, &mut metas).unwrap();
                let got: usize = metas[..n].iter().map(|m| m.len).sum();
                if check {
                    for (b, m) in bufs.iter().zip(&metas[..n]) {
                        for d in b[..m.len].chunks(m.stride.max(1)) {
                            let (body, crc) = d.split_at(d.len() - 4);
                            if crc32fast::hash(body).to_le_bytes() != crc {
                                bad2.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                b2.fetch_add(got as u64, Ordering::Relaxed);
                if n == 0 {
                    std::thread::yield_now();
                }
            }
        });
        RawRx { stop, bytes, bad, thread }
    }

    /// Bytes received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Stops the thread; panics if any datagram failed its CRC.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        assert_eq!(self.bad.load(Ordering::Relaxed), 0, "raw UDP datagrams with a bad CRC");
    }
}

/// Fills the CRC32 in the last four bytes of every datagram of `data`
/// (datagrams of `pkt` bytes), `times` times over: the CRC work of that
/// many distinct buffers.
pub fn crc_batch(data: &mut [u8], pkt: usize, times: usize) {
    for _ in 0..times {
        for p in data.chunks_mut(pkt) {
            let (body, crc) = p.split_at_mut(pkt - 4);
            crc.copy_from_slice(&crc32fast::hash(body).to_le_bytes());
        }
    }
}
