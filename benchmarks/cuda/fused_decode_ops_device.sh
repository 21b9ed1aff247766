#!/usr/bin/env bash
# The ops the decode GEMVs take into their kernels (CudaBackendOptions::fuse_decode_ops: their
# input's RMSNorm, the residual add, the QKV projection's RoPE and KV write) measured in the 8B
# decode step: with them (the default) and without (LLM_FUSE_DECODE_OPS=0), bf16, FP8 + FP8 KV and
# int4, at the row counts whose GEMVs fuse; ROUNDS (default 3) interleaved rounds, then one CUPTI
# timeline of each quantization at batch 1. One call on the GPU machine, ~2 minutes. Pack:
# benchmarks/device_pack.sh llm_cuda_bench. Usage: benchmarks/cuda/fused_decode_ops_device.sh
set -uo pipefail
source "$(dirname "$0")/../device_prelude.sh"
source "$(dirname "$0")/step_variants.sh"
model=benchmarks/cuda/configs/llama3-8b
# name | quantization | batches | environment ("-": the default)
variants=(
  "bf16, all fused|none|1,2|-"
  "bf16, norms fused|none|1,2|LLM_FUSE_GEMV_ROPE=0"
  "bf16, apart|none|1,2|LLM_FUSE_DECODE_OPS=0"
  "FP8 + FP8 KV, all fused|fp8|1,2|-"
  "FP8 + FP8 KV, RoPE fused|fp8|1,2|LLM_FUSE_GEMV_NORM=0"
  "FP8 + FP8 KV, norms fused|fp8|1,2|LLM_FUSE_GEMV_ROPE=0"
  "FP8 + FP8 KV, apart|fp8|1,2|LLM_FUSE_DECODE_OPS=0"
  "int4, all fused|int4|1,2,4|-"
  "int4, apart|int4|1,2,4|LLM_FUSE_DECODE_OPS=0"
)
StepVariantsTable "$OUT/fused_decode_ops.md" "${ROUNDS:-3}"
for quant in ${TIMELINES-fp8}; do
  extra=(); [[ $quant == fp8 ]] && extra=(--kv-cache-dtype fp8)
  "$BIN/llm_cuda_bench" --model $model --decode-only --batches 1 --quantization $quant "${extra[@]}" --timeline \
    > "$OUT/timeline_${quant}_1.md" 2>&1 || echo "timeline $quant failed"
done
