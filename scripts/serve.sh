#!/usr/bin/env bash
# Set up what serving needs (once) and serve the default model (SmolLM2-135M-Instruct) on
# http://127.0.0.1:8000. Extra arguments go to `ttft serve`, e.g.
#   bash scripts/serve.sh --model dummy:tiny --port 9000
#   bash scripts/serve.sh /models/Llama-3.1-8B-Instruct --max-model-len 8192
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh serve
exec .venv/bin/ttft serve "$@"
