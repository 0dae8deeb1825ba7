#!/usr/bin/env bash
# Set up the test extras (once) and run the whole CPU test suite. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
. .venv/bin/activate
# Two workers (pytest-xdist), a file each at a time so that a module's server or model is built
# once: CI's machine has two cores, and most tests wait on a subprocess or a model step.
exec python -m pytest -q -p no:cacheprovider -n "${TTFT_TEST_WORKERS:-2}" --dist loadfile "$@"
