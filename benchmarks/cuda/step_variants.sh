# Sourced by the device scripts that compare 8B decode steps across variants (kernel choices or
# fusions forced through the environment, launch/README.md): StepVariantsTable MD ROUNDS runs
# every entry of the caller's `variants` array ("name|quantization|batches|environment", "-" for
# none) ROUNDS times, interleaved, with `llm_cuda_bench --decode-only` ($BIN, $OUT from
# device_prelude.sh), and writes a markdown table of ms a step to MD.
StepVariantsTable() {
  local md=$1 rounds=$2 model=benchmarks/cuda/configs/llama3-8b
  local gpu; gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  echo "Device: $gpu. ms a decode step (8B shape, context 1k, batch 1 at 128), \`llm_cuda_bench --decode-only\`, rounds in order." > "$md"
  echo >> "$md"
  echo "| variant | batch: ms (round 1 / 2 ...) |" >> "$md"
  echo "| --- | --- |" >> "$md"
  declare -A cells
  local round i name quant batches envs extra log batch ms row
  for round in $(seq 1 "$rounds"); do
    for i in "${!variants[@]}"; do
      IFS='|' read -r name quant batches envs <<< "${variants[$i]}"
      extra=(); [[ $quant == fp8 ]] && extra=(--kv-cache-dtype fp8)
      [[ $envs == - ]] && envs=""
      log="$OUT/variant_$i.log"
      env $envs "$BIN/llm_cuda_bench" --model $model --decode-only --batches "$batches" --quantization "$quant" \
        "${extra[@]}" > "$log" 2>&1 || echo "variant $i failed: $(tail -2 "$log")"
      while read -r batch ms; do
        cells[$i,$batch]+="${cells[$i,$batch]:+ / }$ms"
      done < <(sed -n 's/^decode batch \([0-9]*\) ctx [0-9]*: \([0-9.]*\) ms.*/\1 \2/p' "$log")
    done
  done
  for i in "${!variants[@]}"; do
    IFS='|' read -r name quant batches envs <<< "${variants[$i]}"
    row="| $name |"
    for batch in ${batches//,/ }; do row+=" $batch: ${cells[$i,$batch]:-failed};"; done
    echo "$row |" >> "$md"
  done
  rm -f "$OUT"/variant_*.log
  cat "$md"
}
