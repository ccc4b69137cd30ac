#!/usr/bin/env bash
# Large RDMA READs on one host with the kernel's receive buffer as it is
# (net.core.rmem_max untouched): stock perftest under `roce exec` on
# loopback, with the packets each side sent and the other received from
# the devices' counters (ROCE_COUNTERS=1), for the working tree and, with
# REV, for an older build; then `roce perf read-bw` and `write-bw` against
# REV in one run (alternating rounds, median ratio, as
# scripts/compare-builds.sh does). Both builds are copied aside first, so
# the tree may change while it runs.
#
#   scripts/read-burst.sh [REV] [ROUNDS]
#   scripts/read-burst.sh 1893eb7 5
#
# Lost = packets sent by both devices - packets received by both (loopback:
# nothing else carries them). Needs perftest (apt-get install perftest).
# SKIP_BUILD=1 measures the builds already copied aside by an earlier run.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib/worktree.sh
rev=${1:-}
rounds=${2:-5}
export COMPARE_DIR=${COMPARE_DIR:-/tmp/roce-compare-read-burst}

for t in ib_read_lat ib_read_bw; do
    command -v "$t" >/dev/null || { echo "needs $t (apt-get install perftest)" >&2; exit 1; }
done
echo "net.core.rmem_max = $(cat /proc/sys/net/core/rmem_max)"

if [ -z "${SKIP_BUILD:-}" ]; then
cargo build --quiet --release -p roce-cli
mkdir -p "$COMPARE_DIR/new/deps"
cp target/release/roce "$COMPARE_DIR/new/roce"
cp target/release/deps/libroce_ibverbs.so "$COMPARE_DIR/new/deps/"
fi
bins=("new:$COMPARE_DIR/new/roce")
if [ -n "$rev" ]; then
    old_tree=$COMPARE_DIR/tree
    checkout_old "$old_tree" "$rev"
    if [ -z "${SKIP_BUILD:-}" ]; then
        CARGO_TARGET_DIR=$COMPARE_DIR/target cargo build --quiet --release -p roce-cli \
            --manifest-path "$old_tree/Cargo.toml"
    fi
    bins+=("old($rev):$COMPARE_DIR/target/release/roce")
fi

free_port() {  # PROTO -> a port the kernel just handed out (and freed)
    python3 -c "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_$1); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# stock BIN NAME TOOL ARGS... : one server/client run; prints a summary line.
stock() {
    local bin=$1 name=$2 tool=$3; shift 3
    local tcp udp
    tcp=$(free_port STREAM); udp=$(free_port DGRAM)
    ROCE_COUNTERS=1 "$bin" exec --addr 127.0.0.1 --udp-port "$udp" -- \
        "$tool" -d roce0 -p "$tcp" "$@" >"$out/server" 2>&1 &
    local server=$!
    for _ in $(seq 1 500); do
        grep -qi ":$(printf '%04X' "$tcp") 00000000:0000 0A" /proc/net/tcp && break
        sleep 0.02
    done
    local start=$SECONDS
    if ! ROCE_COUNTERS=1 "$bin" exec --addr 127.0.0.2 --udp-port "$udp" -- \
        "$tool" -d roce0 -p "$tcp" "$@" 127.0.0.1 >"$out/client" 2>&1; then
        echo "$name $tool $*: client failed:"; cat "$out/client"; kill "$server" 2>/dev/null || true
        return 1
    fi
    wait "$server" || { echo "$name $tool $*: server failed:"; cat "$out/server"; return 1; }
    python3 - "$name" "$tool $*" "$((SECONDS - start))" "$out/server" "$out/client" <<'EOF'
import re, sys
name, what, secs, *files = sys.argv[1:]
tot = {}
for f in files:
    text = open(f).read()
    for line in text.splitlines():
        if "counters:" in line:
            for k, v in re.findall(r"(\w+)=(\d+)", line):
                tot[k] = tot.get(k, 0) + int(v)
client = open(files[1]).read().splitlines()
rows = [l for l in client if re.match(r"^\s*\d+\s+\d+\s", l)]
sent, rcvd = tot.get("sent_pkts", 0), tot.get("rcvd_pkts", 0)
keys = ["completer_retry_err", "read_tail_rerequests", "read_budget_waits",
        "out_of_seq_response", "duplicate_response", "duplicate_request"]
extra = " ".join(f"{k}={tot.get(k, 0)}" for k in keys)
print(f"{name:>14} {what}: {secs}s, sent {sent} received {rcvd} lost {sent - rcvd}; {extra}")
print(f"{'':>14}   result: {rows[-1].strip() if rows else '(no result row)'}")
EOF
}

for b in "${bins[@]}"; do
    name=${b%%:*}; bin=${b#*:}
    stock "$bin" "$name" ib_read_lat -s 8388608 -n 200
    stock "$bin" "$name" ib_read_bw -s 8388608 -q 4
done

bw() {  # BINARY PERF-ARGS... -> MB/s of one run
    local bin=$1; shift
    "$bin" perf "$@" --loopback --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["bw_avg"])'
}

compare() {  # PERF-ARGS...: alternating rounds of the old and new build
    local olds=() news=() o n
    for i in $(seq 1 "$rounds"); do
        o=$(bw "$COMPARE_DIR/target/release/roce" "$@"); n=$(bw "$COMPARE_DIR/new/roce" "$@")
        olds+=("$o"); news+=("$n")
    done
    python3 - "$*" "${olds[*]}" "${news[*]}" <<'EOF'
import statistics, sys
what = sys.argv[1]
old = [float(x) for x in sys.argv[2].split()]
new = [float(x) for x in sys.argv[3].split()]
ratios = [n / o for o, n in zip(old, new)]
print(f"roce perf {what} --loopback, {len(old)} rounds: old {statistics.median(old):.0f} MB/s, "
      f"new {statistics.median(new):.0f} MB/s; new/old median of rounds {statistics.median(ratios):.3f} "
      f"(range {min(ratios):.3f}-{max(ratios):.3f})")
EOF
}

if [ -n "$rev" ]; then
    compare read-bw -n 20000
    compare write-bw -n 20000
fi
