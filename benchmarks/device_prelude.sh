# Sourced first by the scripts that run on a lent GPU machine (benchmarks/*/run_device.sh), from
# the repository root: unpacks the carried library bundle (.device/bundle.tgz: what the machine
# lacks, e.g. gRPC and Abseil) and binaries (.device/bins.tgz -> .device/bin and .device/lib, made
# by benchmarks/device_pack.sh), points the test
# binaries' built-in data path (/work/main/tests/data) at this checkout, keeps NVLink multicast
# off, and sets OUT (the folder whose files come back).
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ ! -e /work/main/tests/data ]; then mkdir -p /work && ln -sfn "$PWD" /work/main; fi
tar -C / --skip-old-files -xf .device/bundle.tgz && ldconfig
# bin/ and lib/ (benchmarks/device_pack.sh): the binaries find lib/ at $ORIGIN/../lib.
[ -f .device/bins.tgz ] && tar -C .device -xf .device/bins.tgz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BIN=$PWD/.device/bin
