#!/usr/bin/env bash
# The collection as users get it: build the tarball, install it into an empty folder with
# ansible-galaxy (bundled dependencies already present, no Galaxy), and list its plugins from there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ansible-galaxy collection build --output-path "$work" "$root" >/dev/null
tarball=$(ls "$work"/gpufleet-nvidia-*.tar.gz)
echo "build-check: built $(basename "$tarball") ($(du -k "$tarball" | cut -f1) KiB)"
if tar -tzf "$tarball" | grep -E '(^|/)(\.venv|\.cache|tests/output|\.git)/' ; then
  echo "build-check: the tarball carries development files (above); fix build_ignore in galaxy.yml" >&2; exit 1
fi
mkdir "$work/installed"
ANSIBLE_COLLECTIONS_PATH="$work/installed" ansible-galaxy collection install --force --no-deps -p "$work/installed" "$tarball" >/dev/null
test -f "$work/installed/ansible_collections/gpufleet/nvidia/MANIFEST.json"
# Only the freshly installed copy may be seen: not the working-tree link.
ANSIBLE_COLLECTIONS_PATH="$work/installed" ansible-galaxy collection list gpufleet.nvidia 2>/dev/null | grep -q "gpufleet.nvidia"
modules=$(ANSIBLE_COLLECTIONS_PATH="$work/installed" ansible-doc -t module -l gpufleet.nvidia 2>/dev/null | awk '{print $1}')
expected=$(find "$root/plugins/modules" -maxdepth 1 -name '*.py' ! -name '__init__.py' -printf 'gpufleet.nvidia.%f\n' 2>/dev/null | sed 's/\.py$//' | sort)
if [ "$(echo "$modules" | sort | sed '/^$/d')" != "$(echo "$expected" | sed '/^$/d')" ]; then
  echo "build-check: ansible-doc -l lists [$modules], the tree has [$expected]" >&2; exit 1
fi
echo "build-check: installed into an empty folder; ansible-doc -l lists $(echo "$modules" | sed '/^$/d' | wc -l) module(s)"
# The report's templates (playbooks/templates/report/) travel in the tarball and the installed filters find them.
page=$(ANSIBLE_COLLECTIONS_PATH="$work/installed" ANSIBLE_NOCOLOR=1 ansible localhost -c local -o -m ansible.builtin.debug \
  -a "msg={{ {} | gpufleet.nvidia.fleet_report_model([]) | gpufleet.nvidia.to_report_html }}" 2>&1) || true
if ! grep -q 'border-collapse' <<<"$page" || ! grep -q '<h1>GPU fleet report</h1>' <<<"$page"; then
  echo "build-check: the installed collection cannot render the fleet report: $page" >&2; exit 1
fi
echo "build-check: the installed collection renders the fleet report from its shipped templates"
# The security data (plugins/plugin_utils/data/nvidia_security.json) travels in the tarball and the installed filter
# reads it on the controller.
found=$(ANSIBLE_COLLECTIONS_PATH="$work/installed" ANSIBLE_NOCOLOR=1 ansible localhost -c local -o -m ansible.builtin.debug \
  -a "msg={{ ('535.261.03' | gpufleet.nvidia.driver_security).findings | map(attribute='cves') | flatten }}" 2>&1) || true
if ! grep -q 'CVE-2025-23280' <<<"$found"; then
  echo "build-check: the installed collection cannot read its security data: $found" >&2; exit 1
fi
echo "build-check: the installed collection reads its security data (535.261.03: CVE-2025-23280)"
