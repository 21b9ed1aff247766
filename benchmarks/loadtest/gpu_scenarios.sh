# The GPU scenarios' load levels (source it after lib.sh; the server is up at $SERVER_ADDR).
# Each scenario is a rate sweep (latency against load, plots) and SLA searches at MLPerf's
# Llama-2-70B server limits (P99 TTFT 2 s, P99 TPOT 200 ms) and interactive limits (450 ms, 40 ms).
#   PREFIX     report names, e.g. h100_llama3_8b
#   SCENARIOS  "fixed sharegpt" (default) or one of them
#   RATES_FIXED, RATES_SHAREGPT  the sweeps' Poisson rates (req/s)
#   SWEEP_REQUESTS, PROBE_REQUESTS, WARMUP  requests per sweep level / per search probe / warm-up
#   SWEEP_DURATION, PROBE_DURATION  instead of request counts: how long each level / probe sends
#              (e.g. 40s; a level must run long against a request's own latency to reach steady state)
#   FIXED_STEPS  which of "sweep sla interactive" the fixed scenario runs (default: all three)
#   SHAREGPT_STEPS  which of "sweep sla interactive" the ShareGPT-like scenario runs (default: sweep sla)
#   MAX_PROBES  load levels an SLA search may run
#   SHAREGPT   a ShareGPT JSON/JSONL file; without it the mix is synthetic (see below)
SCENARIOS=${SCENARIOS:-fixed sharegpt}
SWEEP_REQUESTS=${SWEEP_REQUESTS:-200}
PROBE_REQUESTS=${PROBE_REQUESTS:-300}
WARMUP=${WARMUP:-32}
MAX_PROBES=${MAX_PROBES:-12}
FIXED_STEPS=${FIXED_STEPS:-sweep sla interactive}
SHAREGPT_STEPS=${SHAREGPT_STEPS:-sweep sla}
common=(--connections 8 --request-timeout 30m --seed 1 --sla-max-probes "$MAX_PROBES")
if [[ -n ${SWEEP_DURATION:-} ]]; then sweep_count=(--duration "$SWEEP_DURATION"); else sweep_count=(--num-requests "$SWEEP_REQUESTS"); fi
if [[ -n ${PROBE_DURATION:-} ]]; then probe_count=(--duration "$PROBE_DURATION"); else probe_count=(--num-requests "$PROBE_REQUESTS"); fi
has() { [[ " $1 " == *" $2 "* ]]; }

# scenario_steps NAME STEPS RATES ARGS...: the steps of one scenario named in STEPS ("sweep": a
# latency sweep over the Poisson RATES; "sla" / "interactive": SLA searches from the first rate),
# each a report ${PREFIX}_NAME_STEP with ARGS for the request shapes.
scenario_steps() {
  local name=$1 steps=$2 rates=$3
  shift 3
  if has "$steps" sweep; then
    loadtest "${PREFIX}_${name}_sweep" "${common[@]}" "$@" --rate "$rates" \
      "${sweep_count[@]}" --warmup-requests "$WARMUP" --sla mlperf-llama2-70b || true
  fi
  local step sla
  for step in sla interactive; do
    has "$steps" "$step" || continue
    sla=mlperf-llama2-70b
    [[ $step == interactive ]] && sla=mlperf-llama2-70b-interactive
    loadtest "${PREFIX}_${name}_${step}" "${common[@]}" "$@" --sla "$sla" --sla-search \
      --sla-start-rate "${rates%%,*}" "${probe_count[@]}" --warmup-requests "$WARMUP" || true
  done
}

# Fixed shape: every request 1000 prompt tokens (random ids) and exactly 1000 output tokens.
fixed_scenario() { scenario_steps 1000x1000 "$FIXED_STEPS" "$RATES_FIXED" --input-len 1000 --output-len 1000; }

# ShareGPT-like mix: the real conversations when $SHAREGPT is given (prompts as random ids of
# their estimated length: dummy weights have no tokenizer; outputs the length of the recorded
# reply), else a synthetic long-tailed mix: log-normal prompt lengths (median 256, sigma 1.0, at
# most 2048) and output lengths (median 192, sigma 0.9, at most 1024).
sharegpt_scenario() {
  local mix=(--input-len lognormal:256:1.0:2048 --output-len lognormal:192:0.9:1024)
  [[ -n ${SHAREGPT:-} ]] && mix=(--dataset "$SHAREGPT")
  scenario_steps sharegpt "$SHAREGPT_STEPS" "$RATES_SHAREGPT" "${mix[@]}"
}

run_gpu_scenarios() {
  local s
  for s in $SCENARIOS; do
    case $s in
      fixed) fixed_scenario ;;
      sharegpt) sharegpt_scenario ;;
      *) log "unknown scenario '$s' (fixed, sharegpt)"; exit 2 ;;
    esac
  done
  python3 "$REPO/benchmarks/loadtest/summarize.py" "$OUT_DIR"/"${PREFIX}"_*.json | tee "$OUT_DIR/${PREFIX}_summary.md"
}
