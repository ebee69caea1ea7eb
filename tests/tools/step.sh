#!/usr/bin/env bash
# step.sh CMD...: print the command, run it, print how long it took (and fail as it fails).
set -uo pipefail
echo "==> $*"
start=$(date +%s%N)
"$@"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '<== %d.%01ds%s: %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$([ $rc -eq 0 ] || echo " (exit $rc)")" "$*"
exit $rc
