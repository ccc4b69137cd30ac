#!/usr/bin/env bash
# Compares `roce perf ... --loopback` bandwidth of the working tree with an
# older commit, in one run: both release builds, rounds alternating between
# them (machines here drift by tens of percent within a minute), the median
# bandwidth of each and the ratio new/old.
#
#   scripts/compare-builds.sh REV [ROUNDS] [-- PERF ARGS]
#   scripts/compare-builds.sh HEAD~3 9
#   scripts/compare-builds.sh 40007bc 7 -- send-bw -s 4096 -n 20000
#
# Default test: write-bw -n 20000 (the README's main job, longer). The old
# build goes to a worktree under ${COMPARE_DIR:-/tmp/roce-compare}.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib/worktree.sh
rev=${1:?usage: compare-builds.sh REV [ROUNDS] [-- PERF ARGS]}
shift
rounds=7
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rounds=$1; shift; fi
[ "${1:-}" = "--" ] && shift
perf_args=("$@")
[ ${#perf_args[@]} -eq 0 ] && perf_args=(write-bw -n 20000)

release_pair "$rev"

bw() {  # BINARY -> MB/s of one run
    "$1" perf "${perf_args[@]}" --loopback --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["bw_avg"])'
}

olds=(); news=()
for i in $(seq 1 "$rounds"); do
    o=$(bw "$old"); n=$(bw "$new")
    olds+=("$o"); news+=("$n")
    printf 'round %d: old %.0f MB/s, new %.0f MB/s, new/old %.3f\n' "$i" "$o" "$n" "$(python3 -c "print($n / $o)")"
done
python3 - "${olds[*]}" "${news[*]}" <<'EOF'
import statistics, sys
old = [float(x) for x in sys.argv[1].split()]
new = [float(x) for x in sys.argv[2].split()]
ratios = [n / o for o, n in zip(old, new)]
print(f"median: old {statistics.median(old):.0f} MB/s, new {statistics.median(new):.0f} MB/s; "
      f"new/old: median of rounds {statistics.median(ratios):.3f} "
      f"(range {min(ratios):.3f}-{max(ratios):.3f}), ratio of medians "
      f"{statistics.median(new) / statistics.median(old):.3f}")
EOF
