#!/usr/bin/env bash
# The simulator's speed on collectives at packet level, and a 1,024-rank
# run's determinism.
#
#   scripts/sim-coll-speed.sh                 # 1 GiB ring on 128 hosts; 1,024 ranks
#   SIZE=256MiB SIZE_1024=256KiB scripts/sim-coll-speed.sh
#   SLOT_BYTES=64KiB scripts/sim-coll-speed.sh  # the simulator's default slots
#
# 1. A ring all-reduce of SIZE (default 1 GiB) on the 128 hosts of a k = 8
#    fat-tree (100 Gb/s, 1 us links, lossless, MTU 4096, ranks in host
#    order), one in-place iteration, unchecked (timing-only: the NIC
#    engines carry each message's 64-byte header and elide the rest of the
#    payload; the same packets, of the same lengths, cross the same links),
#    with receive slots of SLOT_BYTES (default 256 KiB, the layout `roce
#    coll` runs with), under /usr/bin/time -v: user CPU, max RSS, and the
#    packet-hops per CPU-second.
# 2. A ring all-reduce of SIZE_1024 (default 1 MiB) on the 1,024 hosts of
#    a k = 16 fat-tree, with the simulator's default slots (64 KiB: each
#    rank's regions are touched when registered, and 1,024 ranks of 256
#    KiB slots hold 10 GB), run twice: the two outputs must be
#    byte-identical.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
size=${SIZE:-1GiB}
size1024=${SIZE_1024:-1MiB}
slot_bytes=${SLOT_BYTES:-256KiB}
out=${OUT:-$(mktemp -d /tmp/sim-coll-speed.XXXXXX)}
mkdir -p "$out"
if [ "${BUILD:-1}" = 1 ]; then cargo build --release -q -p roce-cli; fi
roce=target/release/roce

cat >"$out/speed.toml" <<TOML
[topology]
kind = "fat-tree"
k = 8
rate = "100G"
delay = "1us"
[fabric]
mtu = 4096
[[collective]]
op = "all-reduce"
algo = "ring"
size = "$size"
iterations = 1
in_place_only = true
check = false
slot_bytes = "$slot_bytes"
TOML
/usr/bin/time -v "$roce" sim coll "$out/speed.toml" >"$out/speed.txt" 2>"$out/speed.time"
cpu=$(awk -F': ' '/User time/ {print $2}' "$out/speed.time")
rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$out/speed.time")
hops=$(sed -n 's/.* \([0-9]*\) packet-hops.*/\1/p' "$out/speed.txt")
grep -E '^ +[0-9]' "$out/speed.txt"
echo "# ring all-reduce $size on 128 hosts (k=8 fat-tree, $slot_bytes slots): user CPU ${cpu} s, max RSS ${rss} KiB, ${hops} packet-hops, $(awk -v h="$hops" -v c="$cpu" 'BEGIN {printf "%.3e", h / c}') packet-hops per CPU-second"

sed -e 's/k = 8/k = 16/' -e "s/size = \"$size\"/size = \"$size1024\"/" -e '/^slot_bytes/d' "$out/speed.toml" >"$out/k16.toml"
/usr/bin/time -v "$roce" sim coll "$out/k16.toml" >"$out/k16-a.txt" 2>"$out/k16-a.time"
"$roce" sim coll "$out/k16.toml" >"$out/k16-b.txt"
grep -E '^ +[0-9]' "$out/k16-a.txt"
cpu=$(awk -F': ' '/User time/ {print $2}' "$out/k16-a.time")
rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$out/k16-a.time")
if cmp -s "$out/k16-a.txt" "$out/k16-b.txt"; then same="byte-identical ($(sha256sum <"$out/k16-a.txt" | cut -c1-16))"; else same="DIFFERENT"; fi
echo "# ring all-reduce $size1024 on 1,024 ranks (k=16 fat-tree): user CPU ${cpu} s, max RSS ${rss} KiB; two runs $same"
echo "# raw output in $out"
