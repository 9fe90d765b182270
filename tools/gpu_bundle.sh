#!/usr/bin/env bash
# Packs what tools/gpu_checks.sh needs on a GPU machine that has CUDA 13 and NCCL but not
# Debian's packages (no package archive there): the dpgossip binary and the GPU test programs,
# built in ./build-gpu for x86-64-v3 (AVX2 and FMA, not this machine's every instruction: the GPU
# machine's processor may lack some), the shared libraries they load from Debian (not CUDA's,
# NCCL's, glibc's or the C++ runtime's, which that machine has), and Fashion-MNIST's IDX files.
# Writes .gpu/bundle.tar.xz (about 50 MB; .gpu/ and build-gpu/ are git-ignored). Run after
# tools/setup.sh; docs/GPU.md says how to use it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-gpu
# apps/dpgossip-cuda.so is the module dpgossip loads for --device cuda and --transport nccl: it
# stays beside the program (apps/device_backend.h).
programs=(apps/dpgossip apps/dpgossip-cuda.so tests/unit/model/test_device_mlp_cuda tests/unit/collective/test_nccl)
[ -f "$build/build.ninja" ] || meson setup "$build" -Dmarch=x86-64-v3 >/dev/null
ninja -C "$build" "${programs[@]}" >/dev/null
stage=.gpu/stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/fashion-mnist"
for p in "${programs[@]}"; do
  [ -f "$build/$p" ] || { echo "gpu_bundle: $build/$p is missing (a build with CUDA and NCCL?)" >&2; exit 1; }
  cp "$build/$p" "$stage/bin/"
done
# What the programs load, less what the GPU machine brings: CUDA's and NCCL's libraries, glibc,
# and GCC's runtime (a newer one there serves programs built by an older GCC, not the reverse).
ldd "$stage"/bin/* | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -v -E '^/usr/local/cuda/|/lib(c|m|dl|pthread|rt|mvec|stdc\+\+|gcc_s)\.so|ld-linux' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
cp /usr/share/datasets/fashion-mnist/*.gz "$stage/fashion-mnist/"
# What the programs were built from: the commit (and whether the tree differed from it), and the
# hash of every source file (tracked, or new and not ignored) as the tree had it, which
# gpu_checks.sh checks its tree against.
sources=(meson.build meson_options.txt apps runtime dp topology tests/unit tools/bench)
changed=$(git status --porcelain -- "${sources[@]}")
echo "$(git rev-parse --short HEAD)${changed:+ with uncommitted changes}" > "$stage/REVISION"
# (A tracked file deleted from the tree is left out: it is in no program.)
git ls-files -z --cached --others --exclude-standard -- "${sources[@]}" |
  while IFS= read -r -d '' f; do if [ -f "$f" ]; then printf '%s\0' "$f"; fi; done |
  xargs -0 sha256sum > "$stage/SOURCES.sha256"
tar -C "$stage" -cJf .gpu/bundle.tar.xz .
rm -rf "$stage"
echo "gpu_bundle: .gpu/bundle.tar.xz, $(du -h .gpu/bundle.tar.xz | cut -f1)"
