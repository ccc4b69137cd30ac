#!/usr/bin/env bash
# NVMe-oF over roce against the transport it runs on, in one run, on
# loopback (target on 127.0.0.2, initiator on 127.0.0.3, a memory
# namespace), each figure next to its baseline and their ratio:
#
#   4 KiB random read, QD1: latency p50 vs `roce perf read-lat -s 4096`
#     (median; a read is a command SEND, a data WRITE and a response SEND)
#   4 KiB random read, QD32 x 2 queues: IOPS vs `roce perf send-bw -s 4096`
#     messages per second
#   128 KiB sequential read, QD8: bandwidth vs `roce perf write-bw -s 131072`,
#     run as a user runs it (server and client, two processes on two
#     addresses, as the target and the host are) and, for reference, in one
#     process (--loopback). The three alternate for ROUNDS rounds and each
#     figure is the median of its rounds: on a shared 2-core machine one
#     run of either can be off by half.
#
#   scripts/nvmf-perf.sh [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-5}
rounds=${2:-3}
cargo build --quiet --release -p roce-cli
R=target/release/roce
nqn=nqn.2026-11.io.roce:perf
$R nvmf target --nqn "$nqn" --namespace mem:1G --addr 127.0.0.2 >/tmp/roce-nvmf-perf-target.log 2>&1 &
tpid=$!
trap 'kill $tpid 2>/dev/null; wait $tpid 2>/dev/null' EXIT
for _ in $(seq 50); do grep -q "discovery:" /tmp/roce-nvmf-perf-target.log && break; sleep 0.1; done

field() { # perftest table: the value of column $2 on the row after the header
    awk -v c="$2" '/#bytes/ {h=1; next} h && $1 ~ /^[0-9]+$/ && NF > 3 {print $c; exit}' <<<"$1"
}
perf() { $R nvmf perf 127.0.0.2 --bind 127.0.0.3 --nqn "$nqn" -t "$secs" "$@" | awk '/^result/'; }
get() { awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' <<<"$1"; }

lat=$($R perf read-lat -s 4096 -n 5000 --loopback 2>&1)
base_lat=$(field "$lat" 5)   # t_typical (the median), usec
qd1=$(perf --rw randread -b 4096 -q 1)
p50=$(get "$qd1" p50_us)

# send-bw --loopback sometimes stalls ("nothing happened for 10 s"): the
# baseline is then n/a, and said so, rather than the run lost.
sbw=$($R perf send-bw -s 4096 -n 20000 --loopback 2>&1) || echo "send-bw baseline failed: $(tail -2 <<<"$sbw" | head -1)" >&2
base_rate=$(field "$sbw" 5)  # MsgRate, Mpps
base_rate=${base_rate:-nan}
qd32=$(perf --rw randread -b 4096 -q 32 --queues 2)
iops=$(get "$qd32" iops)

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
wport=$((20000 + RANDOM % 20000))
bws=() pairs=() loops=()
for r in $(seq "$rounds"); do
    seq=$(perf --rw read -b 131072 -q 8)
    bws+=("$(awk -v m="$(get "$seq" bw_mib_s)" 'BEGIN {printf "%.1f", m * 1048576 / 1e6}')")
    $R perf write-bw --bind 127.0.0.4 -p $((wport + r)) -s 131072 -D "$secs" >/dev/null 2>&1 &
    wpid=$!
    pairs+=("$(field "$($R perf write-bw 127.0.0.4 --bind 127.0.0.5 -p $((wport + r)) -s 131072 -D "$secs" 2>&1)" 4)")
    wait $wpid || true
    loops+=("$(field "$($R perf write-bw -s 131072 -D "$secs" --loopback 2>&1)" 4)")
done
bw=$(printf '%s\n' "${bws[@]}" | median)
base_bw=$(printf '%s\n' "${pairs[@]}" | median)
loop_bw=$(printf '%s\n' "${loops[@]}" | median)
echo "128K seq read QD8, MB/s by round: nvmf ${bws[*]}; write-bw pair ${pairs[*]}; write-bw --loopback ${loops[*]}"

printf '%-44s %12s %12s %8s\n' "figure" "nvmf" "baseline" "ratio"
awk -v a="$p50" -v b="$base_lat" 'BEGIN {printf "%-44s %9.1f us %9.1f us %8.2f  (target <= 2)\n", "4K randread QD1 p50 / read-lat median", a, b, a / b}'
awk -v a="$iops" -v b="$base_rate" 'BEGIN {if (b == "nan") printf "%-44s %12.0f %12s %8s\n", "4K randread QD32x2 IOPS / send-bw msg/s", a, "n/a", "n/a"; else printf "%-44s %12.0f %12.0f %8.2f\n", "4K randread QD32x2 IOPS / send-bw msg/s", a, b * 1e6, a / (b * 1e6)}'
awk -v a="$bw" -v b="$base_bw" 'BEGIN {printf "%-44s %7.1f MB/s %7.1f MB/s %8.2f  (target >= 0.8)\n", "128K seq read QD8 / write-bw 128K (pair)", a, b, a / b}'
awk -v a="$bw" -v b="$loop_bw" 'BEGIN {printf "%-44s %7.1f MB/s %7.1f MB/s %8.2f\n", "128K seq read QD8 / write-bw --loopback", a, b, a / b}'
