use std::collections::HashMap;
use std::path::Path;

use roce_coll::{
    Buffers, Completion, DataType, Layout, OpDesc, OpKind, Poll, RedOp, Transport, TransportError,
};

use super::*;
use crate::coll::run::{run, DataCheck};
use crate::coll::workload::from_str;
use crate::scenario::NodeKind;

const LAYOUT: Layout = Layout { channels: 1, slots: 2, slot_bytes: 1024 };

/// A transport the test drives by hand: it records writes, and delivers
/// what the test puts in a receive slot.
#[derive(Default)]
struct Hand {
    now: u64,
    recv: HashMap<(usize, usize), Vec<u8>>,
    stage: HashMap<(usize, usize), Vec<u8>>,
    /// (to, slot, the bytes written).
    writes: Vec<(usize, usize, Vec<u8>)>,
    inbox: Vec<Completion>,
}

impl Hand {
    fn deliver(&mut self, from: usize, slot: usize, head: Header, payload: &[u8]) {
        let mut b = vec![0u8; LAYOUT.slot_bytes];
        head.emit(&mut b[..HEADER_BYTES]);
        b[HEADER_BYTES..HEADER_BYTES + payload.len()].copy_from_slice(payload);
        self.recv.insert((from, slot), b);
        self.inbox.push(Completion::Arrived { peer: from, channel: 0, imm: imm(head.chunk as usize, slot) });
    }
}

impl Transport for Hand {
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn stage(
        &mut self,
        peer: usize,
        _: usize,
        slot: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), TransportError> {
        f(self.stage.entry((peer, slot)).or_insert_with(|| vec![0; LAYOUT.slot_bytes]));
        Ok(())
    }
    fn read_slot(
        &self,
        peer: usize,
        _: usize,
        slot: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TransportError> {
        f(self.recv.get(&(peer, slot)).ok_or(TransportError::new(Some(peer), "nothing arrived"))?);
        Ok(())
    }
    fn write(
        &mut self,
        peer: usize,
        _: usize,
        slot: usize,
        len: usize,
        _: u32,
        token: u64,
    ) -> Result<(), TransportError> {
        self.writes.push((peer, slot, self.stage[&(peer, slot)][..len].to_vec()));
        self.inbox.push(Completion::Sent { peer, channel: 0, token });
        Ok(())
    }
    fn notify(&mut self, peer: usize, _: usize, _: u32) -> Result<(), TransportError> {
        Err(TransportError::new(Some(peer), "the aggregation sends no credits"))
    }
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<(), TransportError> {
        out.append(&mut self.inbox);
        Ok(())
    }
}

fn head(chunk: u32, dtype: DataType, len: usize) -> Header {
    Header { seq: 1, chunk, chunks: 4, len: len as u32, dtype, redop: RedOp::Sum, count: 1000 }
}

fn ints(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_node_reduces_its_children_then_passes_the_result_down() {
    let mut t = Hand::default();
    let mut a = Aggregator::new(vec![0, 1, 2], Some(9), LAYOUT);
    let h = head(1, DataType::I32, 12);
    t.deliver(0, 1, h, &ints(&[1, 2, 3]));
    t.deliver(2, 1, h, &ints(&[10, 20, 30]));
    a.progress(&mut t).unwrap();
    assert!(t.writes.is_empty(), "sent up before every child's chunk was in");
    t.deliver(1, 1, h, &ints(&[100, 200, 300]));
    a.progress(&mut t).unwrap();
    let (to, slot, bytes) = t.writes.pop().unwrap();
    assert_eq!((to, slot), (9, 1));
    assert_eq!(Header::parse(&bytes, LAYOUT.slot_bytes).unwrap(), h);
    assert_eq!(&bytes[HEADER_BYTES..], &ints(&[111, 222, 333])[..]);
    // the parent's result goes to every child, unchanged
    t.deliver(9, 1, h, &ints(&[7, 8, 9]));
    a.progress(&mut t).unwrap();
    let mut down: Vec<_> = t.writes.drain(..).collect();
    down.sort();
    assert_eq!(down.iter().map(|w| (w.0, w.1)).collect::<Vec<_>>(), [(0, 1), (1, 1), (2, 1)]);
    assert!(down.iter().all(|w| w.2[HEADER_BYTES..] == ints(&[7, 8, 9])[..]));
    assert_eq!(a.chunks, 1);
}

#[test]
fn children_that_disagree_are_refused() {
    let mut t = Hand::default();
    let mut a = Aggregator::new(vec![0, 1], None, LAYOUT);
    t.deliver(0, 0, head(0, DataType::I32, 8), &ints(&[1, 2]));
    t.deliver(1, 0, head(0, DataType::F32, 8), &ints(&[1, 2]));
    let e = a.progress(&mut t).unwrap_err();
    assert!(matches!(e, AggError::Disagree(_)), "{e}");
    assert!(t.writes.is_empty());
}

#[test]
fn a_node_refuses_what_breaks_the_protocol() {
    // a stranger, a chunk in the wrong slot, a second chunk in a busy
    // slot, a bad magic, a length past the slot: each a clear error
    type Hurt = Box<dyn Fn(&mut Hand)>;
    let cases: Vec<(&str, Hurt)> = vec![
        ("outside", Box::new(|t: &mut Hand| t.deliver(5, 0, head(0, DataType::I32, 4), &ints(&[1])))),
        ("in slot", Box::new(|t: &mut Hand| t.deliver(0, 1, head(0, DataType::I32, 4), &ints(&[1])))),
        (
            "busy slot",
            Box::new(|t: &mut Hand| {
                t.deliver(0, 0, head(0, DataType::I32, 4), &ints(&[1]));
                t.deliver(0, 0, head(2, DataType::I32, 4), &ints(&[1]));
            }),
        ),
        (
            "magic",
            Box::new(|t: &mut Hand| {
                t.deliver(0, 0, head(0, DataType::I32, 4), &ints(&[1]));
                t.recv.get_mut(&(0, 0)).unwrap()[0] ^= 1;
            }),
        ),
        ("-byte chunk", Box::new(|t: &mut Hand| t.deliver(0, 0, head(0, DataType::I32, 2000), &[]))),
    ];
    for (want, hurt) in cases {
        let mut t = Hand::default();
        let mut a = Aggregator::new(vec![0, 1], None, LAYOUT);
        hurt(&mut t);
        let e = a.progress(&mut t).unwrap_err();
        assert!(matches!(e, AggError::Malformed { .. }) && e.to_string().contains(want), "{want}: {e}");
        assert!(t.writes.is_empty(), "{want}: wrote {:?}", t.writes);
    }
}

#[test]
fn a_rank_whose_results_never_come_times_out() {
    let mut t = Hand::default();
    let mut m = Member::new(7, 4, LAYOUT);
    m.timeout_ns = 1_000;
    let desc = OpDesc::new(OpKind::AllReduce, DataType::I32, 1000);
    let mut buf = vec![0u8; 4000];
    m.start(&mut t, &desc, &mut Buffers::InPlace(&mut buf)).unwrap();
    // the pool's two slots are sent, no more until results come back
    assert_eq!(t.writes.iter().map(|w| (w.0, w.1)).collect::<Vec<_>>(), [(7, 0), (7, 1)]);
    let p = m.progress(&mut t, &mut Buffers::InPlace(&mut buf)).unwrap();
    assert_eq!(p, Poll::Pending { deadline_ns: 1_000 });
    t.now = 1_000;
    let e = m.progress(&mut t, &mut Buffers::InPlace(&mut buf)).unwrap_err();
    assert!(matches!(e, AggError::Timeout { seq: 1, got: 0, chunks: 5, .. }), "{e}");
}

fn wl(text: &str) -> crate::coll::Workload {
    from_str(text, Path::new(".")).unwrap()
}

/// i32 inputs `(7 i + 13 r) % 16`, summed.
struct Ints;

fn val(r: usize, i: usize) -> i32 {
    ((i * 7 + r * 13) % 16) as i32
}

impl DataCheck for Ints {
    fn fill(&self, d: &OpDesc, _: usize, r: usize, _: bool, input: &mut [u8]) {
        for i in 0..d.count {
            input[i * 4..i * 4 + 4].copy_from_slice(&val(r, i).to_le_bytes());
        }
    }
    fn wrong(&self, d: &OpDesc, n: usize, _: usize, _: bool, out: &[u8]) -> u64 {
        let get = |j: usize| i32::from_le_bytes(out[j * 4..j * 4 + 4].try_into().unwrap());
        (0..d.count).filter(|&i| get(i) != (0..n).map(|r| val(r, i)).sum::<i32>()).count() as u64
    }
}

fn fat_tree4(ranks: usize, extra: &str, coll: &str) -> crate::coll::Workload {
    wl(&format!(
        "[topology]\nkind = \"fat-tree\"\nk = 4\nrate = \"100G\"\ndelay = \"1us\"\n{extra}\
         [[collective]]\nalgo = \"switch\"\ntype = \"int32\"\nranks = {ranks}\niterations = 2\n{coll}"
    ))
}

/// 11 ranks over three pods of a k = 4 fat-tree (a tree of three levels),
/// a pool of 3 small slots, sizes of no, one and many chunks, not a
/// multiple of the chunk: every rank's result is right, in both halves;
/// and so with a host link that loses 2% of its frames (the transport
/// recovers them).
#[test]
fn the_switches_aggregate_right_on_a_fat_tree_and_through_loss() {
    for extra in ["", "[[lossy_link]]\nrank = 4\nloss = 0.02\n"] {
        let w =
            fat_tree4(11, extra, "sizes = [\"0B\", \"8B\", \"200000B\"]\nslots = 3\nslot_bytes = \"4KiB\"\n");
        let res = run(&w, 0, Some(&Ints)).unwrap();
        for row in &res.rows {
            assert_eq!(row.algo.name(), "switch");
            for half in [row.out_of_place.as_ref().unwrap(), &row.in_place] {
                assert_eq!(half.wrong, Some(0), "{extra}: {} B", row.bytes);
            }
        }
        assert_eq!(res.dropped > 0, !extra.is_empty(), "{extra}: {} dropped", res.dropped);
    }
}

/// The payload rate of a 100 Gb/s link carrying 64 KiB slot messages.
fn slot_rate() -> f64 {
    let slot = 65536.0;
    100e9 / 8.0 * (slot - 64.0) / (slot + 86.0 * 16.0 + 20.0)
}

/// Behind one switch every rank sends S and receives S once: the call
/// takes S/B and a few chunk times of fill (each level forwards whole
/// chunks), against the ring's 2(n-1)/n S/B.
#[test]
fn behind_one_switch_the_call_takes_one_pass_of_the_data() {
    let w =
        wl("[topology]\nhosts = 8\n[[collective]]\nalgo = \"switch\"\nsize = \"16MiB\"\niterations = 1\n\
                in_place_only = true\ncheck = false\nslots = 8\n");
    let t = run(&w, 0, None).unwrap().rows[0].in_place.time_us * 1e-6;
    let bound = 16.0 * 1048576.0 / slot_rate();
    let chunk = 65536.0 * 8.0 / 100e9;
    assert!(t > bound && t < bound + 4.0 * chunk, "{} us, bound {} us", t * 1e6, bound * 1e6);
}

/// A pool smaller than the tree's round trip leaves the links idle: one
/// slot per switch runs a chunk per round trip (up and down three levels)
/// while 8 keep the links full, after a fill of the round trip: a
/// chunk's time per level each way (an aggregation node forwards whole
/// chunks) and six 1 us links.
#[test]
fn a_small_slot_pool_starves_the_links() {
    let time = |slots: usize| {
        let w = fat_tree4(
            16,
            "",
            &format!("size = \"4MiB\"\nin_place_only = true\ncheck = false\nslots = {slots}\n"),
        );
        run(&w, 0, None).unwrap().rows[0].in_place.time_us
    };
    let (one, eight) = (time(1), time(8));
    let bound = 4.0 * 1048576.0 / slot_rate() * 1e6;
    let fill = 6.0 * 65536.0 / slot_rate() * 1e6 + 6.0;
    assert!(eight > bound && eight < bound + fill, "8 slots: {eight} us, bound {bound} + {fill} us");
    assert!(one > 4.0 * eight, "1 slot: {one} us, 8 slots: {eight} us");
}

#[test]
fn the_tree_spans_the_ranks_switches_and_skips_the_rest() {
    let scn = |ranks: usize| {
        let w = fat_tree4(ranks, "", "size = \"1KiB\"\n");
        crate::coll::fabric_of(&w).unwrap()
    };
    // all 16 hosts: a core at the root, every pod's first aggregation
    // switch below it, every edge switch below those
    let (s, hosts) = scn(16);
    let t = AggTree::build(&s, &hosts).unwrap();
    assert_eq!((t.len(), t.depth()), (1 + 4 + 8, 3));
    assert!(s.nodes[t.switch[0]].name.contains("core"), "{}", s.nodes[t.switch[0]].name);
    assert_eq!(t.children[0].len(), 4);
    for r in 0..16 {
        assert_eq!(t.children[t.leaf_of[r]].iter().filter(|&&c| c == Child::Rank(r)).count(), 1);
    }
    // two hosts of one edge switch: that switch alone
    let t = AggTree::build(&s, &hosts[..2]).unwrap();
    assert_eq!((t.len(), t.depth(), t.parent[0]), (1, 1, None));
    assert_eq!(t.children[0], [Child::Rank(0), Child::Rank(1)]);
    // one pod: its aggregation switch over its two edges
    let t = AggTree::build(&s, &hosts[..4]).unwrap();
    assert_eq!((t.len(), t.depth()), (3, 2));
    assert!(s.nodes[t.switch[0]].name.contains("agg"), "{}", s.nodes[t.switch[0]].name);
    // one host of pod 0's first edge and one of pod 1's: the edges'
    // single ranks join the aggregation switches, which only forward, so
    // a core aggregates the two ranks directly
    let t = AggTree::build(&s, &[hosts[0], hosts[4]]).unwrap();
    assert_eq!((t.len(), t.children[0].clone()), (1, vec![Child::Rank(0), Child::Rank(1)]));
    // attaching puts one host node per switch, linked to it alone
    let mut s2 = s.clone();
    let full = AggTree::build(&s, &hosts).unwrap();
    let ans = full.attach(&mut s2);
    assert_eq!(ans.len(), 13);
    for (&an, &sw) in ans.iter().zip(&full.switch) {
        assert_eq!(s2.nodes[an].kind, NodeKind::Host);
        let links: Vec<_> = s2.links.iter().filter(|l| l.a == an || l.b == an).collect();
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].a, sw);
        assert_eq!(links[0].rate_bps, 4 * 100_000_000_000, "a k = 4 switch has 4 ports");
    }
}

#[test]
fn a_switch_workload_that_cannot_run_is_refused() {
    let bad = |coll: &str| {
        let text =
            format!("[topology]\nhosts = 4\n[[collective]]\nalgo = \"switch\"\nsize = \"1KiB\"\n{coll}");
        from_str(&text, Path::new(".")).unwrap_err().to_string()
    };
    let e = bad("op = \"all-gather\"\n");
    assert!(e.contains("collective[0].op") && e.contains("all-reduce only"), "{e}");
    let e = bad("qps_per_peer = 2\n");
    assert!(e.contains("collective[0].qps_per_peer"), "{e}");
    let text = "[topology]\nhosts = 4\n[[collective]]\nalgo = \"sharpish\"\nsize = \"1KiB\"\n";
    let e = from_str(text, Path::new(".")).unwrap_err().to_string();
    assert!(e.contains("or switch"), "{e}");
    let text =
        "[topology]\nhosts = 4\n[[lossy_link]]\nrank = 1\nloss = 1.5\n[[collective]]\nsize = \"1KiB\"\n";
    let e = from_str(text, Path::new(".")).unwrap_err().to_string();
    assert!(e.contains("lossy_link.loss"), "{e}");
    // a lossy link on a rank that does not exist: named at run time
    let w =
        wl("[topology]\nhosts = 4\n[[lossy_link]]\nrank = 9\nloss = 0.1\n[[collective]]\nsize = \"1KiB\"\n");
    let e = run(&w, 0, None).unwrap_err().to_string();
    assert!(e.contains("lossy_link") && e.contains("rank 9"), "{e}");
}
