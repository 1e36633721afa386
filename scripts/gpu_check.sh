#!/usr/bin/env bash
# The vLLM plugin on a real engine, on one GPU (not run in CI: no machine here has a GPU).
# Builds a tiny random-weight Qwen 3.8 model on the real vocabulary, starts
#   vllm serve MODEL --tokenizer-mode qwen_encode --tool-call-parser qwen_encode
#                    --reasoning-parser qwen_encode --enable-auto-tool-choice
# on loopback, sends one streaming chat request that ends in a tool call, and prints the prompt
# IDs the engine saw (against Encoder.encode_messages), the streamed calls and the time.
# Budget: under 5 minutes on one GPU. Uses the vLLM venv of scripts/integration_env.sh.
#
# usage: scripts/gpu_check.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
VENVS=${INTEGRATION_VENVS:-.integration-venvs}
PY="$VENVS/vllm/bin/python"
[ -x "$PY" ] || { echo "no vLLM venv: run scripts/integration_env.sh vllm first" >&2; exit 2; }
PORT=${1:-18123}
WORK=$(mktemp -d)
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
start=$(date +%s)
"$PY" scripts/gpu_check.py build "$WORK/model"
"$VENVS/vllm/bin/vllm" serve "$WORK/model" --host 127.0.0.1 --port "$PORT" \
    --tokenizer-mode qwen_encode --tool-call-parser qwen_encode --reasoning-parser qwen_encode \
    --enable-auto-tool-choice --max-model-len 4096 --enforce-eager \
    --gpu-memory-utilization 0.3 >"$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 240); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then break; fi
    if ! kill -0 "$SERVER" 2>/dev/null; then tail -50 "$WORK/server.log"; exit 1; fi
    sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { tail -50 "$WORK/server.log"; exit 1; }
echo "server up after $(($(date +%s) - start)) s"
status=0
"$PY" scripts/gpu_check.py ask "http://127.0.0.1:$PORT" "$WORK/model" || status=$?
echo "total $(($(date +%s) - start)) s"
exit $status
