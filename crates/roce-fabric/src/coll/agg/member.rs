//! A rank of an in-network all-reduce: streams its chunks up to its leaf
//! aggregation node, a slot at a time, and places the results that come
//! down (the module above has the protocol).

use roce_coll::reduce::finish_avg;
use roce_coll::{data_slot, Buffers, Completion, Layout, OpDesc, Poll, Transport, HEADER_BYTES};

use super::{chunk_bytes, imm, AggError, Header};

/// Where the chunks of a call stand.
struct Call {
    head: Header,
    chunk: usize,
    /// Next chunk to send.
    next: usize,
    /// Results placed.
    got: usize,
    /// Writes not yet acknowledged.
    unacked: usize,
    /// Per slot: its last write acknowledged (the staging slot is free).
    staged_free: Vec<bool>,
    /// Per slot: the result of its last chunk came back (or none was
    /// sent): the next chunk may take it.
    result_in: Vec<bool>,
    last_progress_ns: u64,
}

/// One rank's side.
pub struct Member {
    /// The leaf aggregation node's endpoint.
    leaf: usize,
    ranks: usize,
    layout: Layout,
    /// Copy payloads (results checked) or headers only (timing).
    pub payload: bool,
    pub timeout_ns: u64,
    seq: u32,
    call: Option<Call>,
    done: Vec<Completion>,
}

impl Member {
    /// A rank of `ranks` whose leaf aggregation node is endpoint `leaf`,
    /// with the pool `layout` (`slots` slots of `slot_bytes`, one channel).
    pub fn new(leaf: usize, ranks: usize, layout: Layout) -> Member {
        Member {
            leaf,
            ranks,
            layout,
            payload: true,
            timeout_ns: 1_000_000_000,
            seq: 0,
            call: None,
            done: Vec::new(),
        }
    }

    /// Starts an all-reduce of `desc` (its op must be all-reduce: the
    /// caller checks) on `bufs`.
    pub fn start(
        &mut self,
        t: &mut dyn Transport,
        desc: &OpDesc,
        bufs: &mut Buffers,
    ) -> Result<(), AggError> {
        self.seq = self.seq.wrapping_add(1);
        let chunk = chunk_bytes(&self.layout, desc.dtype);
        let bytes = desc.count * desc.dtype.size();
        let slots = self.layout.slots;
        let head = Header {
            seq: self.seq,
            chunk: 0,
            chunks: bytes.div_ceil(chunk) as u32,
            len: 0,
            dtype: desc.dtype,
            redop: desc.redop,
            count: desc.count as u64,
        };
        if let Buffers::OutOfPlace { send, recv } = bufs {
            if head.chunks == 0 {
                recv.copy_from_slice(send);
            }
        }
        self.call = Some(Call {
            head,
            chunk,
            next: 0,
            got: 0,
            unacked: 0,
            staged_free: vec![true; slots],
            result_in: vec![true; slots],
            last_progress_ns: t.now_ns(),
        });
        self.send_ready(t, bufs)
    }

    /// Sends every chunk whose slot is free.
    fn send_ready(&mut self, t: &mut dyn Transport, bufs: &Buffers) -> Result<(), AggError> {
        let slots = self.layout.slots;
        let c = self.call.as_mut().expect("in a call");
        let bytes = c.head.count as usize * c.head.dtype.size();
        let input: &[u8] = match bufs {
            Buffers::InPlace(b) => b,
            Buffers::OutOfPlace { send, .. } => send,
        };
        while c.next < c.head.chunks as usize {
            let s = c.next % slots;
            if !(c.staged_free[s] && c.result_in[s]) {
                break;
            }
            let off = c.next * c.chunk;
            let len = c.chunk.min(bytes - off);
            let head = Header { chunk: c.next as u32, len: len as u32, ..c.head };
            let payload = self.payload;
            t.stage(self.leaf, 0, s, &mut |b| {
                head.emit(&mut b[..HEADER_BYTES]);
                if payload {
                    b[HEADER_BYTES..HEADER_BYTES + len].copy_from_slice(&input[off..off + len]);
                }
            })?;
            t.write(self.leaf, 0, s, HEADER_BYTES + len, imm(c.next, s), s as u64)?;
            c.staged_free[s] = false;
            c.result_in[s] = false;
            c.unacked += 1;
            c.next += 1;
        }
        Ok(())
    }

    /// Takes what came back; `Done` when every result is placed and every
    /// write acknowledged.
    pub fn progress(&mut self, t: &mut dyn Transport, bufs: &mut Buffers) -> Result<Poll, AggError> {
        let Some(c) = self.call.as_mut() else {
            return Ok(Poll::Done);
        };
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        t.poll(&mut done)?;
        let slots = self.layout.slots;
        let now = t.now_ns();
        if !done.is_empty() {
            c.last_progress_ns = now;
        }
        for &d in &done {
            match d {
                Completion::Sent { token, .. } => {
                    c.staged_free[token as usize % slots] = true;
                    c.unacked -= 1;
                }
                Completion::Arrived { peer, imm: i, .. } => {
                    let bad = |why: String| AggError::Malformed { from: peer, why };
                    if peer != self.leaf {
                        return Err(bad("a write from an endpoint that is not this rank's switch".into()));
                    }
                    let Some(s) = data_slot(i).filter(|&s| s < slots && !c.result_in[s]) else {
                        return Err(bad(format!("a result (immediate {i:#x}) for no slot that awaits one")));
                    };
                    let mut head = Err(String::new());
                    let out: &mut [u8] = match bufs {
                        Buffers::InPlace(b) => b,
                        Buffers::OutOfPlace { recv, .. } => recv,
                    };
                    let (payload, chunk) = (self.payload, c.chunk);
                    let want = c.head;
                    t.read_slot(peer, 0, s, &mut |b| {
                        head = Header::parse(b, b.len()).and_then(|h| {
                            let same = h.seq == want.seq
                                && h.chunks == want.chunks
                                && h.dtype == want.dtype
                                && h.redop == want.redop
                                && h.count == want.count
                                && h.chunk as usize % slots == s;
                            let off = h.chunk as usize * chunk;
                            let len = chunk.min(want.count as usize * want.dtype.size() - off);
                            if !same || h.len as usize != len {
                                return Err(format!("a result for {h:?} while in {want:?}, slot {s}"));
                            }
                            if payload {
                                out[off..off + len].copy_from_slice(&b[HEADER_BYTES..HEADER_BYTES + len]);
                            }
                            Ok(h)
                        });
                    })?;
                    let h = head.map_err(bad)?;
                    if payload && h.redop == roce_coll::RedOp::Avg {
                        let off = h.chunk as usize * chunk;
                        finish_avg(h.dtype, self.ranks, &mut out[off..off + h.len as usize]);
                    }
                    c.result_in[s] = true;
                    c.got += 1;
                }
            }
        }
        self.done = done;
        self.send_ready(t, bufs)?;
        let c = self.call.as_ref().expect("in a call");
        if c.got == c.head.chunks as usize && c.unacked == 0 {
            self.call = None;
            return Ok(Poll::Done);
        }
        let deadline = c.last_progress_ns + self.timeout_ns;
        if now >= deadline {
            return Err(AggError::Timeout {
                seq: c.head.seq,
                got: c.got,
                chunks: c.head.chunks as usize,
                waited_ns: now - c.last_progress_ns,
            });
        }
        Ok(Poll::Pending { deadline_ns: deadline })
    }
}
