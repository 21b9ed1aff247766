#!/usr/bin/env bash
# One-step setup on a fresh Debian 12 / Ubuntu 24.04 machine: installs every dependency with apt
# (skipped when already present) and builds into ./build. CUDA is built when nvcc is found
# (/usr/local/cuda/bin/nvcc or on PATH); without it, the CPU build is complete on its own.
#
#   ./setup.sh              install + build
#   ./setup.sh --no-install build only
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev libicu-dev libboost-dev libssl-dev
  python3 python3-grpcio python3-protobuf python3-jinja2 python3-numpy gnuplot-nox openssl curl
)

install=1
for arg in "$@"; do
  case "$arg" in
    --no-install) install=0 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

if [[ $install == 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if (( ${#missing[@]} )); then
    sudo=""
    [[ $(id -u) != 0 ]] && sudo="sudo"
    echo "setup.sh: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$jobs"
echo "setup.sh: build complete: build/bin/llm"
