#!/usr/bin/env bash
# Compares the engine benchmark and the vs_udp benchmark of the working tree
# with an older commit, in one run: both builds' bench binaries, rounds
# alternating between them (machines here drift by tens of percent within a
# minute, so only neighbouring runs compare), the median of each figure per
# build and the ratio new/old.
#
#   scripts/compare-benches.sh REV [ROUNDS]
#   scripts/compare-benches.sh 9230cec 5
#
# Figures: the engine bench's ns per message of each case (lower is better;
# criterion runs shortened to 1 s warm-up + 3 s measurement), and vs_udp's
# two same-run ratios, roce write-bw / raw UDP (higher is better) and roce
# write-lat / raw UDP (lower is better). `BENCHES=engine` or `BENCHES=vs_udp`
# runs one of them. The old build goes to a worktree under
# ${COMPARE_DIR:-/tmp/roce-compare}.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib/worktree.sh
rev=${1:?usage: compare-benches.sh REV [ROUNDS]}
rounds=${2:-5}
benches=${BENCHES:-"engine vs_udp"}

dir=${COMPARE_DIR:-/tmp/roce-compare}
old_tree=$dir/tree
commit=$(git rev-parse --verify "$rev^{commit}")
checkout_old "$old_tree" "$rev"

# Builds one bench of one tree; prints the path of its executable.
bench_exe() {  # MANIFEST TARGET_DIR PACKAGE BENCH
    CARGO_TARGET_DIR=$2 cargo bench --quiet --no-run --message-format=json \
        --manifest-path "$1" -p "$3" --bench "$4" 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])
' "$4"
}

echo "building $rev ($commit) and the working tree (bench profile)" >&2
declare -A old new
for b in $benches; do
    pkg=roce-proto
    [ "$b" = vs_udp ] && pkg=roce
    old[$b]=$(bench_exe "$old_tree/Cargo.toml" "$dir/target" $pkg "$b")
    new[$b]=$(bench_exe Cargo.toml target $pkg "$b")
    [ -x "${old[$b]}" ] && [ -x "${new[$b]}" ] || { echo "error: could not build bench $b" >&2; exit 1; }
done

# One run of a bench binary -> "name=value" lines.
figures() {  # BENCH EXE
    case $1 in
    engine)
        "$2" --bench --warm-up-time 1 --measurement-time 3 2>/dev/null |
            sed -nE 's|^([A-Za-z0-9_]+)/engine: .*, ([0-9.]+) ns/msg,.*|engine.\1.ns_per_msg=\2|p'
        ;;
    vs_udp)
        "$2" 2>/dev/null | awk '
            /^throughput/ { part = "bw" } /^latency/ { part = "lat" }
            /ratio roce \/ raw UDP:/ { sub(/.*ratio roce \/ raw UDP: /, ""); print "vs_udp." part "_ratio=" $1 }'
        ;;
    esac
}

out=$(mktemp)
for i in $(seq 1 "$rounds"); do
    for b in $benches; do
        figures "$b" "${old[$b]}" | sed "s/^/old $i /" >>"$out"
        figures "$b" "${new[$b]}" | sed "s/^/new $i /" >>"$out"
    done
    echo "round $i of $rounds done" >&2
done
python3 - "$out" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sys.argv[1]):
    build, rnd, kv = line.split()
    k, v = kv.split("=")
    runs[k][int(rnd)][build] = float(v)
print(f"{'figure':34} {'old':>10} {'new':>10} {'new/old':>8}  (median of rounds; per-round range)")
for k in sorted(runs):
    pairs = [(r["old"], r["new"]) for r in runs[k].values() if "old" in r and "new" in r]
    if not pairs:
        continue
    o = statistics.median(p[0] for p in pairs)
    n = statistics.median(p[1] for p in pairs)
    per_round = [b / a for a, b in pairs]
    better = "lower" if ("ns_per_msg" in k or "lat" in k) else "higher"
    print(f"{k:34} {o:10.3f} {n:10.3f} {n / o:8.3f}  ({min(per_round):.3f}-{max(per_round):.3f}; "
          f"{better} is better, {len(pairs)} rounds)")
EOF
rm -f "$out"
