#!/usr/bin/env bash
# Every all-reduce algorithm measured at each size and rank count, beside
# the cost model's pick: is the pick within 10% of the best measured time?
#
#   scripts/coll-algos.sh                 # np = 2 4 8, 4 KiB .. 64 MiB
#   NPS="2 4" MAX=16M scripts/coll-algos.sh
#   MODEL="--model-alpha-us 60 --model-bw-gbs 0.8" scripts/coll-algos.sh
#
# Each algorithm runs `roce coll all-reduce --algo A -z 1` (a barrier after
# each call, not timed); the time is the out-of-place column (us per call,
# averaged over ranks). The pick comes from `--explain` (the model's
# predicted time per algorithm, `# explain` lines) with the same model
# parameters (MODEL). The last column: pick time / best time.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
nps=${NPS:-"2 4 8"}
min=${MIN:-4K}
max=${MAX:-64M}
model=${MODEL:-}
algos=${ALGOS:-"ring rabenseifner recursive-doubling tree"}
out=${OUT:-$(mktemp -d /tmp/coll-algos.XXXXXX)}
mkdir -p "$out"

cargo build --release -q -p roce-cli
roce=target/release/roce
echo "# $(date -u +%FT%TZ) raw results in $out" >&2
for np in $nps; do
    # shellcheck disable=SC2086
    "$roce" coll all-reduce --np "$np" -b "$min" -e "$max" -f 4 -n 1 -w 0 -c 0 --explain $model >"$out/explain-$np.txt"
    for a in $algos; do
        echo "# np=$np algo=$a" >&2
        # shellcheck disable=SC2086
        "$roce" coll all-reduce --np "$np" -b "$min" -e "$max" -f 4 -n 10 -w 2 -z 1 --algo "$a" --timeout 120 $model \
            >"$out/$a-$np.txt"
    done
done

python3 - "$out" "$algos" $nps <<'EOF'
import sys, os
out, algos, nps = sys.argv[1], sys.argv[2].split(), [int(x) for x in sys.argv[3:]]
def times(path):
    t = {}
    for line in open(path):
        f = line.split()
        if not line.startswith("#") and len(f) >= 13:
            t[int(f[0])] = float(f[5])
    return t
def picks(path):
    p = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and f[0] == "#" and f[1] == "explain" and f[2].isdigit():
            p[int(f[2])] = f[-1].split("=")[1]
    return p
print("%3s %10s " % ("np", "size(B)") + " ".join("%18s" % a for a in algos) + " %18s %18s %9s" % ("best", "model pick", "pick/best"))
bad = 0
for np in nps:
    t = {a: times(os.path.join(out, f"{a}-{np}.txt")) for a in algos}
    p = picks(os.path.join(out, f"explain-{np}.txt"))
    for size in sorted(set.intersection(*[set(v) for v in t.values()])):
        row = {a: t[a][size] for a in algos}
        best = min(row, key=row.get)
        pick = p.get(size, "?")
        ratio = row[pick] / row[best] if pick in row else float("nan")
        bad += not (ratio <= 1.10)
        print("%3d %10d " % (np, size) + " ".join("%18.1f" % row[a] for a in algos)
              + " %18s %18s %9.2f%s" % (best, pick, ratio, "" if ratio <= 1.10 else "  > 10%"))
print(f"# picks more than 10% slower than the best: {bad}")
EOF
