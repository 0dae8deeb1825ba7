#!/usr/bin/env bash
# Set up (if needed) and run the whole CPU test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python -m pytest -q -p no:cacheprovider "$@"
