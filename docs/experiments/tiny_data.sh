#!/usr/bin/env bash
# The tiny data set of docs/BENCHMARKS.md ("A peer's memory"): 8192 training and 512 test rows of
# 16 Gaussian features around their label (4 classes), as CSV, prepared whole into OUT.
#   bash docs/experiments/tiny_data.sh build/apps/dpgossip /tmp/tiny2
set -euo pipefail
bin=${1:?usage: tiny_data.sh DPGOSSIP OUT}
out=${2:?usage: tiny_data.sh DPGOSSIP OUT}
mkdir -p "$out"
/usr/bin/python3 - "$out" <<'PY'
import random, sys
random.seed(2)
for name, n in (("train.csv", 8192), ("test.csv", 512)):
    with open(f"{sys.argv[1]}/{name}", "w") as f:
        for _ in range(n):
            y = random.randrange(4)
            f.write(",".join([str(y)] + [f"{random.gauss(y, 1):.3f}" for _ in range(16)]) + "\n")
PY
"$bin" prepare --format csv --train-csv "$out/train.csv" --test-csv "$out/test.csv" --out "$out/data"
