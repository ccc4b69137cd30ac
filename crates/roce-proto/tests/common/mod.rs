//! A two-engine loop for directed tests: packets move between the engines in
//! memory, optionally through a filter that drops, reorders or inspects them.
#![allow(dead_code)]

use core::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use roce_proto::*;
use roce_wire::Psn;

pub const A: usize = 0;
pub const B: usize = 1;

pub struct Pair {
    pub e: [Engine; 2],
    pub now: Instant,
    pub ip: [IpAddr; 2],
    pub pd: [PdId; 2],
    pub cq: [CqId; 2],
    /// Packets sent so far: (from, bytes).
    pub trace: Vec<(usize, Vec<u8>)>,
}

pub struct Conn {
    pub qpn: [u32; 2],
}

pub struct Region {
    /// The engine it is registered with (`A` or `B`).
    pub side: usize,
    pub buf: Arc<MemBuf>,
    pub keys: MrKeys,
}

impl Pair {
    pub fn new(seed: u64) -> Pair {
        let ip = [IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))];
        let mut e = [
            Engine::new(EngineConfig::new(vec![ip[0]]), seed),
            Engine::new(EngineConfig::new(vec![ip[1]]), seed + 1),
        ];
        let pd = [e[0].alloc_pd(), e[1].alloc_pd()];
        let cq = [e[0].create_cq(4096).unwrap(), e[1].create_cq(4096).unwrap()];
        Pair { e, now: Instant::ZERO, ip, pd, cq, trace: Vec::new() }
    }

    pub fn region(&mut self, side: usize, len: usize, iova: u64, access: Access) -> Region {
        let buf = MemBuf::new(len);
        let keys = self.e[side]
            .reg_mr(
                self.pd[side],
                MrSpec { buf: buf.clone(), offset: 0, length: len, iova: Some(iova), access },
            )
            .unwrap();
        Region { side, buf, keys }
    }

    /// Writes `data` at `off` of a region, through its engine.
    pub fn put(&mut self, r: &Region, off: usize, data: &[u8]) {
        self.e[r.side].mr_write(r.keys.lkey, off, data).unwrap();
    }

    /// Bytes `[off, off + len)` of a region, through its engine.
    pub fn get(&mut self, r: &Region, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.e[r.side].mr_read(r.keys.lkey, off, &mut v).unwrap();
        v
    }

    /// All of a region.
    pub fn mem(&mut self, r: &Region) -> Vec<u8> {
        self.get(r, 0, r.keys.length as usize)
    }

    /// The 64-bit word at `off` of a region, in host order (as atomics
    /// leave it).
    pub fn word(&mut self, r: &Region, off: usize) -> u64 {
        u64::from_ne_bytes(self.get(r, off, 8).try_into().unwrap())
    }

    pub fn qp_init(&self, side: usize, t: QpType) -> QpInitAttr {
        QpInitAttr {
            qp_type: t,
            pd: self.pd[side],
            send_cq: self.cq[side],
            recv_cq: self.cq[side],
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }

    /// Creates and connects an RC QP pair with the given attributes.
    pub fn connect(&mut self, mtu: PathMtu, psn: [u32; 2], tune: impl Fn(&mut ConnectAttr)) -> Conn {
        let qpn = [
            self.e[0].create_qp(self.qp_init(0, QpType::Rc)).unwrap(),
            self.e[1].create_qp(self.qp_init(1, QpType::Rc)).unwrap(),
        ];
        for s in 0..2 {
            let o = 1 - s;
            let mut c = ConnectAttr {
                mtu,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 1,
                timeout: 10,
                max_rd_atomic: 4,
                ..ConnectAttr::new(AddressVector::new(self.ip[o]), qpn[o], Psn::new(psn[o]), Psn::new(psn[s]))
            };
            tune(&mut c);
            self.e[s].connect_qp(qpn[s], &c).unwrap();
        }
        Conn { qpn }
    }

    fn meta(&self, from: usize, tx: &Transmit) -> DatagramMeta {
        let _ = from;
        tx.meta
    }

    /// Moves packets until both engines are quiet, letting `filter` decide
    /// (by sender and packet index) whether each packet is delivered.
    /// Advances time to fire timers when the wire is idle. Stops after
    /// `max_steps` packets or when nothing is left to do.
    pub fn run_with(&mut self, mut filter: impl FnMut(usize, &[u8]) -> bool, max_steps: usize) {
        let mut buf = vec![0u8; 9000];
        let mut steps = 0;
        loop {
            let mut moved = false;
            for s in 0..2 {
                while let Some(tx) = self.e[s].poll_transmit(self.now, &mut buf) {
                    let bytes = buf[..tx.len].to_vec();
                    self.trace.push((s, bytes.clone()));
                    steps += 1;
                    moved = true;
                    if filter(s, &bytes) {
                        let meta = self.meta(s, &tx);
                        self.e[1 - s].handle_datagram(self.now, &meta, &bytes);
                    }
                    if steps >= max_steps {
                        return;
                    }
                }
            }
            if !moved {
                let next = [self.e[0].poll_timeout(), self.e[1].poll_timeout()].into_iter().flatten().min();
                match next {
                    Some(t) => {
                        self.now = self.now.max(t);
                        self.e[0].handle_timeout(self.now);
                        self.e[1].handle_timeout(self.now);
                    }
                    None => return,
                }
            }
        }
    }

    pub fn run(&mut self) {
        self.run_with(|_, _| true, 1_000_000);
    }

    pub fn poll(&mut self, side: usize) -> Vec<Wc> {
        let mut out = vec![Wc::EMPTY; 256];
        let n = self.e[side].poll_cq(self.cq[side], &mut out).unwrap();
        out.truncate(n);
        out
    }
}

pub fn sge(r: &Region, off: u64, len: u32) -> Sge {
    Sge { addr: r.keys.addr + off, length: len, lkey: r.keys.lkey }
}
