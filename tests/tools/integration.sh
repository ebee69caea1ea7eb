#!/usr/bin/env bash
# Runs pytest over tests/integration (the simulated GPU fleet, tests/sim) when a Docker engine answers.
# No engine: skipped with a message, or a failure when CI=true (CI must run these).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if ! docker info >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then echo "integration: no Docker engine answers, and CI must run the fleet tests" >&2; exit 1; fi
  echo "==> integration: skipped, no Docker engine answers (start dockerd to run tests/integration)"; exit 0
fi
for tool in debootstrap gcc; do
  command -v "$tool" >/dev/null || { echo "integration: $tool is needed to build the simulated nodes" >&2; exit 1; }
done
start=$SECONDS
# `integration.sh faults`: the fault-injection suite (make faults); without it every other integration test. Further
# arguments replace `tests/integration` as pytest's paths (test files, or `--ignore=FILE tests/integration`: make
# test's lanes split the files, tests/tools/test_all.sh).
if [ "${1:-}" = faults ]; then what=faults; marker="faults"; shift; else what=integration; marker="integration and not faults"; fi
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tests/integration)
echo "==> python -m pytest -q -p no:cacheprovider -m \"$marker\" ${paths[*]}"
python -m pytest -q -p no:cacheprovider -s -m "$marker" --durations=10 "${paths[@]}"
echo "==> $what: passed in $((SECONDS - start))s"
