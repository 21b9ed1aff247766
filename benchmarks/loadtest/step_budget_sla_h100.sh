#!/usr/bin/env bash
# Issue 15's remaining served figures, Llama-3-8B shape (bf16 dummy weights) on one GPU behind
# `llm serve`, through gRPC, in parts chosen by PARTS (one device call each fits in 10 minutes):
#   budget  the chunked-prefill token budget (--max-tokens-per-step in BUDGETS) at saturation:
#           256 closed-loop streams of 1000-token prompts and 512 output tokens (about 33 new
#           prompts a second join running decodes), DURATION each: throughput, TPOT P50 and ITL
#           P99 (the target: ITL P99 <= 2x TPOT P50 while throughput holds);
#   mix     a ShareGPT-like length mix (lognormal prompts and outputs, medians 180/150 tokens,
#           capped at 2048), 1000 requests all at once, with the default budget;
#   rates   fixed Poisson rates of the same requests (SLA_RATES, SLA_DURATION a rate)
#   sla     Poisson arrivals of 1000-in/1000-out requests, the highest rate meeting MLPerf's
#           Llama-3.1-8B server limits (P99 TTFT <= 2 s, P99 TPOT <= 100 ms): SLA_REQUESTS a probe,
#           or, with SLA_DURATION (e.g. 150s), arrivals for that long a probe: a steady state, where
#           a rate above capacity shows as a growing queue (a short burst does not).
#   PARTS="budget mix" OUT_DIR=/tmp/out benchmarks/loadtest/step_budget_sla_h100.sh
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-$REPO/benchmarks/cuda/configs/llama3-8b}
PORT=${PORT:-50051}
PARTS=${PARTS:-budget mix}
BUDGETS=${BUDGETS:-512 1024 2048 4096}
DURATION=${DURATION:-30s}
SLA_REQUESTS=${SLA_REQUESTS:-240}
SLA_DURATION=${SLA_DURATION:-}
need_binaries "$LLM" "$LLM_CLIENT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu.txt"

serve() {  # serve TAG [FLAGS...]: a server with the default settings plus FLAGS
  local tag=$1
  shift
  start_server "serve_$tag" TERM "$LLM" serve --model "$MODEL" --dummy-weights --device cuda --dtype bf16 \
    --host 127.0.0.1 --port "$PORT" --metrics-port -1 --http-port -1 --max-context 4096 --max-queue 100000 "$@"
  wait_serving "127.0.0.1:$PORT"
}

for part in $PARTS; do
  case $part in
    budget)
      for b in $BUDGETS; do
        serve "budget_$b" --max-tokens-per-step "$b"
        loadtest "budget_$b" --concurrency 256 --duration "$DURATION" --warmup-requests 256 \
          --input-len 1000 --output-len 512 --request-timeout 10m --progress-interval 10 || true
        stop_server
      done ;;
    mix)
      serve mix ${MIX_FLAGS:-}  # e.g. MIX_FLAGS="--quantization fp8 --kv-cache-dtype fp8"
      loadtest "mix_sharegpt_like${MIX_TAG:-}" --rate inf --num-requests 1000 --input-len lognormal:180:1.0:2048 \
        --output-len lognormal:150:1.0:2048 --request-timeout 10m --progress-interval 10 || true
      stop_server ;;
    rates)
      # Fixed Poisson rates (SLA_RATES), arrivals for SLA_DURATION (default 120s) each: whether a
      # sustained rate meets the limits, without the search's doubling from a low start.
      serve rates
      for r in ${SLA_RATES:-7 8}; do
        loadtest "sla_rate_$r" --rate "$r" --duration "${SLA_DURATION:-120s}" --sla-ttft-p99 2s --sla-tpot-p99 100ms \
          --input-len 1000 --output-len 1000 --request-timeout 10m --progress-interval 10 || true
      done
      stop_server ;;
    sla)
      probe=(--num-requests "$SLA_REQUESTS")
      [[ -n $SLA_DURATION ]] && probe=(--duration "$SLA_DURATION")
      serve sla
      loadtest sla_1000x1000 --sla-ttft-p99 2s --sla-tpot-p99 100ms --sla-search --sla-start-rate 6 \
        --sla-tolerance 0.1 --sla-max-probes 5 "${probe[@]}" --input-len 1000 --output-len 1000 \
        --request-timeout 10m --progress-interval 10 || true
      stop_server ;;
  esac
done

python3 - "$OUT_DIR" << 'PY' > "$OUT_DIR/step_budget_sla_summary.md"
import glob, json, os, sys
out = sys.argv[1]
def runs(name):
    path = os.path.join(out, name + ".json")
    return json.load(open(path))["runs"] if os.path.exists(path) else []
budget = sorted(glob.glob(os.path.join(out, "budget_*.json")), key=lambda p: int(p.split("_")[-1][:-5]))
if budget:
    print("| --max-tokens-per-step | output tok/s (steady) | TPOT P50 ms | ITL P50 ms | ITL P99 ms | ITL P99 / TPOT P50 | TTFT P50 ms | TTFT P99 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in budget:
        r = json.load(open(p))["runs"][0]
        lat, th = r["latency_ms"], r["throughput"]
        steady = th.get("steady_output_tokens_per_s", th["output_tokens_per_s"])
        print(f"| {p.split('_')[-1][:-5]} | {steady:.0f} | {lat['tpot']['p50']:.2f} | {lat['itl']['p50']:.2f} | "
              f"{lat['itl']['p99']:.2f} | {lat['itl']['p99'] / lat['tpot']['p50']:.2f} | {lat['ttft']['p50']:.0f} | {lat['ttft']['p99']:.0f} |")
for r in runs("mix_sharegpt_like"):
    th, lat, req = r["throughput"], r["latency_ms"], r["requests"]
    print(f"\nShareGPT-like mix, 1000 at once: {th['output_tokens_per_s']:.0f} output tok/s "
          f"({th['total_tokens_per_s']:.0f} total), {req['completed']} completed / {req['failed']} failed, "
          f"TTFT P50 {lat['ttft']['p50']:.0f} ms, TPOT P50 {lat['tpot']['p50']:.2f} ms")
sla = runs("sla_1000x1000")
if sla:
    print("\n| Poisson rate req/s | TTFT P99 ms | TPOT P99 ms | output tok/s | meets MLPerf 8B server limits |")
    print("| --- | --- | --- | --- | --- |")
    for r in sla:
        lat = r["latency_ms"]
        ok = lat["ttft"]["p99"] <= 2000 and lat["tpot"]["p99"] <= 100 and r["requests"]["failed"] == 0 and not r.get("interrupted")
        print(f"| {r['load']['offered_rate_rps']:.2f} | {lat['ttft']['p99']:.0f} | {lat['tpot']['p99']:.1f} | "
              f"{r['throughput']['output_tokens_per_s']:.0f} | {'yes' if ok else 'no'} |")
PY
cat "$OUT_DIR/step_budget_sla_summary.md"
log "reports in $OUT_DIR"
