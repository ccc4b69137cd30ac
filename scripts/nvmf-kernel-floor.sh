#!/usr/bin/env bash
# The pairing of scripts/nvmf-perf.sh through the Linux kernel's NVMe-oF
# host (nvme-rdma over Soft-RoCE in the rxe lab VM) against roce's target
# (a memory namespace, in the lab's network namespace on 10.47.0.3), as a
# floor: the VM is emulated (TCG, no KVM here), so its figures are not a
# baseline, only what the kernel host reaches against our target.
#
# The VM has no fio; the figures come from busybox dd with O_DIRECT:
#   4 KiB reads at QD1: mean latency (one dd, 4 KiB blocks in turn)
#   4 KiB reads at QD32: IOPS of 32 dd at once on distinct ranges
#   128 KiB sequential reads at QD8: bandwidth of 8 dd at once
# Times are the VM's /proc/uptime (10 ms ticks) around runs of seconds.
#
#   scripts/nvmf-kernel-floor.sh [SECONDS_PER_FIGURE]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-10}
LAB=${RXE_LAB:-../shared/tools/rxe-lab/rxe-lab}
nqn=nqn.2026-11.io.roce:floor
cargo build --quiet --release -p roce-cli
R=$PWD/target/release/roce

"$LAB" status >/dev/null 2>&1 || "$LAB" up >/dev/null
log=/tmp/roce-nvmf-floor-target.log
setsid ip netns exec rxelab "$R" nvmf target --nqn "$nqn" --namespace mem:256M --addr 10.47.0.3 >"$log" 2>&1 &
tpid=$!
cleanup() {
    "$LAB" exec "nvme disconnect -n $nqn" >/dev/null 2>&1 || true
    kill "$tpid" 2>/dev/null || true
    wait "$tpid" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 50); do grep -q "discovery:" "$log" && break; sleep 0.1; done

# Connect, then find the namespace's block device.
RXE_LAB_TIMEOUT=120 "$LAB" exec "nvme connect -t rdma -n $nqn -a 10.47.0.3 -s 4420 >/dev/null && \
    i=0; while [ \$i -lt 300 ]; do d=\$(ls -d /sys/block/nvme*n1 2>/dev/null | head -1); \
    [ -n \"\$d\" ] && [ -b /dev/\${d##*/} ] && break; sleep 0.2; i=\$((i+1)); done; echo \${d##*/}" >/tmp/roce-nvmf-floor-dev
dev=/dev/$(tail -1 /tmp/roce-nvmf-floor-dev | tr -d '\r')
echo "kernel host: $dev"

# Runs N dd readers of BS bytes (each COUNT blocks, from its own range)
# and prints "ios seconds".
run() { # n bs count
    local n=$1 bs=$2 count=$3
    RXE_LAB_TIMEOUT=$((secs * 6 + 60)) "$LAB" exec "t0=\$(cut -d' ' -f1 /proc/uptime); \
        i=0; while [ \$i -lt $n ]; do dd if=$dev of=/dev/null bs=$bs count=$count skip=\$((i * $count)) iflag=direct 2>/dev/null & \
        i=\$((i+1)); done; wait; t1=\$(cut -d' ' -f1 /proc/uptime); echo \"result $((n * count)) \$t0 \$t1\"" |
        awk '/^result/ {printf "%d %.2f\n", $2, $4 - $3}'
}

# A short run sizes each figure's count to about $secs seconds, within
# the 256 MiB namespace (each reader has its own range).
calib() { # n bs
    local r ios s
    r=$(run "$1" "$2" 16)
    ios=${r% *}
    s=${r#* }
    awk -v i="$ios" -v s="$s" -v n="$1" -v t="$secs" -v max=$(((256 << 20) / $2 / $1)) \
        'BEGIN {c = (s > 0) ? int(i / s * t / n) : 16; if (c < 16) c = 16; if (c > max) c = max; print c}'
}

c=$(calib 1 4096)
read -r ios s <<<"$(run 1 4096 "$c")"
qd1=$(awk -v i="$ios" -v s="$s" 'BEGIN {printf "%.1f us (%d reads in %.2f s)", s / i * 1e6, i, s}')
c=$(calib 32 4096)
read -r ios s <<<"$(run 32 4096 "$c")"
iops=$(awk -v i="$ios" -v s="$s" 'BEGIN {printf "%.0f (%d reads in %.2f s)", i / s, i, s}')
c=$(calib 8 131072)
read -r ios s <<<"$(run 8 131072 "$c")"
bw=$(awk -v i="$ios" -v s="$s" 'BEGIN {printf "%.1f MB/s (%d reads in %.2f s)", i * 131072 / s / 1e6, i, s}')

printf '%-52s %s\n' "figure (kernel host in the emulated VM -> roce target)" "value"
printf '%-52s %s\n' "4K read QD1, mean latency" "$qd1"
printf '%-52s %s\n' "4K read QD32 (32 dd), IOPS" "$iops"
printf '%-52s %s\n' "128K sequential read QD8 (8 dd), bandwidth" "$bw"
