#!/usr/bin/env bash
# A GPU load-test scenario in one device call: unpacks the carried binaries (.device/bins.tgz:
# bin/llm, bin/llm_client) and their libraries (.device/bundle.tgz: gRPC, Abseil, ... which the GPU
# machines lack), runs SCRIPT with the given environment, and leaves in $OUT the JSON and text
# reports, the server log and one tarball of the plot folders (data + gnuplot scripts: the GPU
# machines have no gnuplot, so the plots are drawn afterwards with `gnuplot */*.gp`).
#   benchmarks/loadtest/run_device.sh llama3_8b_h100.sh          (env: SCENARIOS, SWEEP_REQUESTS, ...)
set -uo pipefail
source "$(dirname "$0")/../device_prelude.sh"
script=$1
shift
work=/tmp/loadtest-out
mkdir -p "$work"
# Stop the scenario before the device call's own limit so that what it measured still comes back.
BUILD_DIR=$PWD/.device OUT_DIR=$work timeout "${SCENARIO_TIMEOUT_S:-540}" bash "benchmarks/loadtest/$script" "$@"
rc=$?
cp "$work"/*.json "$work"/*_summary.md "$OUT"/ 2> /dev/null
cat "$work"/*.txt > "$OUT/reports.txt" 2> /dev/null
cp "$work"/*.log "$OUT"/ 2> /dev/null
(cd "$work" && tar -czf "$OUT/plots.tgz" --exclude='*.log' --exclude='*.json' --exclude='*.txt' .)
ls "$OUT"
exit $rc
