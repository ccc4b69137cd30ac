#!/usr/bin/env bash
# Every all-reduce algorithm measured at each size and rank count, beside
# the cost model's pick: is the pick within 10% of the best measured time?
#
#   scripts/coll-algos.sh                 # np = 2 4 8, 4 KiB .. 64 MiB
#   NPS="2 4" MAX=16M ROUNDS=5 scripts/coll-algos.sh
#   MODEL="--model-alpha-us 60 --model-bw-gbs 0.8" scripts/coll-algos.sh
#
# Method. The machine is shared and its load drifts, so one sweep per
# algorithm would compare algorithms measured at different times. Instead
# the algorithms take turns: ROUNDS rounds, each running every algorithm
# once (`roce coll all-reduce --algo A -z 3 -I 1`: a barrier after each
# iteration, not timed), the order rotated from round to round. The figure
# of a run is `i_min`, the fastest of its -n iterations (each iteration's
# time the maximum over ranks): the time the algorithm takes when no other
# process gets in its way, which is what the cost model predicts; the mean
# (`time`) mostly measures whatever else loads the host. An algorithm's time
# at a size is the median of its samples (out-of-place and in-place, every
# round: 2 x ROUNDS). The pick comes from `--explain` (the model's
# predicted time per algorithm, `# explain` lines) with the same model
# parameters (MODEL). The last column: pick time / best time.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
nps=${NPS:-"2 4 8"}
min=${MIN:-4K}
max=${MAX:-64M}
model=${MODEL:-}
rounds=${ROUNDS:-3}
iters=${ITERS:-5}
algos=${ALGOS:-"ring rabenseifner recursive-doubling tree"}
out=${OUT:-$(mktemp -d /tmp/coll-algos.XXXXXX)}
mkdir -p "$out"

cargo build --release -q -p roce-cli
roce=target/release/roce
echo "# $(date -u +%FT%TZ) raw results in $out" >&2
read -r -a list <<<"$algos"
for np in $nps; do
    # shellcheck disable=SC2086
    "$roce" coll all-reduce --np "$np" -b "$min" -e "$max" -f 4 -n 1 -w 0 -c 0 --explain $model >"$out/explain-$np.txt"
    for ((r = 0; r < rounds; r++)); do
        for ((k = 0; k < ${#list[@]}; k++)); do
            a=${list[$(((k + r) % ${#list[@]}))]}
            echo "# np=$np round=$r algo=$a" >&2
            # shellcheck disable=SC2086
            "$roce" coll all-reduce --np "$np" -b "$min" -e "$max" -f 4 -n "$iters" -w 1 -c 0 -z 3 -I 1 --algo "$a" \
                --timeout 120 $model >"$out/$a-$np-$r.txt"
        done
    done
done

python3 - "$out" "$algos" "$rounds" $nps <<'PY'
import sys, os, statistics
out, algos, rounds, nps = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), [int(x) for x in sys.argv[4:]]
def samples(np, a):
    t = {}
    for r in range(rounds):
        for line in open(os.path.join(out, f"{a}-{np}-{r}.txt")):
            f = line.split()
            if not line.startswith("#") and len(f) >= 21:
                t.setdefault(int(f[0]), []).extend([float(f[9]), float(f[17])])
    return {s: statistics.median(v) for s, v in t.items()}
def picks(path):
    p = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and f[0] == "#" and f[1] == "explain" and f[2].isdigit():
            p[int(f[2])] = f[-1].split("=")[1]
    return p
print("# median over %d runs of the fastest iteration (us per call)" % (2 * rounds))
print("%3s %10s " % ("np", "size(B)") + " ".join("%18s" % a for a in algos) + " %18s %18s %9s" % ("best", "model pick", "pick/best"))
bad = 0
for np in nps:
    t = {a: samples(np, a) for a in algos}
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
PY
