#!/usr/bin/env bash
# roce perf write-bw --loopback with 1, 100, 1,000 and 10,000 QPs (64 KiB
# messages, perftest's defaults otherwise: a buffer per QP, TX depth 128),
# in rounds that go through the four in turn (this machine drifts by tens
# of percent within a minute, so only neighbouring runs compare): the
# median bandwidth of each and its ratio to one QP's (the data path's
# target: >= 0.9 at 10,000).
#
#   scripts/qp-scaling.sh [ROUNDS] [SECONDS]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-5}
secs=${2:-2}
cargo build --release -q -p roce-cli
roce=target/release/roce

bw() {  # QPS -> MB/s of one timed run
    "$roce" perf write-bw --loopback -q "$1" -D "$secs" --json 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["bw_avg"])'
}

declare -A got
for i in $(seq 1 "$rounds"); do
    line="round $i:"
    for q in 1 100 1000 10000; do
        b=$(bw "$q")
        got[$q]="${got[$q]:-} $b"
        line+=$(printf ' q=%s %.0f MB/s' "$q" "$b")
    done
    echo "$line"
done
python3 - "${got[1]}" "${got[100]}" "${got[1000]}" "${got[10000]}" <<'PY'
import statistics, sys
qs = [1, 100, 1000, 10000]
med = {q: statistics.median(float(x) for x in a.split()) for q, a in zip(qs, sys.argv[1:])}
print("median: " + ", ".join(f"q={q} {med[q]:.0f} MB/s ({med[q] / med[1]:.2f}x q=1)" for q in qs))
PY
