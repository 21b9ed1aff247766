#!/usr/bin/env bash
# A 70B-class shape (Llama-3-70B: hidden 8192, 80 layers, 64/8 heads, ffn 28672, configs/) at
# tensor parallelism 4 on 4 H200s, one MPI rank per GPU, bf16 dummy weights (~35 GB a GPU):
# the same scenarios as the 8B script (gpu_scenarios.sh). Rank 0 serves gRPC; SIGUSR1 to mpirun
# drains the group at the end.
# Usage, from the repository root on the 4-GPU machine (build with CUDA first):
#   OUT_DIR=results/h200x4 benchmarks/loadtest/llama3_70b_tp4_h200.sh
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/gpu_scenarios.sh"
MODEL=${MODEL:-$REPO/benchmarks/loadtest/configs/llama3-70b}
PORT=${PORT:-50051}
PREFIX=${PREFIX:-h200x4_llama3_70b_tp4}
RATES_FIXED=${RATES_FIXED:-0.5,1,2,3,4,6,8}
RATES_SHAREGPT=${RATES_SHAREGPT:-2,4,8,12,16,24,32}
MPIRUN=${MPIRUN:-mpirun}  # the launcher and its options, e.g. "mpirun --hostfile hosts"
need_binaries "$LLM" "$LLM_CLIENT"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
fi
# shellcheck disable=SC2086 # MPIRUN may carry options
start_server serve USR1 $MPIRUN -np 4 --bind-to none --allow-run-as-root -x NCCL_NVLS_ENABLE=0 \
  "$LLM" serve --model "$MODEL" --tp 4 --dummy-weights --device "${DEVICE:-cuda}" --dtype "${DTYPE:-bf16}" \
  --host 127.0.0.1 --port "$PORT" --metrics-port -1 --max-context 4096 --max-seqs "${MAX_SEQS:-256}" \
  --max-tokens-per-step "${MAX_TOKENS_PER_STEP:-4096}" --max-queue 100000
wait_serving "127.0.0.1:$PORT"
run_gpu_scenarios
stop_server
log "reports in $OUT_DIR"
