#!/usr/bin/env bash
# (Run through a device call from the repo root, binaries in .device.) A/B of --kv-cache-fraction under 768 requests of 1000/1000 at once (H100, 8B shape, bf16), then FP8.
source benchmarks/device_prelude.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for f in 0.9 0.98; do
  TAG=kv$f LEVELS=none ALL_AT_ONCE=768 EXTRA_SERVE_FLAGS="--kv-cache-fraction $f" BUILD_DIR=$PWD/.device OUT_DIR=/tmp/lt \
    timeout 200 bash benchmarks/loadtest/serving_loop_h100.sh > /tmp/lt_$f.log 2>&1
  grep -o "KV cache [0-9]* blocks" /tmp/lt/serve_kv$f.log | head -1
  for i in $(seq 1 60); do [[ -z $(nvidia-smi --query-compute-apps=pid --format=csv,noheader) ]] && break; sleep 0.5; done
done
MODES=fp8 ALL_AT_ONCE=768 EXTRA_SERVE_FLAGS="--kv-cache-fraction 0.98" BUILD_DIR=$PWD/.device OUT_DIR=/tmp/lt \
  timeout 150 bash benchmarks/loadtest/serving_fp8_h100.sh > /tmp/lt_fp8.log 2>&1
grep -o "KV cache [0-9]* blocks" /tmp/lt/serve_fp8.log | head -1; tail -3 /tmp/lt_fp8.log
cp /tmp/lt/*.json $OUT/
python3 -c 'import json, sys
for f in sys.argv[1:]:
    r = json.load(open(f))["runs"][0]; t = r["throughput"]
    print(f.split("/")[-1], r["requests"]["completed"], "done", r["requests"]["failed"], "failed,", round(t["output_tokens_per_s"]),
          "tok/s, steady", round(t.get("steady_output_tokens_per_s", 0)), "preemptions", r["tokens"].get("preemptions"))' /tmp/lt/*.json
