#!/usr/bin/env bash
# Set up (if needed) and serve the default model (SmolLM2-135M-Instruct) on http://127.0.0.1:8000.
# Extra arguments go to `ttft serve`, e.g. scripts/serve.sh --model dummy:tiny --port 9000
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/ttft serve "$@"
