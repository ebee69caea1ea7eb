#!/usr/bin/env bash
# make test: every step of the suite; after the quick checks, two lanes at once.
#
# 1. quick checks, in order, stopping at the first failure: lint, docs-lint, build-check (about a minute), then
#    galaxy-import while the machine is otherwise idle: galaxy-importer gives ansible-lint a fixed 180 s, which it
#    overran on this machine under a load of 25 ("ERROR: Timeout on call to ansible-lint");
# 2. then at the same time, each lane in order and stopping at its own first failure:
#    * lane 1: the integration tests (the longest step, printed as it runs) but those in `moved` below;
#    * lane 2: the execution environment image first (`make ee EE_BUILD=1`, about 10 minutes from cold: the
#      engine's build containers install the EE's packages from apt and PyPI), then the static steps (unit,
#      unit-py38, controller, sanity, ansible-lint) under `nice`, then the `moved` integration tests, faults and
#      molecule (their own simulated fleets, not niced: they wait on engines and nodes with polled bounds).
#      Lane 1's test_ee_runner.py (well after the lanes start) builds the image again and finds every layer cached
#      (the same tree, a byte-stable collection tarball; ee.sh takes a lock, so it waits while lane 2's build runs);
#      when lane 2's build fails, lane 2 goes on and that test's own build fails with the reason.
#    On the 2-core CI machine integration alone keeps the CPU about 60% busy (61% over this session's run, sampled
#    every 10 s; the fleets' nodes boot, engines restart and playbooks wait on them), which lane 2 fills: CI time is
#    then about the longer lane's instead of the sum of every step (3506 s in a row on this machine). The lanes share
#    no node, engine or fleet name (each pytest run and the molecule scenario have their own prefix; node images are
#    built under a lock per tag, tests/sim/images.py), and the static steps write only under tests/output and
#    temporary folders.
# Lane 2's output goes to tests/output/test-lane2.log and is printed when both lanes are done, and the CPU use to
# tests/output/test-cpu.log; the exit status is a failure when either lane failed, naming it.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
step() { make --no-print-directory "$@"; }
step lint docs-lint build-check galaxy-import || exit 1

mkdir -p tests/output
lane2_log=tests/output/test-lane2.log
cpu_log=tests/output/test-cpu.log
niced=(unit unit-py38 controller sanity ansible-lint)
# integration test files that run in lane 2 (each with a fleet or containers of its own, shared with no other file),
# so that the lanes take about as long. Measured here one step after another: integration 2083 s (of it the first two
# 194 s and 120 s), the static steps 540 s, faults 243 s, molecule 426 s; the apt stand-ins (throwaway containers,
# the driver role's apt tasks run through Ansible) came later.
moved=(tests/integration/test_uninstall_roundtrip.py tests/integration/test_gpu_users.py
  tests/integration/test_driver_apt_standins.py)

(while sleep 30; do echo "$(date +%T) $(head -1 /proc/stat) load $(cut -d' ' -f1-3 /proc/loadavg)"; done) >"$cpu_log" 2>&1 &
sampler=$!
start=$SECONDS
(
  make --no-print-directory .venv-ee/.installed >/dev/null
  EE_BUILD=1 tests/tools/step.sh tests/tools/ee.sh ||
    echo "==> lane 2: make ee EE_BUILD=1 failed; lane 1's tests/integration/test_ee_runner.py builds it again"
  for s in "${niced[@]}"; do
    nice -n 10 make --no-print-directory "$s" || { echo "==> lane 2: $s failed"; exit 1; }
  done
  tests/tools/integration.sh "${moved[@]}" || { echo "==> lane 2: integration (${moved[*]}) failed"; exit 1; }
  for s in faults molecule; do
    step "$s" || { echo "==> lane 2: $s failed"; exit 1; }
  done
  echo "==> lane 2: passed in $((SECONDS - start))s"
) >"$lane2_log" 2>&1 &
lane2_pid=$!
echo "==> lane 2 (the EE image, ${niced[*]} under nice, then ${moved[*]}, faults, molecule) runs in the background; its log: $lane2_log"

ignore=()
for f in "${moved[@]}"; do ignore+=("--ignore=$f"); done
lane1_rc=0
tests/tools/integration.sh "${ignore[@]}" tests/integration || lane1_rc=1
[ $lane1_rc -eq 0 ] && echo "==> lane 1 (integration): passed in $((SECONDS - start))s"
[ $lane1_rc -eq 0 ] || echo "==> lane 1 (integration): failed"
wait "$lane2_pid"
lane2_rc=$?
kill "$sampler" 2>/dev/null
echo "==> lane 2, its output:"
cat "$lane2_log"
if [ $lane1_rc -ne 0 ] || [ $lane2_rc -ne 0 ]; then
  echo "==> make test failed in$([ $lane1_rc -eq 0 ] || echo " lane 1 (integration)")$([ $lane2_rc -eq 0 ] || echo " lane 2")"
  exit 1
fi
echo "==> both lanes passed in $((SECONDS - start))s"
