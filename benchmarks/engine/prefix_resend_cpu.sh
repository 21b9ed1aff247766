#!/usr/bin/env bash
# The trained model (launch/model) on the CPU: the same ~500-token prompt sent twice to one
# `llm serve`; the second time its full blocks come from the prefix cache. Prints both times to
# the first token (the server's Timings), the cached prompt tokens and whether the tokens agree;
# then the same with --no-enable-prefix-caching.
#   benchmarks/engine/prefix_resend_cpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
ids=$(python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(3, 4000)) for _ in range(500)))")
for flag in "" --no-enable-prefix-caching; do
  log=$(mktemp)
  "$build/bin/llm" serve --device cpu --port 0 --http-port -1 --metrics-port -1 $flag > "$log" 2>&1 &
  pid=$!
  addr=""
  for _ in $(seq 1 600); do
    addr=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/127.0.0.1:\1/p' "$log" | head -1)
    [[ -n $addr ]] && "$build/bin/llm_client" health --server "$addr" > /dev/null 2>&1 && break
    sleep 0.2
  done
  first=$("$build/bin/llm_client" generate --server "$addr" --prompt-ids "$ids" --max-tokens 8 --temperature 0 --json)
  second=$("$build/bin/llm_client" generate --server "$addr" --prompt-ids "$ids" --max-tokens 8 --temperature 0 --json)
  kill -TERM $pid; wait $pid || true
  python3 - "$first" "$second" "${flag:-caching on}" <<'PY'
import json, sys
a, b = (json.loads(x.strip().splitlines()[-1]) for x in sys.argv[1:3])
ta, tb = a["timings_ms"]["time_to_first_token"], b["timings_ms"]["time_to_first_token"]
print(f"{sys.argv[3]}: TTFT {ta:.1f} ms, then {tb:.1f} ms ({ta / tb:.1f}x); cached prompt tokens "
      f"{b['usage'].get('cached_prompt_tokens', 0)} of {b['usage']['prompt_tokens']}; "
      f"same tokens: {a['token_ids'] == b['token_ids']}")
PY
done
