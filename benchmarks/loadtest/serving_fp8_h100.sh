#!/usr/bin/env bash
# 1000-in/1000-out requests sent all at once (the max-throughput case) against `llm serve` with the
# Llama-3-8B shape, bf16 then FP8 (weights and KV cache), same engine flags otherwise; at each
# TPxPP layout of LAYOUTS (default one GPU; "1x1 2x1 1x2" on two GPUs: mpirun -np 2 llm serve).
#   OUT_DIR=/tmp/out benchmarks/loadtest/serving_fp8_h100.sh     (env: ALL_AT_ONCE, MODES "bf16 fp8", LAYOUTS, EXTRA_SERVE_FLAGS)
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-$REPO/benchmarks/cuda/configs/llama3-8b}
PORT=${PORT:-50051}
ALL_AT_ONCE=${ALL_AT_ONCE:-768}
need_binaries "$LLM" "$LLM_CLIENT"
for mode in ${MODES:-bf16 fp8}; do
  for layout in ${LAYOUTS:-1x1}; do
    tp=${layout%x*} pp=${layout#*x}
    flags=()
    [[ $mode == fp8 ]] && flags=(--quantization fp8 --kv-cache-dtype fp8)
    launch=("$LLM") stop=TERM name=$mode
    if ((tp * pp > 1)); then
      # mpirun forwards SIGUSR1 to the ranks (it would SIGKILL them on TERM): the server drains.
      launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0 -x LD_LIBRARY_PATH
              -np $((tp * pp)) "$LLM") stop=USR1 name=${mode}_tp${tp}_pp${pp}
    fi
    start_server "serve_$name" $stop "${launch[@]}" serve --model "$MODEL" --dummy-weights --device cuda --dtype bf16 \
      "${flags[@]}" --tp "$tp" --pp "$pp" --host 127.0.0.1 --port "$PORT" --metrics-port -1 --max-context 4096 \
      --max-seqs "${MAX_SEQS:-512}" --max-tokens-per-step "${MAX_TOKENS_PER_STEP:-4096}" --max-queue 100000 ${EXTRA_SERVE_FLAGS:-}
    wait_serving "127.0.0.1:$PORT"
    loadtest "all_at_once_1000x1000_$name" --rate inf --num-requests "$ALL_AT_ONCE" --input-len 1000 --output-len 1000 \
      --request-timeout 10m || true
    stop_server
    DEVICE=cuda wait_device_free
  done
done
log "reports in $OUT_DIR"
