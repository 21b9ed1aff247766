#!/usr/bin/env bash
# The front end that survives its workers (llm serve --workers), measured two ways:
#  1. overhead: the same TP x PP group served in process (`mpirun -np N llm serve`, world rank 0
#     runs the engine) and behind a front end (`llm serve --workers "mpirun -np N"`): single-stream
#     TPOT (1 in flight) and saturated output throughput (CONCURRENCY in flight);
#  2. recovery: while RECOVERY_CONCURRENCY long streams run on the front end, one worker rank is
#     killed (SIGKILL), then another hung (SIGSTOP, past the watchdog): the clients' largest
#     inter-token gap is the pause they saw (death to first resumed token), and every request
#     must still complete; the server log gives detection, restart and model load.
# A markdown summary goes to $OUT_DIR/front_end_survival_summary.md.
# CPU (defaults: the llama-tiny fixture, TP2):
#   BUILD_DIR=build benchmarks/loadtest/front_end_survival.sh
# GPU (Llama-3-8B shape, bf16 dummy weights, TP2 on two GPUs; through run_device.sh):
#   MODEL=benchmarks/cuda/configs/llama3-8b DEVICE=cuda DUMMY=1 TP=2 OUTPUT_LEN=256 RECOVERY_OUTPUT_LEN=2000 KILL_AFTER_S=3 \
#     benchmarks/loadtest/run_device.sh front_end_survival.sh
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-$REPO/tests/data/models/llama-tiny}
DEVICE=${DEVICE:-cpu}
TP=${TP:-2}
PP=${PP:-1}
DUMMY=${DUMMY:-0}
THREADS=${THREADS:-1}
INPUT_LEN=${INPUT_LEN:-64}
OUTPUT_LEN=${OUTPUT_LEN:-128}
SINGLE_REQUESTS=${SINGLE_REQUESTS:-16}
CONCURRENCY=${CONCURRENCY:-32}
SATURATED_REQUESTS=${SATURATED_REQUESTS:-128}
RECOVERY_CONCURRENCY=${RECOVERY_CONCURRENCY:-12}
RECOVERY_OUTPUT_LEN=${RECOVERY_OUTPUT_LEN:-440}
WATCHDOG_S=${WATCHDOG_S:-5}
KILL_AFTER_S=${KILL_AFTER_S:-0.5}
RANKS=$((TP * PP))
MPIRUN=${MPIRUN:-mpirun --oversubscribe --allow-run-as-root -np $RANKS -x OMPI_MCA_btl_vader_single_copy_mechanism=none -x NCCL_NVLS_ENABLE=0}
need_binaries "$LLM" "$LLM_CLIENT"
model_flags=(--model "$MODEL" --device "$DEVICE" --tp "$TP" --pp "$PP" --threads "$THREADS" --max-queue 100000)
[[ $DUMMY == 1 ]] && model_flags+=(--dummy-weights --max-context 4096)
serve_flags=(--host 127.0.0.1 --port 0 --http-port -1 --metrics-port -1)
common=(--connections 4 --progress-interval 10 --seed 3 --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN")

# measure MODE: single-stream and saturated runs against the server just started.
measure() {
  local mode=$1
  wait_serving
  loadtest "${mode}_single" "${common[@]}" --concurrency 1 --num-requests "$SINGLE_REQUESTS" --warmup-requests 2
  loadtest "${mode}_saturated" "${common[@]}" --concurrency "$CONCURRENCY" --num-requests "$SATURATED_REQUESTS" \
    --warmup-requests "$CONCURRENCY"
  stop_server
  wait_device_free
}

start_server inprocess USR1 $MPIRUN "$LLM" serve "${model_flags[@]}" "${serve_flags[@]}"
measure inprocess
start_server frontend TERM "$LLM" serve "${model_flags[@]}" "${serve_flags[@]}" --workers "$MPIRUN" \
  --worker-timeout-s "$WATCHDOG_S"
measure frontend

# rank_pid RANK: the worker process of world rank RANK of the front end's current group.
rank_pid() {
  local pid
  for pid in $(pgrep -f "llm worker .*--replica 0 "); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$pid"
      return
    fi
  done
  [[ $1 == 0 ]] && pgrep -f "llm worker .*--replica 0 " | head -1
}

# disrupt NAME SIGNAL RANK: long streams; SIGNAL to RANK after KILL_AFTER_S.
disrupt() {
  local name=$1 sig=$2 rank=$3
  loadtest "$name" --connections 4 --progress-interval 10 --seed 5 --concurrency "$RECOVERY_CONCURRENCY" \
    --num-requests "$RECOVERY_CONCURRENCY" --input-len "$INPUT_LEN" --output-len "$RECOVERY_OUTPUT_LEN" &
  local client=$!
  sleep "$KILL_AFTER_S"
  local pid
  pid=$(rank_pid "$rank")
  log "sending SIG$sig to world rank $rank (pid ${pid:-none})"
  [[ -n $pid ]] && kill -"$sig" "$pid"
  wait "$client" || true
  # The restarted group must be whole before the next disruption.
  sleep 2
}

start_server recovery TERM "$LLM" serve "${model_flags[@]}" "${serve_flags[@]}" --workers "$MPIRUN" \
  --worker-timeout-s "$WATCHDOG_S"
wait_serving
disrupt recovery_sigkill KILL $((RANKS - 1))
disrupt recovery_sigstop STOP $((RANKS > 1 ? 1 : 0))
stop_server

python3 - "$OUT_DIR" "$TP" "$PP" "$DEVICE" "$MODEL" "$WATCHDOG_S" > "$OUT_DIR/front_end_survival_summary.md" << 'EOF'
import json, os, re, sys
out, tp, pp, device, model, watchdog = sys.argv[1:]
def run(name):
    return json.load(open(os.path.join(out, name + ".json")))["runs"][0]
print(f"### Front end split and recovery: {os.path.basename(model)}, {device}, TP{tp} x PP{pp}\n")
print("| mode | single-stream TPOT P50 ms | TPOT P99 ms | saturated output tok/s | saturated TPOT P50 ms |")
print("| --- | --- | --- | --- | --- |")
rows = {}
for mode in ("inprocess", "frontend"):
    s, t = run(mode + "_single"), run(mode + "_saturated")
    rows[mode] = (s["latency_ms"]["tpot"]["p50"], t["throughput"]["output_tokens_per_s"])
    print(f"| {mode} | {s['latency_ms']['tpot']['p50']:.3f} | {s['latency_ms']['tpot']['p99']:.3f} | "
          f"{t['throughput']['output_tokens_per_s']:.0f} | {t['latency_ms']['tpot']['p50']:.3f} |")
(ti, xi), (tf, xf) = rows["inprocess"], rows["frontend"]
print(f"\nfront end vs in process: single-stream TPOT {100 * (tf / ti - 1):+.1f}%, "
      f"saturated throughput {100 * (xf / xi - 1):+.1f}%\n")
log = open(os.path.join(out, "recovery.log")).read()
print("| disruption | requests completed / failed | clients' largest gap ms (death to first resumed token) |")
print("| --- | --- | --- |")
for name, what in (("recovery_sigkill", "SIGKILL of the last rank"),
                   ("recovery_sigstop", f"SIGSTOP of rank 1 (watchdog {watchdog} s)")):
    r = run(name)
    print(f"| {what} | {r['requests']['completed']} / {r['requests']['failed']} | "
          f"{r['latency_ms']['itl']['max']:.0f} |")
print("\nserver log:\n")
for line in log.splitlines():
    if re.search(r"worker group (lost|\d+ serves)|first token .* after", line):
        print("    " + line)
EOF
cat "$OUT_DIR/front_end_survival_summary.md"
log "reports in $OUT_DIR"
