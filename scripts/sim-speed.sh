#!/usr/bin/env bash
# The fabric simulator's speed on the HPCC baseline's fat-tree WebSearch run
# (`roce sim baseline --only fat_ws30_dcqcn`), for two builds of this tree in
# one run, rounds alternating (machines here drift by tens of percent within
# minutes):
#
#   release  `cargo build --release`
#   pgo      the `fast` profile (fat LTO, one codegen unit) with profile-
#            guided optimisation, trained on the baseline's seven other runs,
#            the built-in incast and PFC-storm scenarios, and 400 random
#            flows (seeded) on the fat-tree with the measured run's
#            config.txt (never on the measured run's flows)
#
#   scripts/sim-speed.sh [ROUNDS]        (default 3)
#
# Prints each round's user CPU, the median of each build, its speed-up over
# the baseline's user CPU (the baseline README's figure, as `roce sim
# baseline` reports it), max RSS and packet-hops per CPU-second, and checks
# that both builds wrote the same fct.txt and pfc.txt. Needs llvm-profdata
# of rustc's LLVM (`rustup component add llvm-tools`). Work files go under
# ${SPEED_DIR:-target/sim-speed}.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-3}
run=fat_ws30_dcqcn
dir=${SPEED_DIR:-target/sim-speed}
dir=$(mkdir -p "$dir" && cd "$dir" && pwd)

host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
    echo "error: $profdata not found; install it with: rustup component add llvm-tools" >&2
    exit 1
fi
baseline=$(cd .. && pwd)/shared/fabric-sim-baseline
if [ ! -d "$baseline/runs/$run" ]; then
    echo "error: $baseline/runs/$run not found (the shared baseline beside the repository)" >&2
    exit 1
fi

echo "building release" >&2
cargo build --quiet --release -p roce-cli
echo "building the instrumented fast build and training it" >&2
rm -rf "$dir/profiles"
RUSTFLAGS="-Cprofile-generate=$dir/profiles" \
    cargo build --quiet --profile fast -p roce-cli --target-dir "$dir/gen"
for r in "$baseline"/runs/*/; do
    r=$(basename "$r")
    [ "$r" = "$run" ] && continue
    "$dir/gen/fast/roce" sim baseline "$baseline" --only "$r" --out "$dir/train" >/dev/null
done
for b in incast pfc-storm; do
    "$dir/gen/fast/roce" sim run --builtin "$b" --out "$dir/train/$b" >/dev/null
done
# Random flows on the fat-tree: hosts 0..319, sizes log-uniform from 1 KB
# to 3 MB, starts spread over 2 ms, the measured run's config.
fat=$dir/train-fat
mkdir -p "$fat"
cp "$baseline/runs/$run/config.txt" "$fat/"
python3 - "$fat/flow.txt" <<'PY'
import random, sys
r = random.Random(1)
flows = []
for _ in range(400):
    src = r.randrange(320)
    dst = r.choice([h for h in range(320) if h != src])
    size = int(10 ** r.uniform(3, 6.5))
    flows.append((2.0 + r.uniform(0, 0.002), src, dst, size))
flows.sort()
with open(sys.argv[1], "w") as f:
    f.write(f"{len(flows)}\n")
    for start, src, dst, size in flows:
        f.write(f"{src} {dst} 3 100 {size} {start:.9f}\n")
PY
topology=$(awk '$1 == "TOPOLOGY_FILE" { print $2 }' "$fat/config.txt")
"$dir/gen/fast/roce" sim hpcc "$fat" --topology "$baseline/topologies/$topology" --out "$dir/train/fat" >/dev/null
"$profdata" merge -o "$dir/roce.profdata" "$dir/profiles"
echo "building the fast build with the profile" >&2
RUSTFLAGS="-Cprofile-use=$dir/roce.profdata" \
    cargo build --quiet --profile fast -p roce-cli --target-dir "$dir/use"

declare -A bin=([release]=target/release/roce [pgo]=$dir/use/fast/roce)
for ((i = 1; i <= rounds; i++)); do
    for b in release pgo; do
        "${bin[$b]}" sim baseline "$baseline" --only "$run" --out "$dir/out-$b" >"$dir/log-$b-$i.txt"
        grep -m1 '  user CPU' "$dir/log-$b-$i.txt" | sed "s/^ */round $i $b: /; s/; output in.*//"
    done
done
for f in fct.txt pfc.txt; do
    if ! cmp -s "$dir/out-release/$run/$f" "$dir/out-pgo/$run/$f"; then
        echo "error: the two builds wrote different $run/$f" >&2
        exit 1
    fi
done
echo "both builds wrote the same fct.txt and pfc.txt"
python3 - "$dir" "$rounds" "$run" <<'PY'
import statistics, sys
d, rounds, run = sys.argv[1], int(sys.argv[2]), sys.argv[3]
med = {}
for b in ("release", "pgo"):
    rows = []
    for i in range(1, rounds + 1):
        for line in open(f"{d}/log-{b}-{i}.txt"):
            f = line.split()
            if f and f[0] == run:
                # run, base ms, ours ms, ratio, mean r, slowdown, base CPU,
                # our CPU, speed-up, RSS MiB, Mhop/s, ending
                rows.append((float(f[7]), float(f[6]), float(f[9]), float(f[10])))
    cpu = statistics.median(r[0] for r in rows)
    base, rss = rows[0][1], max(r[2] for r in rows)
    mhops = statistics.median(r[3] for r in rows)
    med[b] = cpu
    print(f"{b:8} median user CPU {cpu:6.2f} s  speed-up {base / cpu:5.1f}x over {base} s  "
          f"max RSS {rss:.1f} MiB  {mhops:.2f} Mhop/s")
print(f"pgo / release CPU: {med['pgo'] / med['release']:.3f}")
PY
