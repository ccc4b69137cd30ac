#!/usr/bin/env python3
"""The straggler study on the simulator: each fault kind against theory.

    scripts/sim-coll-stragglers.py                       # every section
    SECTIONS="jitter halfrate" scripts/sim-coll-stragglers.py

Sections (each runs `roce sim coll` on generated workloads; 100 Gb/s
links, 1 us, lossless, MTU 4096):
  delay     one rank's compute delayed by d: iteration time vs d (8 ranks,
            1 MiB ring all-reduce); theory: + d.
  rate      one host link at a fraction f of its rate (8 ranks, 16 MiB
            ring): busbw against f; theory: f x healthy.
  jitter    iid compute jitter sigma = 100 us on every rank (mean 1 ms), n =
            8, 64, 512: mean iteration inflation against c_n sigma, c_n the
            expected maximum of n standard normals.
  halfrate  one host link at half rate: ring busbw against the healthy
            fabric, n = 8, 64 (16 MiB) and 512 (SIZE_512, default 64 MiB:
            about 4 min of CPU); theory: x0.5.
  ecmp      k = 8 fat-tree (128 hosts), ranks placed at random, ring
            all-reduce with 1, 4 and 16 QPs per peer: busbw and the busiest
            switch-to-switch link over the mean.
  stall     a NIC that stops draining for 1 ms in the middle of the run (a
            PFC storm): iteration p50 / max against the healthy run.
  background  storage flows sharing the fabric: 8 hosts of another pod
            write 1 MiB messages (4 in flight each) to one host, while 64
            ranks (k = 8 fat-tree) run a 16 MiB ring: the target a rank's
            host or a host outside the job, in the collectives' class, in
            a class of its own with equal DWRR weights (ETS), or below a
            strict class of the collectives. Ring busbw against the
            healthy run, the background's rate, PFC pauses.
  timelines  per-rank timelines: 8 ranks, one 200 us late (1 MiB ring);
            64 ranks with compute jitter sigma 100 us (64 KiB).
  aggregation  the switches aggregate (algo = "switch") against the host
            ring on the same fat-tree: AGG_SIZE (default 1 GiB) on n = 64
            (k = 8) and 512 (k = 16; AGG_NS="64" skips it, about 20 min of
            CPU each), 8 slots of 64 KiB for both; theory: ring / switch =
            2(n-1)/n. Then the pool: 64 ranks, POOL_SIZE (64 MiB), 1..16
            aggregation slots per switch.

Curves and timelines are written as SVG into PLOTS (default
docs/straggler-study/) with `roce sim plot` and `roce sim coll --timeline`.
"""
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROCE = os.path.join(ROOT, "target", "release", "roce")
LINE = 100e9 / 8
PLOTS = os.environ.get("PLOTS", os.path.join(ROOT, "docs", "straggler-study"))


def plot(name, title, ylabel, header, rows):
    """Writes rows (x, y1, y2, ...) as PLOTS/name.svg through `roce sim plot`."""
    os.makedirs(PLOTS, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join("" if v is None else f"{v:.6g}" for v in r) + "\n")
        path = f.name
    out = os.path.join(PLOTS, name + ".svg")
    try:
        subprocess.run([ROCE, "sim", "plot", path, "--out", out, "--title", title, "--y", ylabel], check=True)
    finally:
        os.unlink(path)
    print(f"# plot: {os.path.relpath(out, ROOT)}")


def timeline(name, body):
    """Runs body with --timeline and keeps its first size's SVG as PLOTS/name.svg."""
    os.makedirs(PLOTS, exist_ok=True)
    w = 'seed = 1\n[fabric]\nmtu = 4096\npfc = true\necn = false\ncc = "none"\n' + body
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.toml")
        with open(path, "w") as f:
            f.write(w)
        subprocess.run([ROCE, "sim", "coll", path, "--timeline", os.path.join(d, "t")], check=True,
                       capture_output=True)
        svg = sorted(x for x in os.listdir(d) if x.endswith(".svg"))[0]
        os.replace(os.path.join(d, svg), os.path.join(PLOTS, name + ".svg"))
    print(f"# timeline: {os.path.relpath(os.path.join(PLOTS, name + '.svg'), ROOT)}")


def sim(body, seed=1):
    w = f'seed = {seed}\n[fabric]\nmtu = 4096\npfc = true\necn = false\ncc = "none"\n' + body
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(w)
        path = f.name
    try:
        p = subprocess.run([ROCE, "sim", "coll", path, "--usage"], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise SystemExit(f"roce sim coll failed:\n{w}\n{p.stderr}{p.stdout}")
    rows, iters, usage, last, trunk = [], [], "", "", ""
    for line in p.stdout.splitlines():
        if not line.startswith("#"):
            f = line.split()
            rows.append({"bytes": int(f[0]), "time": float(f[9]), "busbw": float(f[11])})
        elif re.match(r"#\s+\d+\s+\S+\s+[\d.]+\s+[\d.]+\s+[\d.]+$", line):
            f = line.split()
            iters.append({"p50": float(f[3]), "p99": float(f[4]), "max": float(f[5])})
        elif line.startswith("# usage"):
            usage = line
        elif line.startswith("# Waited for"):
            last = line
        elif line.startswith("# Simulated ") and "busiest" in line:
            trunk = re.search(r"busiest switch link (\d+) frames \(([\d.]+)x", line).groups()
    return rows, iters, usage, last, trunk


def expected_max(n):
    """E[max of n iid standard normals], by numerical integration."""
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))
    h, s = 0.001, 0.0
    x = -10.0
    while x < 10.0:
        s += x * n * cdf(x) ** (n - 1) * phi(x) * h
        x += h
    return s


def coll(op="all-reduce", algo="ring", size="1MiB", ranks=None, iters=5, extra=""):
    r = f"ranks = {ranks}\n" if ranks else ""
    return (f'[[collective]]\nop = "{op}"\nalgo = "{algo}"\nsize = "{size}"\n{r}iterations = {iters}\n'
            f"in_place_only = true\ncheck = false\n{extra}")


def switch(n):
    return f'[topology]\nkind = "switch"\nhosts = {n}\nrate = "100G"\ndelay = "1us"\n'


def slots_for(n):
    return "" if n <= 64 else 'slot_bytes = "16KiB"\n'


def delay():
    print("\n## delay: one rank's compute delayed by d (8 ranks, 1 MiB ring, compute 100 us)")
    print(f"# {'d (us)':>8} {'iter p50 (us)':>14} {'minus d=0':>10} {'waited for':>30}")
    base = None
    points = []
    for d in [0, 50, 100, 200, 400, 800]:
        extra = 'compute = { mean = "100us" }\n' + (f'delay = [{{ rank = 3, by = "{d}us" }}]\n' if d else "")
        _, it, _, last, _ = sim(switch(8) + coll(iters=5, extra=extra))
        p50 = it[0]["p50"]
        base = p50 if base is None else base
        points.append((d, p50, base + d))
        print(f"  {d:>8} {p50:>14.1f} {p50 - base:>10.1f} {last.split('):', 1)[1].strip()[:30]:>30}")
    plot("delay", "8 ranks, 1 MiB ring: one rank's compute delayed by d", "iteration p50 (us)",
         ["d (us)", "simulated", "theory: + d"], points)


def rate():
    print("\n## rate: rank 0's host link at a fraction f of 100 Gb/s (8 ranks, 16 MiB ring)")
    print(f"# {'f':>6} {'busbw GB/s':>11} {'x healthy':>10}")
    base = None
    points = []
    for frac in [1.0, 0.75, 0.5, 0.25, 0.1]:
        slow = "" if frac == 1.0 else f"[[slow_link]]\nrank = 0\nfraction = {frac}\n"
        rows, _, _, _, _ = sim(switch(8) + slow + coll(size="16MiB", iters=1))
        bw = rows[0]["busbw"]
        base = bw if base is None else base
        points.append((frac, bw, base * frac))
        print(f"  {frac:>6} {bw:>11.2f} {bw / base:>10.3f}")
    plot("rate", "8 ranks, 16 MiB ring: one host link at a fraction of its rate", "busbw (GB/s)",
         ["link rate (fraction)", "simulated", "theory: f x healthy"], points)


def timelines():
    print("\n## timelines")
    timeline("timeline-delay", switch(8) + coll(iters=6, extra='compute = { mean = "100us" }\n'
                                                            'delay = [{ rank = 3, by = "200us" }]\n'))
    timeline("timeline-jitter", switch(64) + coll(algo="auto", size="64KiB", iters=8,
                                                  extra='compute = { mean = "1ms", sigma = "100us" }\n'))


def jitter():
    sigma = 100.0
    print(f"\n## jitter: iid compute jitter, mean 1 ms, sigma {sigma:.0f} us (64 KiB all-reduce, auto algorithm)")
    print(f"# {'n':>5} {'iters':>6} {'mean iter s=0':>14} {'mean iter':>10} {'inflation':>10} {'c_n sigma':>10} {'ratio':>7}")
    for n, iters in [(8, 400), (64, 200), (512, 60)]:
        means = []
        for sg in ["0us", f"{int(sigma)}us"]:
            extra = f'compute = {{ mean = "1ms", sigma = "{sg}" }}\n' + slots_for(n)
            body = switch(n) + coll(algo="auto", size="64KiB", iters=iters, extra=extra)
            rows, it, _, _, _ = sim_iters(body)
            means.append(sum(it) / len(it))
        infl = means[1] - means[0]
        want = expected_max(n) * sigma
        print(f"  {n:>5} {iters:>6} {means[0]:>14.1f} {means[1]:>10.1f} {infl:>10.1f} {want:>10.1f} {infl / want:>7.3f}")


def sim_iters(body):
    """Every iteration's time (us) of the in-place half (`--iterations`)."""
    w = 'seed = 1\n[fabric]\nmtu = 4096\npfc = true\necn = false\ncc = "none"\n' + body
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(w)
        path = f.name
    try:
        p = subprocess.run([ROCE, "sim", "coll", path, "--iterations"], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise SystemExit(f"roce sim coll failed:\n{w}\n{p.stderr}")
    its = []
    for line in p.stdout.splitlines():
        if line.startswith("# iterations (us):"):
            its = [float(x) for x in line.split(":", 1)[1].split()]
    return None, its, None, None, None


def halfrate():
    print("\n## halfrate: one host link at half rate (ring all-reduce)")
    print(f"# {'n':>5} {'size':>8} {'busbw healthy':>14} {'busbw slow':>11} {'ratio':>7}")
    for n, size in [(8, "16MiB"), (64, "16MiB"), (512, os.environ.get("SIZE_512", "64MiB"))]:
        bws = []
        # 8 slots of 16 KiB at 512 ranks: 4 are one bandwidth-delay product,
        # which would hold the healthy ring under line rate (0.74 x)
        extra = slots_for(n) + ("slots = 8\n" if n > 64 else "")
        for slow in ["", "[[slow_link]]\nrank = 0\nfraction = 0.5\n"]:
            rows, _, _, _, _ = sim(switch(n) + slow + coll(size=size, iters=1, extra=extra))
            bws.append(rows[0]["busbw"])
        print(f"  {n:>5} {size:>8} {bws[0]:>14.2f} {bws[1]:>11.2f} {bws[1] / bws[0]:>7.3f}")


def ecmp():
    size = os.environ.get("ECMP_SIZE", "16MiB")
    print(f"\n## ecmp: k = 8 fat-tree, 128 ranks placed at random, {size} ring all-reduce")
    print(f"# {'QPs/peer':>8} {'busbw GB/s':>11} {'x line':>7} {'busiest trunk frames':>21} {'/ mean':>7} {'gain':>7}")
    base = None
    for q in [1, 4, 16]:
        body = '[topology]\nkind = "fat-tree"\nk = 8\nrate = "100G"\ndelay = "1us"\n'
        rows, _, usage, _, trunk = sim_fabric(body, "random", coll(size=size, iters=1, extra=f"qps_per_peer = {q}\nslots = {max(2, 8 // q)}\n"))
        bw = rows[0]["busbw"]
        base = bw if base is None else base
        print(f"  {q:>8} {bw:>11.2f} {bw / (LINE / 1e9):>7.3f} {trunk[0]:>21} {trunk[1]:>7} {bw / base:>7.3f}")


def sim_fabric(topo, placement, body):
    w = (f'seed = 1\n[fabric]\nmtu = 4096\npfc = true\necn = false\ncc = "none"\nplacement = "{placement}"\n'
         + topo + body)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(w)
        path = f.name
    try:
        p = subprocess.run([ROCE, "sim", "coll", path, "--usage"], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise SystemExit(f"roce sim coll failed:\n{w}\n{p.stderr}")
    rows, trunk = [], ("0", "0")
    for line in p.stdout.splitlines():
        if not line.startswith("#"):
            f = line.split()
            rows.append({"bytes": int(f[0]), "time": float(f[9]), "busbw": float(f[11])})
        elif line.startswith("# Simulated ") and "busiest" in line:
            trunk = re.search(r"busiest switch link (\d+) frames \(([\d.]+)x", line).groups()
    return rows, None, None, None, trunk


def stall():
    print("\n## stall: rank 5's NIC stops draining for 1 ms at t = 2 ms (8 ranks, 4 MiB ring, 20 iterations)")
    print(f"# {'run':>8} {'iter p50 (us)':>14} {'iter p99 (us)':>14} {'iter max (us)':>14}")
    for name, extra in [("healthy", ""), ("stall", '[[nic_stall]]\nrank = 5\nat = "2ms"\nfor = "1ms"\n')]:
        _, it, _, _, _ = sim(switch(8) + extra + coll(size="4MiB", iters=20))
        print(f"  {name:>8} {it[0]['p50']:>14.1f} {it[0]['p99']:>14.1f} {it[0]['max']:>14.1f}")


def fat_tree(k):
    return f'[topology]\nkind = "fat-tree"\nk = {k}\nrate = "100G"\ndelay = "1us"\n'


def cpu(usage):
    m = re.search(r"user CPU ([\d.]+) s", usage or "")
    return float(m.group(1)) if m else float("nan")


def background():
    size = os.environ.get("BG_SIZE", "16MiB")
    print(f"\n## background: 8 hosts (64..71) write to one host while 64 ranks run a {size} ring (k = 8 fat-tree)")
    print(f"# {'case':>34} {'busbw':>7} {'x healthy':>9} {'background GB/s':>15} {'PFC pauses':>10}")
    base = None
    cases = [
        ("healthy", "", None, 0, 0),
        ("to rank 0's host, same class", "", 0, 0, 0),
        ("to rank 0's host, ETS 1:1", "weights = [1, 1, 1, 1, 1, 1, 1, 1]\n", 0, 3, 0),
        ("to rank 0's host, coll strict above", "", 0, 0, 3),
        ("to host 100 (no rank), same class", "", 100, 0, 0),
    ]
    for name, fabric, to, bgp, cp in cases:
        bgs = "" if to is None else f"[[background]]\nfrom = [64, 65, 66, 67, 68, 69, 70, 71]\nto = {to}\npriority = {bgp}\n"
        body = fat_tree(8) + bgs + coll(size=size, ranks=64, iters=1, extra=f"slots = 8\npriority = {cp}\n")
        w = f'seed = 1\n[fabric]\nmtu = 4096\npfc = true\necn = false\ncc = "none"\n{fabric}' + body
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(w)
            path = f.name
        try:
            p = subprocess.run([ROCE, "sim", "coll", path], capture_output=True, text=True)
        finally:
            os.unlink(path)
        if p.returncode != 0:
            print(f"  {name:>34} failed: {(p.stderr or p.stdout).strip().splitlines()[-1]}")
            continue
        bw, bgbw, pauses = None, 0.0, 0
        for line in p.stdout.splitlines():
            if not line.startswith("#") and line.split():
                bw = float(line.split()[11])
            m = re.search(r"# Background: .* ([\d.]+) GB/s", line)
            if m:
                bgbw = float(m.group(1))
            m = re.search(r"(\d+) PFC pauses", line)
            if m:
                pauses = int(m.group(1))
        base = bw if base is None else base
        print(f"  {name:>34} {bw:>7.2f} {bw / base:>9.3f} {bgbw:>15.2f} {pauses:>10}")


def aggregation():
    size = os.environ.get("AGG_SIZE", "1GiB")
    ns = [int(x) for x in os.environ.get("AGG_NS", "64 512").split()]
    print(f"\n## aggregation: the switches aggregate vs the host ring, {size} all-reduce, fat-tree, 8 slots of 64 KiB")
    print(f"# {'n':>5} {'k':>3} {'ring (us)':>11} {'algbw':>7} {'switch (us)':>12} {'algbw':>7} {'ring/switch':>11}"
          f" {'bound':>6} {'CPU s ring/switch':>18}")
    for n in ns:
        k = 8 if n <= 128 else 16
        res = []
        for algo in ["ring", "switch"]:
            rows, _, usage, _, _ = sim(fat_tree(k) + coll(algo=algo, size=size, ranks=n, iters=1, extra="slots = 8\n"))
            res.append((rows[0], cpu(usage)))
        (r, rc), (s, sc) = res
        algbw = lambda row: row["bytes"] / row["time"] / 1e3
        print(f"  {n:>5} {k:>3} {r['time']:>11.1f} {algbw(r):>7.2f} {s['time']:>12.1f} {algbw(s):>7.2f}"
              f" {r['time'] / s['time']:>11.3f} {2 * (n - 1) / n:>6.3f} {rc:>8.0f}/{sc:<8.0f}")
        sys.stdout.flush()
    size = os.environ.get("POOL_SIZE", "64MiB")
    print(f"\n## aggregation pool: 64 ranks on the k = 8 fat-tree, {size}, slots of 64 KiB per switch")
    print(f"# {'slots':>5} {'pool (KiB)':>10} {'time (us)':>10} {'algbw':>7} {'x line':>7}")
    for slots in [1, 2, 4, 8, 16]:
        rows, _, _, _, _ = sim(fat_tree(8) + coll(algo="switch", size=size, ranks=64, iters=1, extra=f"slots = {slots}\n"))
        bw = rows[0]["bytes"] / rows[0]["time"] / 1e3
        print(f"  {slots:>5} {slots * 64:>10} {rows[0]['time']:>10.1f} {bw:>7.2f} {bw / (LINE / 1e9):>7.3f}")


def main():
    if os.environ.get("BUILD", "1") == "1":
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "roce-cli"], cwd=ROOT, check=True)
    sections = os.environ.get("SECTIONS", "delay rate jitter halfrate ecmp stall timelines background aggregation").split()
    for s in sections:
        globals()[s]()
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
