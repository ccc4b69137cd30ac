#!/usr/bin/env python3
"""All-reduce on the simulator's ideal fabric against the analytic model.

    scripts/sim-coll-analytic.py                  # n = 8, 64, 512
    NS="8" scripts/sim-coll-analytic.py           # one rank count

The fabric: n hosts on one switch, 100 Gb/s links, 1 us each, PFC on
(lossless), no ECN, no congestion control, MTU 4096. Each algorithm runs
`roce sim coll` (in place, 1 iteration, unchecked: one shared buffer) over
the sizes the CPU budget allows per n (SIZES_<n> overrides them), ring and
Rabenseifner on one QP per peer, the tree on two (one per tree; TREE_QPS
overrides it).

The model (`../shared/collectives-notes.md` s7):
    ring          2(n-1)/n S/B + 2(n-1) alpha
    rabenseifner  2(n-1)/n S/B + 2 lg(n) alpha
    tree          t(n) S/B + 2 lg(n) alpha
where t(n) is what the busiest rank of NCCL's double binary tree sends, in
units of S: half the vector to its parent and to each child, per tree (2
for every even n >= 4: interior in one tree, 1.5 S, a leaf in the other,
0.5 S; NCCL: "each GPU sends ~2S"; the notes' "S/B" counts one tree's
half only). Column `vs 2(n-1)/n`
is every algorithm against the ring's bandwidth term, the bound no host
algorithm can beat. B is the payload rate of a link: the line rate times payload over wire
bytes of one slot message (slot_bytes = 64 KiB with its 64-byte header,
cut in MTU packets of 86 bytes of Ethernet/IP/UDP/BTH/ICRC each, plus
RETH and ImmDt once). alpha is measured per (algorithm, n) on a 1 KiB
all-reduce (ALPHA_SIZE), where the bandwidth term is negligible:
(T - bandwidth term) / steps; every size of the table is then a
prediction, and the error column is (measured - model) / model.
"""
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROCE = os.path.join(ROOT, "target", "release", "roce")
RATE = 100e9
MTU = 4096
SLOT = 64 << 10
DEFAULT_SIZES = {
    8: ["64KiB", "1MiB", "16MiB", "256MiB"],
    64: ["64KiB", "1MiB", "16MiB", "64MiB"],
    512: ["64KiB", "1MiB", "4MiB", "16MiB", "64MiB"],
}


def payload_rate(slot):
    packets = math.ceil(slot / MTU)
    wire = slot + 86 * packets + 20
    return RATE / 8 * (slot - 64) / wire


def size_bytes(s):
    m = re.fullmatch(r"(\d+)(B|KiB|MiB|GiB)", s)
    return int(m.group(1)) << {"B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m.group(2)]


def steps(algo, n):
    lg = math.log2(n)
    return {"ring": 2 * (n - 1), "rabenseifner": 2 * lg, "tree": 2 * lg}[algo]


def btree(n, rank):
    """NCCL's ncclGetBtree (src/graph/trees.cc): (parent, [children])."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    if rank == 0:
        return None, ([bit >> 1] if n > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    low = bit >> 1
    kids = [rank - low] if low else []
    while low:
        if rank + low < n:
            kids.append(rank + low)
            break
        low >>= 1
    return up, kids


def tree_factor(n):
    """The most any rank sends in the double-tree all-reduce, in units of S:
    tree 1 is tree 0 mirrored (n even) or shifted by one (n odd)."""
    best = 0.0
    for r in range(n):
        other = (n - 1 - r) if n % 2 == 0 else (r + n - 1) % n
        sent = 0.0
        for v in (r, other):
            parent, kids = btree(n, v)
            sent += 0.5 * ((parent is not None) + len(kids))
        best = max(best, sent)
    return best


def bw_factor(algo, n):
    return tree_factor(n) if algo == "tree" else 2 * (n - 1) / n


def run(n, algo, sizes, slots, slot, qps):
    w = f"""
[topology]
kind = "switch"
hosts = {n}
rate = "100G"
delay = "1us"
[fabric]
mtu = {MTU}
pfc = true
ecn = false
cc = "none"
[[collective]]
op = "all-reduce"
type = "float"
algo = "{algo}"
sizes = [{", ".join('"%s"' % s for s in sizes)}]
iterations = 1
in_place_only = true
check = false
slots = {slots}
slot_bytes = {slot}
qps_per_peer = {qps}
"""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(w)
        path = f.name
    try:
        out = subprocess.run([ROCE, "sim", "coll", path, "--usage"], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    times = {}
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        f = line.split()
        # size count type redop root | N/A x4 | time algbw busbw wrong
        times[int(f[0])] = float(f[9])
    usage = [l for l in out.splitlines() if l.startswith("# usage")]
    return times, usage[0] if usage else ""


def main():
    if not os.path.exists(ROCE) or os.environ.get("BUILD", "1") == "1":
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "roce-cli"], cwd=ROOT, check=True)
    ns = [int(x) for x in os.environ.get("NS", "8 64 512").split()]
    algos = os.environ.get("ALGOS", "ring rabenseifner tree").split()
    print(f"# ideal fabric: one switch, 100 Gb/s, 1 us links, lossless, no CC, MTU {MTU}")
    print(f"# {'n':>4} {'algorithm':>13} {'size':>10} {'measured us':>12} {'model us':>12} {'error %':>8} {'vs 2(n-1)/n':>11} {'alpha us':>9} {'busbw/line':>10}")
    for n in ns:
        sizes = os.environ.get(f"SIZES_{n}", " ".join(DEFAULT_SIZES.get(n, ["64KiB", "1MiB"]))).split()
        sizes = [os.environ.get("ALPHA_SIZE", "1KiB")] + sizes
        # Large n: smaller slots, so that every rank's regions fit in memory;
        # 8 of them, since 4 x 16 KiB in flight is one bandwidth-delay
        # product (Rabenseifner, 512 ranks, 16 MiB: +19.5% over the model
        # with 4, +1.9% with 8).
        slots, slot = (4, SLOT) if n <= 64 else (8, 16 << 10)
        b = payload_rate(slot)
        for algo in algos:
            # the double tree with a QP per tree (its two transfers to a
            # peer of a shared edge each on QPs of their own, as NCCL's
            # channels); TREE_QPS=1 for one QP per peer
            qps = int(os.environ.get("TREE_QPS", "2")) if algo == "tree" else 1
            times, usage = run(n, algo, sizes, slots, slot, qps)
            s0 = size_bytes(sizes[0])
            alpha = (times[s0] * 1e-6 - bw_factor(algo, n) * s0 / b) / steps(algo, n)
            for s in sizes:
                sb = size_bytes(s)
                model = bw_factor(algo, n) * sb / b + steps(algo, n) * alpha
                t = times[sb] * 1e-6
                busbw = 2 * (n - 1) / n * sb / t
                ring_bound = 2 * (n - 1) / n * sb / b + steps(algo, n) * alpha
                err = "alpha" if sb == s0 else f"{(t - model) / model * 100:+.2f}"
                err_ring = "alpha" if sb == s0 else f"{(t - ring_bound) / ring_bound * 100:+.2f}"
                print(f"  {n:>4} {algo:>13} {s:>10} {t * 1e6:>12.1f} {model * 1e6:>12.1f} {err:>8} {err_ring:>11} {alpha * 1e6:>9.3f} {busbw / (RATE / 8):>10.3f}")
            print(f"#   {algo}: {qps} QP(s) per peer; {usage}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
