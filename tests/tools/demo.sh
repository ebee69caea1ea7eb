#!/usr/bin/env bash
# The main job: build what is missing, bring up the default simulated fleet (or reuse the one a
# previous `make demo` left running), and run the playbooks against it.
# `GPUFLEET_DEMO_DOWN=1 make demo` tears the demo fleet down instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
prefix=gpufleet-demo
config=tests/sim/fleets/default.yml
inventory=tests/sim/build/fleets/$prefix/inventory.yml
out=$root/.cache/demo

if [ "${GPUFLEET_DEMO_DOWN:-}" = 1 ]; then exec python tests/sim/fleet.py down --name "$prefix"; fi
if ! docker info >/dev/null 2>&1; then
  echo "demo: no Docker engine answers; install docker.io and start dockerd (as .ci/run does)" >&2; exit 1
fi

nodes=$(python -c 'import sys, yaml; print(len(yaml.safe_load(open(sys.argv[1]))["nodes"]))' "$config")
running=$(docker ps -q --filter "label=gpufleet.sim.fleet=$prefix" | wc -l)
if [ -f "$inventory" ] && [ "$running" -eq "$nodes" ]; then
  echo "demo: reusing the running fleet $prefix ($running nodes)"
else
  python tests/sim/fleet.py down --name "$prefix" >/dev/null 2>&1 || true
  python tests/sim/fleet.py up --config "$config" --name "$prefix"
fi

echo "==> ansible-playbook -i $inventory tests/sim/playbooks/prepare.yml  (the validation image, once)"
ansible-playbook -i "$inventory" tests/sim/playbooks/prepare.yml

echo "==> ansible-playbook -i $inventory playbooks/site.yml"
start=$SECONDS
rc=0
ansible-playbook -i "$inventory" playbooks/site.yml -e "report_dir=$out/report" || rc=$?
echo "demo: site.yml finished in $((SECONDS - start))s with exit code $rc"
if [ -f "$out/report/fleet-report.md" ]; then
  head -n 5 "$out/report/fleet-report.md"
  echo "demo: the fleet report is in $out/report/ (fleet-report.md, fleet-report.json, fleet-report.html)"
fi
echo "demo: the fleet $prefix stays up (a second \`make demo\` reuses it); GPUFLEET_DEMO_DOWN=1 make demo removes it"
exit "$rc"
