#!/usr/bin/env bash
# make test: every step of the suite, in two lanes at once after the quick checks.
#
# 1. quick checks, in order, stopping at the first failure: lint, docs-lint, build-check (about a minute);
# 2. then at the same time, each lane in order and stopping at its own first failure:
#    * the fleet lane (integration, faults, molecule): simulated nodes booting, engines restarting, playbooks
#      waiting on them; on the 2-core CI machine it keeps about half the CPU idle (tests/output/test-cpu.log);
#    * the static lane (unit, unit-py38, controller, sanity, ansible-lint), under `nice` so that it takes the CPU
#      the fleet lane leaves idle rather than slowing the fleet's timed waits.
#    CI time is then the fleet lane's plus a little, instead of the two lanes' sum. The two lanes share nothing: the
#    static lane starts no node and no engine, and writes only under tests/output and temporary folders.
# The static lane's output goes to tests/output/test-static.log and is printed when both lanes are done; the exit
# status is a failure when either lane failed, naming it.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
step() { make --no-print-directory "$@"; }
step lint docs-lint build-check || exit 1

mkdir -p tests/output
static_log=tests/output/test-static.log
cpu_log=tests/output/test-cpu.log
static_steps=(unit unit-py38 controller sanity ansible-lint)
fleet_steps=(integration faults molecule)

# CPU use every 30 s while the lanes run (the fourth and fifth fields of /proc/stat's cpu line are idle time)
(while sleep 30; do echo "$(date +%T) $(head -1 /proc/stat) load $(cut -d' ' -f1-3 /proc/loadavg)"; done) >"$cpu_log" 2>&1 &
sampler=$!
start=$SECONDS
(
  for s in "${static_steps[@]}"; do
    nice -n 10 make --no-print-directory "$s" || { echo "==> static lane: $s failed"; exit 1; }
  done
  echo "==> static lane: passed in $((SECONDS - start))s"
) >"$static_log" 2>&1 &
static=$!
echo "==> static lane (${static_steps[*]}) started in the background, its log: $static_log"

fleet_rc=0
for s in "${fleet_steps[@]}"; do
  step "$s" || { fleet_rc=1; echo "==> fleet lane: $s failed"; break; }
done
[ $fleet_rc -eq 0 ] && echo "==> fleet lane: passed in $((SECONDS - start))s"
wait "$static"
static_rc=$?
kill "$sampler" 2>/dev/null
echo "==> static lane (${static_steps[*]}), its output:"
cat "$static_log"
[ $static_rc -eq 0 ] && [ $fleet_rc -eq 0 ] || {
  echo "==> make test failed:$([ $static_rc -eq 0 ] || echo " static lane")$([ $fleet_rc -eq 0 ] || echo " fleet lane")"
  exit 1
}
