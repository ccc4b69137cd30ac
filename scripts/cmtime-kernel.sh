#!/usr/bin/env bash
# rdma-core's cmtime (N connections set up and torn down at once, each
# step timed) through the Linux kernel's RDMA CM and through roce's, in one
# run: the kernel against itself (client and server in the rxe lab's VM,
# over rxe's loopback), each stack against the other (the VM at 10.47.0.1,
# roce exec in the lab's namespace at 10.47.0.3), and roce against itself
# on loopback. The VM is emulated (TCG, no KVM here): its figures are the
# kernel's on this machine, not a baseline a user would meet on hardware.
#
# The VM's image has rdma-core 44's tools but no cmtime; Debian 12's
# (this host's, the same rdma-core) runs there from the lab's share.
#
#   scripts/cmtime-kernel.sh [CONNECTIONS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:-100}
LAB=${RXE_LAB:-../shared/tools/rxe-lab/rxe-lab}
share=${RXE_LAB_CACHE:-/var/cache/rxe-lab}/run/share
command -v cmtime >/dev/null || { echo "error: cmtime not found (apt-get install rdmacm-utils)" >&2; exit 1; }
cargo build --quiet --release -p roce-cli -p roce-rdmacm -p roce-ibverbs
R=$PWD/target/release/roce

booted=""
if ! "$LAB" status >/dev/null 2>&1; then
    "$LAB" up >/dev/null
    booted=1
fi
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -n "$booted" ]; then "$LAB" down >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
cp "$(command -v cmtime)" "$share/cmtime"

out=$(mktemp -d /tmp/cmtime-kernel.XXXXXX)
port=7470
# One pairing: name, how the server starts (vm|ours|loop), the client's
# command line; the client's table goes to $out/NAME.txt.
pairing() {
    local name=$1 server=$2 client=$3 ip=$4
    port=$((port + 1))
    case $server in
        vm) local job; job=$("$LAB" bg "/lab/cmtime -b $ip -p $port -c $n") ;;
        ours) setsid ip netns exec rxelab "$R" exec --addr "$ip" -- cmtime -b "$ip" -p "$port" -c "$n" >"$out/$name-server.txt" 2>&1 &
              pids+=($!) ;;
        loop) "$R" exec --addr "$ip" -- cmtime -b "$ip" -p "$port" -c "$n" >"$out/$name-server.txt" 2>&1 &
              pids+=($!) ;;
    esac
    sleep 2 # the server binds and listens; cmtime has no retry for a REJ
    case $client in
        vm) RXE_LAB_TIMEOUT=120 "$LAB" exec "/lab/cmtime -s $ip -p $port -c $n" >"$out/$name.txt" 2>&1 || true ;;
        ours) timeout 120 ip netns exec rxelab "$R" exec --addr 10.47.0.3 -- cmtime -s "$ip" -p "$port" -c "$n" >"$out/$name.txt" 2>&1 || true ;;
        loop) timeout 120 "$R" exec --addr 127.0.9.22 -- cmtime -s "$ip" -p "$port" -c "$n" >"$out/$name.txt" 2>&1 || true ;;
    esac
    # cmtime's server never exits by itself.
    if [ "$server" = vm ]; then "$LAB" wait "$job" 1 >/dev/null 2>&1 || true; fi
    for p in "${pids[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    pids=()
}

pairing kernel-kernel vm vm 10.47.0.1
pairing kernel-serves-roce vm ours 10.47.0.1
pairing roce-serves-kernel ours vm 10.47.0.3
pairing roce-roce-loopback loop loop 127.0.9.21

echo "cmtime -c $n: the client's totals for all $n connections (ms), and connections per second"
echo "set up (connect's total); tables in $out"
printf '%-22s %12s %12s %12s %12s\n' "pairing" "resolve ms" "connect ms" "disconn ms" "conn/s"
for name in kernel-kernel kernel-serves-roce roce-serves-kernel roce-roce-loopback; do
    f=$out/$name.txt
    if ! grep -q '^connect *:' "$f"; then
        printf '%-22s %s\n' "$name" "FAILED: $(tail -1 "$f")"
        continue
    fi
    awk -v name="$name" -v n="$n" -F: '
        /^resolve addr/ {split($2, a, " "); r = a[1]}
        /^connect/ {split($2, a, " "); c = a[1]}
        /^disconnect/ {split($2, a, " "); d = a[1]}
        END {printf "%-22s %12.1f %12.1f %12.1f %12.0f\n", name, r, c, d, n / (c / 1000)}' "$f"
done
