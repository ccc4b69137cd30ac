#!/usr/bin/env bash
# Stock ib_write_bw over roce's libibverbs (`roce exec`) against
# `roce perf write-bw`, in one run: server and client processes on
# 127.0.0.1 and 127.0.0.2, rounds alternating between the two (machines
# here drift by tens of percent within a minute), the median bandwidth of
# each and the ratio library/native.
#
#   scripts/compare-verbs.sh [ROUNDS] [-- PERFTEST ARGS]
#   scripts/compare-verbs.sh 7 -- -s 65536 -n 50000
#
# Default: 5 rounds of 64 KiB messages, -n 50000. Needs perftest
# (apt-get install perftest); both ends use UDP 4791 and TCP port 18515.
#
# NATIVE_ARGS adds arguments to both `roce perf` ends only, e.g.
# NATIVE_ARGS=--busy-poll (each end spins on its socket).
#
# PIN=1 runs the server on CPU 0 and the client on CPU 1 (taskset), both
# kinds alike. On two cores a short run (perftest's default 5000
# iterations, ~0.1 s) otherwise measures where the kernel first puts the
# driver threads: after perftest's busy-wait clock calibration the two
# ends' threads can share one core for ~60 ms while the other idles.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=5
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rounds=$1; shift; fi
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-s 65536 -n 50000)

cargo build --quiet --release -p roce-cli
roce=target/release/roce

# Waits for a TCP listener on 18515 (the server is ready), at most 30 s.
listening() {
    for _ in $(seq 3000); do
        grep -qE '^ *[0-9]+: [0-9A-F]+:4853 [0-9A-F]+:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
        sleep 0.01
    done
    echo "no server listening on TCP 18515" >&2
    return 1
}

# Runs one server/client pair; prints the client's average MB/s.
run() {  # lib|native
    local server client
    if [ "$1" = lib ]; then
        server=("$roce" exec --addr 127.0.0.1 -- ib_write_bw -d roce0 "${args[@]}")
        client=("$roce" exec --addr 127.0.0.2 -- ib_write_bw -d roce0 "${args[@]}" 127.0.0.1)
    else
        # shellcheck disable=SC2206 # NATIVE_ARGS is split on purpose
        local extra=(${NATIVE_ARGS:-})
        server=("$roce" perf write-bw --bind 127.0.0.1 "${args[@]}" "${extra[@]}")
        client=("$roce" perf write-bw 127.0.0.1 --bind 127.0.0.2 "${args[@]}" "${extra[@]}")
    fi
    if [ "${PIN:-0}" = 1 ]; then
        server=(taskset -c 0 "${server[@]}")
        client=(taskset -c 1 "${client[@]}")
    fi
    timeout 120 "${server[@]}" >/dev/null 2>&1 &
    local pid=$!
    listening
    timeout 120 "${client[@]}" | awk '$1 ~ /^[0-9]+$/ && NF == 5 {print $4}'
    wait "$pid"
}

lib=() native=()
for i in $(seq "$rounds"); do
    lib+=("$(run lib)")
    native+=("$(run native)")
    echo "round $i: library ${lib[-1]} MB/s, roce perf ${native[-1]} MB/s" >&2
done
python3 - "${lib[*]}" "${native[*]}" "${NATIVE_ARGS:-}" <<'PY'
import statistics, sys
lib = [float(x) for x in sys.argv[1].split()]
nat = [float(x) for x in sys.argv[2].split()]
extra = f" {sys.argv[3]}" if sys.argv[3] else ""
a, b = statistics.median(lib), statistics.median(nat)
print(f"ib_write_bw over the library: {a:.2f} MB/s, roce perf write-bw{extra}: {b:.2f} MB/s (medians of {len(lib)}), ratio {a / b:.3f}")
PY
