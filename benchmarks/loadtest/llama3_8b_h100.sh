#!/usr/bin/env bash
# Llama-3-8B shape on one H100 (bf16 dummy weights, no tokenizer: prompts are random token ids):
# a 1000-in/1000-out scenario and a ShareGPT-like mix, each a rate sweep and SLA searches (see
# gpu_scenarios.sh). Reports, plots and a markdown summary go to $OUT_DIR.
# Usage, from the repository root on the GPU machine (build with CUDA first):
#   OUT_DIR=results/h100 benchmarks/loadtest/llama3_8b_h100.sh
#   SCENARIOS=fixed SWEEP_REQUESTS=100 benchmarks/loadtest/llama3_8b_h100.sh    # shorter
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/gpu_scenarios.sh"
MODEL=${MODEL:-$REPO/benchmarks/cuda/configs/llama3-8b}
PORT=${PORT:-50051}
PREFIX=${PREFIX:-h100_llama3_8b}
RATES_FIXED=${RATES_FIXED:-1,2,4,6,8,12,16}
RATES_SHAREGPT=${RATES_SHAREGPT:-4,8,16,24,32,48,64}
need_binaries "$LLM" "$LLM_CLIENT"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
fi
start_server serve TERM "$LLM" serve --model "$MODEL" --dummy-weights --device "${DEVICE:-cuda}" --dtype "${DTYPE:-bf16}" \
  --host 127.0.0.1 --port "$PORT" --metrics-port -1 --max-context 4096 --max-seqs "${MAX_SEQS:-256}" \
  --max-tokens-per-step "${MAX_TOKENS_PER_STEP:-4096}" --max-queue 100000
wait_serving "127.0.0.1:$PORT"
run_gpu_scenarios
stop_server
log "reports in $OUT_DIR"
