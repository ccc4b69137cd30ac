//! The shadow model of memory: every host's buffer as it must be at the
//! end, with a mask of bytes whose value is not predicted (the parts of a
//! UD receive's GRH other than the addresses). Compared byte for byte.

use crate::workload::{Plan, Seg};

use super::findings::{FailureKind, Findings};

/// Expected final content of every host buffer.
pub struct Shadow {
    expect: Vec<Vec<u8>>,
    care: Vec<Vec<bool>>,
}

impl Shadow {
    /// Starts from the plan's initial images.
    pub fn new(plan: &Plan) -> Shadow {
        Shadow {
            expect: plan.hosts.iter().map(|h| h.init.clone()).collect(),
            care: plan.hosts.iter().map(|h| vec![true; h.init.len()]).collect(),
        }
    }

    /// Bytes of a contiguous segment become `data`.
    pub fn write(&mut self, plan: &Plan, seg: &Seg, data: &[u8]) {
        debug_assert_eq!(data.len(), seg.len as usize);
        let o = plan.buf_off(seg);
        self.expect[seg.mr.host][o..o + data.len()].copy_from_slice(data);
    }

    /// `data` spread over `sges` in order (as a NIC scatters a message);
    /// where `care` is false the byte is not predicted.
    pub fn scatter(&mut self, plan: &Plan, sges: &[Seg], data: &[u8], care: Option<&[bool]>) {
        let mut done = 0;
        for s in sges {
            if done == data.len() {
                break;
            }
            let n = (s.len as usize).min(data.len() - done);
            let (h, o) = (s.mr.host, plan.buf_off(s));
            self.expect[h][o..o + n].copy_from_slice(&data[done..done + n]);
            if let Some(c) = care {
                self.care[h][o..o + n].copy_from_slice(&c[done..done + n]);
            }
            done += n;
        }
        debug_assert_eq!(done, data.len(), "scatter beyond the SGEs");
    }

    /// The bytes of `sges` are not predicted.
    pub fn forget(&mut self, plan: &Plan, sges: &[Seg]) {
        for s in sges {
            let o = plan.buf_off(s);
            self.care[s.mr.host][o..o + s.len as usize].fill(false);
        }
    }

    /// Reports every run of differing bytes (at most a few per host).
    pub fn compare(&self, plan: &Plan, actual: &[Vec<u8>], f: &mut Findings) {
        for (h, (exp, act)) in self.expect.iter().zip(actual).enumerate() {
            let care = &self.care[h];
            let mut i = 0;
            let mut runs = 0;
            while i < exp.len() {
                if !care[i] || exp[i] == act[i] {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < exp.len() && care[i] && exp[i] != act[i] {
                    i += 1;
                }
                runs += 1;
                if runs <= 3 {
                    f.fail(FailureKind::Memory, describe(plan, h, start, i, exp, act));
                }
            }
            if runs > 3 {
                f.fail(FailureKind::Memory, format!("host {h}: {} more differing ranges", runs - 3));
            }
        }
    }
}

/// "host 1 MR 3 (Recv) +0x40..+0x60: expected .., got .."
fn describe(plan: &Plan, h: usize, start: usize, end: usize, exp: &[u8], act: &[u8]) -> String {
    let mr =
        plan.hosts[h].mrs.iter().enumerate().find(|(_, m)| (m.buf_off..m.buf_off + m.len).contains(&start));
    let place = match mr {
        Some((i, m)) => format!("MR {i} ({:?}) +{:#x}..+{:#x}", m.kind, start - m.buf_off, end - m.buf_off),
        None => format!("unregistered bytes {start:#x}..{end:#x}"),
    };
    let show = |b: &[u8]| b.iter().take(16).map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ");
    format!(
        "host {h} {place} ({} bytes differ): expected {}, got {}",
        end - start,
        show(&exp[start..end]),
        show(&act[start..end])
    )
}

/// `len` bytes at `offset` of the logical concatenation of `sges`, read
/// from host images `mem`.
pub fn gather(plan: &Plan, mem: &[Vec<u8>], sges: &[Seg], mut offset: usize, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for s in sges {
        if out.len() == len {
            break;
        }
        let sl = s.len as usize;
        if offset >= sl {
            offset -= sl;
            continue;
        }
        let n = (sl - offset).min(len - out.len());
        let o = plan.buf_off(s) + offset;
        out.extend_from_slice(&mem[s.mr.host][o..o + n]);
        offset = 0;
    }
    out
}
