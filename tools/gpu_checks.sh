#!/usr/bin/env bash
# The GPU checks of docs/GPU.md in one run, on a machine with an NVIDIA GPU, CUDA 13, NCCL and
# PyTorch, from the bundle tools/gpu_bundle.sh made (.gpu/bundle.tar.xz): the CUDA reference
# tests, the NCCL communicator on one GPU, four peers sharing the GPU through the staged transport
# path against the same run on the CPU, `bench step --device cuda` alone and beside PyTorch at
# batch 256 to 16384, and NCCL inside a run: two peers on two GPUs, or, on one GPU, the refusal of two ranks
# sharing it. Writes its logs into $OUT (or ./gpu_out):
# summary.txt (every check's exit status, time and accuracy), tests.log, bench.log, train.log and
# the gossip runs' metrics. Each check is bounded by `timeout`, the whole by GPU_CHECKS_SECONDS.
# From the repository's root:  bash tools/gpu_checks.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
mkdir -p "$out"
work=$(mktemp -d /tmp/dpg_gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -f .gpu/bundle.tar.xz ] || { echo "gpu_checks: no .gpu/bundle.tar.xz (tools/gpu_bundle.sh)" >&2; exit 1; }
# With tar's xz, or Python's where the machine has no xz program.
tar -C "$work" -xJf .gpu/bundle.tar.xz 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    .gpu/bundle.tar.xz "$work" ||
  { echo "gpu_checks: cannot unpack .gpu/bundle.tar.xz" >&2; exit 1; }
bin=$work/bin
summary=$out/summary.txt
: > "$summary"
# The bundle must come from this tree's sources: tools/gpu_bundle.sh recorded the hash of every
# source file the programs are built from; a tree changed since then gets no run (it would test
# old code).
if [ ! -f "$work/REVISION" ] || [ ! -f "$work/SOURCES.sha256" ]; then
  echo "bundle: STALE, made before bundles recorded their sources (rerun tools/gpu_bundle.sh)" |
    tee -a "$summary"
  exit 1
fi
echo "bundle: built from $(cat "$work/REVISION")" >> "$summary"
if ! sha256sum --quiet --check "$work/SOURCES.sha256" > /dev/null 2>&1; then
  echo "bundle: STALE, this tree's sources differ from the bundle's (rerun tools/gpu_bundle.sh):" >> "$summary"
  sha256sum --quiet --check "$work/SOURCES.sha256" 2>&1 | head -5 >> "$summary"
  cat "$summary"
  exit 1
fi
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } >> "$summary" 2>&1
# PyTorch gets the environment it came with, not the bundle's libraries (an older OpenSSL,
# another build of cuBLAS or NCCL).
# The value goes into the wrapper single-quoted (a quote in it escaped), so that nothing in it is
# expanded; an unset variable stays unset.
if [ -n "${LD_LIBRARY_PATH+set}" ]; then
  quoted=$(printf '%s' "$LD_LIBRARY_PATH" | sed "s/'/'\\\\''/g")
  printf "#!/bin/sh\nexec env LD_LIBRARY_PATH='%s' python3 \"\$@\"\n" "$quoted"
else
  printf '#!/bin/sh\nexec env -u LD_LIBRARY_PATH python3 "$@"\n'
fi > "$work/python3"
chmod +x "$work/python3"
# CUDA's and NCCL's libraries (cudart, cuBLAS, cuRAND, NCCL): from a toolkit if the machine has
# one, else from PyTorch's nvidia-* wheels (nvidia/<part>/lib, or nvidia/cu13/lib in CUDA 13's
# layout) or torch/lib. Whatever the programs still cannot find is searched for by name, within
# a bound, and what stays missing is written to the summary before anything runs.
libdirs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = []
for r in roots:
    dirs += sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib")))
    dirs += sorted(glob.glob(os.path.join(r, "torch", "lib")))
print(":".join(d for d in dirs if os.path.isdir(d)))
PY
)
export LD_LIBRARY_PATH="$work/lib:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${libdirs:+:$libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing() { ldd "$bin"/* 2>/dev/null | awk '/not found/ { print $1 }' | sort -u; }
# One walk of the disk for all the missing names at once, 60 s at most in all.
names=()
for lib in $(missing); do names+=(${names[0]+-o} -name "$lib"); done
if [ "${#names[@]}" -gt 0 ]; then
  while read -r dir; do LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"; done < <(
    timeout 60 find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o \( "${names[@]}" \) \
      -printf '%h\n' 2>/dev/null | awk '!seen[$0]++')
fi
echo "libraries: $(missing | tr '\n' ' ')" | sed 's/: $/: all found/' >> "$summary"
# Which CUDA and NCCL builds the programs load (the bundle was compiled against the toolkit's
# headers; a wheel's older NCCL could refuse the newer config) and PyTorch's own NCCL.
ldd "$bin/dpgossip" 2>/dev/null | awk '/libcudart|libcublas|libcurand|libnccl/ { print "  " $1 " => " $3 }' >> "$summary"
echo "  torch $(timeout 60 "$work/python3" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1 | tail -1)" >> "$summary"
last=$work/last.log
# The whole run ends within GPU_CHECKS_SECONDS (default 520) of its start, so that it returns,
# with its summary, inside the device machine's limit for one command (540 s here): each check
# gets at most what is left, and one that cannot start is listed as not run.
budget=${GPU_CHECKS_SECONDS:-520}
# check NAME LOG SECONDS COMMAND...: runs it under `timeout`, appending its output to LOG.
check() {
  local name=$1 log=$2 limit=$3; shift 3
  local left=$((budget - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "$name: not run, the run's $budget s were spent" >> "$summary"
    : > "$last"
    ran=false
    return
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  ran=true
  echo "== $name: $*" >> "$out/$log"
  local start=$SECONDS
  timeout "$limit" "$@" > "$last" 2>&1
  local rc=$?
  local why=""
  [ "$rc" = 77 ] && why=" (skipped: no usable GPU, a failure on a GPU machine)"
  [ "$rc" = 124 ] && why=" (timed out after $limit s)"
  echo "$name: exit $rc in $((SECONDS - start)) s$why" >> "$summary"
  cat "$last" >> "$out/$log"
}
check reference tests.log 120 "$bin/test_device_mlp_cuda"
check nccl tests.log 120 "$bin/test_nccl"
# test_nccl's GPU cases return early, and say so, where they find too few GPUs.
grep -o 'skipped, needs [0-9]* GPU(s): .*' "$out/tests.log" | sort | uniq -c | sed 's/^/  /' >> "$summary"
check prepare train.log 120 "$bin/dpgossip" prepare --idx-dir "$work/fashion-mnist" --out "$work/data"
# The test accuracy of the last check's summary, if it printed one, into the summary.
accuracy() { $ran && echo "  $(grep -o '"test_accuracy":[0-9.e-]*' "$last" | tail -1)" >> "$summary"; }
# What the issue asks for first, first: the 4-peer run on the GPU against the same on the CPU,
# then the step's figures, dpgossip's alone (so that a failing PyTorch loses none of them), then
# beside PyTorch's.
for device in cuda cpu; do
  check "gossip-$device" train.log 300 "$bin/dpgossip" launch --peers 4 -- train --algo gossip \
      --topology ring --data "$work/data" --device "$device" --json --metrics "$out/metrics-$device.jsonl"
  accuracy
done
for b in 256 1024 4096 16384; do
  check "step-$b" bench.log 60 "$bin/dpgossip" bench step --device cuda --threads 1 --batch "$b" \
      --seconds 1 --rounds 3
done
for b in 256 1024 4096 16384; do
  check "bench-$b" bench.log 120 "$bin/dpgossip" bench step --device cuda --threads 1 --batch "$b" \
      --baseline torch --python "$work/python3" --torch-script tools/bench_torch_mlp.py --seconds 1 --rounds 3
done
check "allreduce-cuda" train.log 300 "$bin/dpgossip" launch --peers 4 -- train --algo allreduce \
    --data "$work/data" --device cuda --json --metrics ""
accuracy
# NCCL inside a run needs a GPU per peer (a single peer runs no collective at all): two peers on
# two GPUs, all-reduce and gossip (its exchange started before the gradient, finished after).
# With one GPU, two peers asking for NCCL must be refused, on both ranks, with the reason.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -ge 2 ]; then
  for algo in allreduce gossip; do
    check "nccl-$algo" train.log 300 "$bin/dpgossip" launch --peers 2 -- train --algo "$algo" \
        --topology ring --data "$work/data" --device cuda --transport nccl --epochs 5 --json \
        --metrics ""
    accuracy
  done
else
  echo "nccl-allreduce, nccl-gossip: not run, $gpus GPU(s) here and NCCL needs one per peer" >> "$summary"
  check "nccl-refused" train.log 120 "$bin/dpgossip" launch --peers 2 -- train --algo allreduce \
      --data "$work/data" --device cuda --transport nccl --epochs 1 --metrics ""
  if ! $ran; then
    :
  elif grep -q "NCCL cannot put several ranks on one GPU" "$last"; then
    echo "  refused with the reason (expected)" >> "$summary"
  else
    echo "  NOT refused with the reason" >> "$summary"
  fi
fi
cat "$summary"
