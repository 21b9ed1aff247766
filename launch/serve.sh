#!/usr/bin/env bash
# The README's main job: serve the repository's small model (launch/model) over gRPC and the
# OpenAI-compatible HTTP API, show one real exchange through each, and keep serving until Ctrl-C
# (which drains and stops it).
#   launch/serve.sh [llm serve flags...]      e.g. --model DIR, --port N, --device cuda
set -euo pipefail
cd "$(dirname "$0")/.."
port=50051
http_port=8000
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [[ ${args[i]} == --port ]] && port=${args[i + 1]}
  [[ ${args[i]} == --http-port ]] && http_port=${args[i + 1]}
done
model_args=()
exchange=(--prompt "The command")
if [[ ! -f launch/model/config.json && " $* " != *" --model "* ]]; then
  # No trained model in this checkout: serve the smallest fixture (no tokenizer: token ids).
  model_args=(--model tests/data/models/llama-tiny)
  exchange=(--prompt-ids 1,2,3,4,5)
fi
build/bin/llm serve --port "$port" "${model_args[@]}" "$@" &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server' INT TERM
for _ in $(seq 1 600); do
  build/bin/llm_client health --server "localhost:$port" >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { wait $server; exit $?; }
  sleep 0.1
done
echo
echo "--- llm_client generate ${exchange[*]} (streamed through the gRPC API) ---"
build/bin/llm_client generate --server "localhost:$port" "${exchange[@]}" --max-tokens 60 \
  --temperature 0.7 --top-p 0.9 --seed 1
if [[ $http_port != -1 ]] && command -v curl > /dev/null && [[ ${exchange[0]} == --prompt ]]; then
  echo "--- curl http://127.0.0.1:$http_port/v1/completions (the OpenAI-compatible API; any OpenAI SDK works) ---"
  curl -sS "http://127.0.0.1:$http_port/v1/completions" -H "Content-Type: application/json" \
    -d "{\"prompt\": \"${exchange[1]}\", \"max_tokens\": 60, \"temperature\": 0.7, \"top_p\": 0.9, \"seed\": 1}"
  echo
fi
echo "--- serving on localhost:$port (gRPC) and http://127.0.0.1:$http_port (HTTP); Ctrl-C drains and stops the server ---"
wait $server
