#!/usr/bin/env bash
# How much load `llm loadtest` itself can generate: against loadtest_fake_server, which answers
# every Generate at once (one token a message), so the generator (and gRPC) is all that is timed.
# Both processes share this machine's cores; the generator's own CPU time is reported beside the
# rates, so "requests per generator CPU-second" is the figure that carries to other machines.
# Usage: benchmarks/loadtest/generator_bench.sh   (BUILD_DIR=build, OUT_DIR=DIR, SCALE=1)
source "$(dirname "$0")/lib.sh"
FAKE=$BUILD_DIR/bin/loadtest_fake_server
need_binaries "$LLM" "$LLM_CLIENT" "$FAKE"
SCALE=${SCALE:-1}  # multiplies the request counts
n() { echo $(($1 * SCALE)); }

start_server fake TERM "$FAKE"
wait_serving
common=(--input-len 128 --progress-interval 0 --connections 4)
loadtest gen_requests "${common[@]}" --concurrency 256 --num-requests "$(n 30000)" --warmup-requests 1000 \
  --output-len 16 > /dev/null
loadtest gen_requests_1tok "${common[@]}" --concurrency 256 --num-requests "$(n 40000)" --warmup-requests 1000 \
  --output-len 1 > /dev/null
loadtest gen_tokens "${common[@]}" --concurrency 64 --num-requests "$(n 1000)" --warmup-requests 64 \
  --output-len 1024 > /dev/null
loadtest gen_poisson "${common[@]}" --rate 3000 --num-requests "$(n 30000)" --warmup-requests 1000 \
  --output-len 16 > /dev/null
stop_server
fake_line=$(grep "Generate calls" "$SERVER_LOG" || true)

python3 - "$OUT_DIR" "$fake_line" << 'PY'
import json, os, sys
out, fake = sys.argv[1], sys.argv[2]
rows = [("gen_requests", "closed loop, 256 in flight, 16 tokens each"),
        ("gen_requests_1tok", "closed loop, 256 in flight, 1 token each"),
        ("gen_tokens", "closed loop, 64 in flight, 1024 tokens each"),
        ("gen_poisson", "Poisson 3000 req/s offered, 16 tokens each")]
cpu = os.cpu_count()
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"CPU: {model}, {cpu} cores (generator and fake server share them)")
print("| load | requests | req/s | streamed tok/s | generator CPU s | req per CPU-s | tok per CPU-s | send lag P99 ms | errors |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for name, what in rows:
    r = json.load(open(f"{out}/{name}.json"))["runs"][0]
    t, g = r["throughput"], r["generator"]
    n, tok, c = r["requests"]["completed"], r["tokens"]["output"], g["cpu_s"]
    print(f"| {what} | {n} | {t['requests_per_s']:.0f} | {t['output_tokens_per_s']:.0f} | {c:.2f} | "
          f"{n / c:.0f} | {tok / c:.0f} | {g['send_lag_ms']['p99']:.2f} | {r['requests']['failed']} |")
print(f"fake server: {fake.split(': ', 1)[-1]} (warm-up included)")
PY
