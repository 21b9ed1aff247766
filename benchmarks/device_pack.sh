#!/usr/bin/env bash
# Packs build outputs for a lent GPU machine (which has no gRPC, Abseil or ICU): .device/bins.tgz
# holds bin/ (the named binaries, stripped) and lib/ (the build's shared libraries: the CUDA
# kernels, found by the binaries at $ORIGIN/../lib); .device/bundle.tgz holds the system libraries
# they need that the GPU machine lacks (../shared/device/mkbundle.sh). Both are xz: the repository
# and what a call carries share 64 MiB. benchmarks/device_prelude.sh unpacks them there.
#   benchmarks/device_pack.sh llm llm_client cuda_fp8_test ...      (BUILD_DIR: default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
pack=.device/pack
rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib"
for b in "$@"; do cp "$build/bin/$b" "$pack/bin/"; done
cp "$build"/lib/*.so "$pack/lib/" 2> /dev/null || true
strip "$pack"/bin/* "$pack"/lib/* 2> /dev/null || true
tar -C "$pack" -cJf .device/bins.tgz bin lib
# The system libraries, without the build's own (they travel in bins.tgz).
raw=$(mktemp -d)
../shared/device/mkbundle.sh "$raw/bundle.tgz" "$pack"/bin/* "$pack"/lib/* > /dev/null 2>&1
mkdir "$raw/root" && tar -C "$raw/root" -xzf "$raw/bundle.tgz" 2> /dev/null
find "$raw/root" -name 'libllm_*' -delete
tar -C "$raw/root" -cJf .device/bundle.tgz .
rm -rf "$raw"
tracked=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
carried=$(du -cb .device/bins.tgz .device/bundle.tgz | tail -1 | cut -f1)
echo "device_pack: bins $(du -h .device/bins.tgz | cut -f1), bundle $(du -h .device/bundle.tgz | cut -f1); with the tracked tree $(( (tracked + carried) >> 20 )) MiB of 64"
