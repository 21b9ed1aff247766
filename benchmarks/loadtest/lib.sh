# Shared harness of the load-test scenarios (source it): start `llm serve` (or any server command),
# wait for its gRPC health to say SERVING, run `llm loadtest`, stop the server.
#   BUILD_DIR   the build tree with bin/llm and bin/llm_client (default: build)
#   OUT_DIR     where reports, plots and logs go (default: a fresh folder under /tmp)
#   SERVE_TIMEOUT_S  seconds to wait for SERVING (default 600: large models load for minutes)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$REPO/build}
LLM=$BUILD_DIR/bin/llm
LLM_CLIENT=$BUILD_DIR/bin/llm_client
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/llm-loadtest.XXXXXX)}
SERVE_TIMEOUT_S=${SERVE_TIMEOUT_S:-600}
mkdir -p "$OUT_DIR"
SERVER_PID=""
SERVER_ADDR=""
SERVER_STOP_SIGNAL=TERM

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

need_binaries() {
  local b
  for b in "$@"; do
    [[ -x $b ]] || { log "missing $b (build it: cmake --build $BUILD_DIR --target $(basename "$b"))"; exit 2; }
  done
}

# start_server NAME STOP_SIGNAL COMMAND...: runs COMMAND in the background, logging to
# $OUT_DIR/NAME.log. STOP_SIGNAL drains it (TERM for llm serve, USR1 for mpirun).
start_server() {
  local name=$1
  SERVER_STOP_SIGNAL=$2
  shift 2
  log "starting: $*"
  # Created here, not by the background process's redirection, which may come after wait_serving
  # first reads it (seen on a loaded 2-core machine).
  : > "$OUT_DIR/$name.log"
  "$@" >> "$OUT_DIR/$name.log" 2>&1 &
  SERVER_PID=$!
  SERVER_LOG=$OUT_DIR/$name.log
  trap stop_server EXIT
}

# wait_serving [ADDRESS]: the address is read from the server's "listening on HOST:PORT" line
# unless given; then polls grpc.health.v1 until SERVING.
wait_serving() {
  local deadline=$((SECONDS + SERVE_TIMEOUT_S))
  SERVER_ADDR=${1:-}
  while [[ -z $SERVER_ADDR ]]; do
    SERVER_ADDR=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/127.0.0.1:\1/p' "$SERVER_LOG" | head -1)
    [[ -n $SERVER_ADDR ]] && break
    kill -0 "$SERVER_PID" 2> /dev/null || { log "the server exited:"; tail -20 "$SERVER_LOG" >&2; exit 1; }
    ((SECONDS < deadline)) || { log "no listening line in $SERVE_TIMEOUT_S s"; exit 1; }
    sleep 0.2
  done
  until "$LLM_CLIENT" health --server "$SERVER_ADDR" > /dev/null 2>&1; do
    kill -0 "$SERVER_PID" 2> /dev/null || { log "the server exited:"; tail -20 "$SERVER_LOG" >&2; exit 1; }
    ((SECONDS < deadline)) || { log "not SERVING after $SERVE_TIMEOUT_S s"; exit 1; }
    sleep 0.5
  done
  log "serving on $SERVER_ADDR"
}

# wait_device_free: with DEVICE=cuda, until no process holds it (a stopped server's memory is released
# when its last process is gone; the next server sizes its KV cache from what is free).
wait_device_free() {
  [[ ${DEVICE:-} == cuda ]] || return 0
  local i
  for i in $(seq 1 120); do
    [[ -z $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2> /dev/null) ]] && return 0
    sleep 0.5
  done
  log "the GPU is still in use: $(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader)"
}

# stop_server: drains the server (its signal), waits up to 60 s, then kills it.
stop_server() {
  [[ -n $SERVER_PID ]] || return 0
  if kill -0 "$SERVER_PID" 2> /dev/null; then
    kill -"$SERVER_STOP_SIGNAL" "$SERVER_PID" 2> /dev/null || true
    for _ in $(seq 1 600); do
      kill -0 "$SERVER_PID" 2> /dev/null || break
      sleep 0.1
    done
    kill -KILL "$SERVER_PID" 2> /dev/null || true
  fi
  wait "$SERVER_PID" 2> /dev/null || true
  SERVER_PID=""
  log "server stopped (log: $SERVER_LOG)"
}

# loadtest NAME FLAGS...: `llm loadtest` against the server; report $OUT_DIR/NAME.json, plots in
# $OUT_DIR/NAME/, the human report in $OUT_DIR/NAME.txt (and on stdout). Returns its exit code.
loadtest() {
  local name=$1
  shift
  log "llm loadtest $name: $*"
  local rc=0
  "$LLM" loadtest --target "$SERVER_ADDR" --json-out "$OUT_DIR/$name.json" --plot-dir "$OUT_DIR/$name" "$@" \
    | tee "$OUT_DIR/$name.txt" || rc=$?
  return $rc
}
