#!/usr/bin/env bash
# The fabric simulator's speed on the HPCC baseline's fat-tree WebSearch run
# (`roce sim hpcc`), the working tree against an older commit, in one run:
# both release builds, rounds alternating between them (machines here drift
# by tens of percent within minutes), each round's user CPU, the median of
# each build and the ratio old/new (above 1: the working tree is faster).
# Also says whether the two wrote the same fct.txt and pfc.txt.
#
#   scripts/sim-compare-builds.sh REV [ROUNDS]      (default 5 rounds)
#
# The old build goes to a worktree under ${COMPARE_DIR:-/tmp/roce-compare};
# outputs under ${SPEED_DIR:-target/sim-compare}.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib/worktree.sh
rev=${1:?usage: sim-compare-builds.sh REV [ROUNDS]}
rounds=${2:-5}
base=${BASELINE:-../shared/fabric-sim-baseline}
run=$base/runs/fat_ws30_dcqcn
topo=$base/topologies/fat320_hpcc.txt
[ -d "$run" ] || { echo "no baseline run at $run" >&2; exit 2; }

release_pair "$rev"
out=${SPEED_DIR:-target/sim-compare}
mkdir -p "$out"

cpu() {  # BINARY NAME -> user CPU seconds of one run
    "$1" sim hpcc "$run" --topology "$topo" --out "$out/$2" > /dev/null 2>&1
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["user_cpu_s"])' "$out/$2/summary.json"
}

olds=() news=()
for r in $(seq 1 "$rounds"); do
    o=$(cpu "$old" old); n=$(cpu "$new" new)
    olds+=("$o"); news+=("$n")
    echo "round $r: old $o s, new $n s"
done
python3 - "${olds[*]}" "${news[*]}" <<'EOF'
import statistics, sys
old = [float(x) for x in sys.argv[1].split()]
new = [float(x) for x in sys.argv[2].split()]
mo, mn = statistics.median(old), statistics.median(new)
print(f"median user CPU: old {mo:.2f} s, new {mn:.2f} s; old/new {mo / mn:.3f}")
EOF
for f in fct.txt pfc.txt; do
    if cmp -s "$out/old/$f" "$out/new/$f"; then echo "$f: identical"; else echo "$f: DIFFERS"; fi
done
