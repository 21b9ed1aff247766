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
# OpenSSL 3 is on the GPU machines already (same ABI).
find "$raw/root" \( -name 'libcrypto.so*' -o -name 'libssl.so*' \) -delete
# STUB_ICU=1: ICU's 31 MB data library replaced by an empty one (an ICU common-data header with no
# entries, what ICU's own stubdata holds). Only for runs that never use a tokenizer (dummy
# weights, no tokenizer.json): the binaries need the library to load, not its data.
if [[ ${STUB_ICU:-0} == 1 ]]; then
  icudata=$(find "$raw/root" -name 'libicudata.so.*.*' | head -1)
  if [[ -n $icudata ]]; then
    version=$(basename "$icudata" | sed 's/libicudata\.so\.\([0-9]*\).*/\1/')
    cat > "$raw/stub.c" <<STUB
/* MappedData header (size 32, magic 0xda27), UDataInfo (20 bytes, little endian, ASCII, 2-byte
   UChar, format "CmnD" 1.0), then a table of contents of 0 entries. */
const unsigned char icudt${version}_dat[36] __attribute__((aligned(16))) = {
  32, 0, 0xda, 0x27, 20, 0, 0, 0, 0, 0, 2, 0, 'C', 'm', 'n', 'D', 1, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
STUB
    rm -f "$raw/root"/usr/lib/x86_64-linux-gnu/libicudata.so*
    cc -shared -fPIC -Wl,-soname,libicudata.so.$version -o "$icudata" "$raw/stub.c"
    ln -sf "$(basename "$icudata")" "$(dirname "$icudata")/libicudata.so.$version"
  fi
fi
tar -C "$raw/root" -cJf .device/bundle.tgz .
rm -rf "$raw"
tracked=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
carried=$(du -cb .device/bins.tgz .device/bundle.tgz | tail -1 | cut -f1)
echo "device_pack: bins $(du -h .device/bins.tgz | cut -f1), bundle $(du -h .device/bundle.tgz | cut -f1); with the tracked tree $(( (tracked + carried) >> 20 )) MiB of 64"
