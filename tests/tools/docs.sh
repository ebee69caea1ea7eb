#!/usr/bin/env bash
# make docs: the collection's docsite, as the Ansible docsite would build it, into tests/output/docsite/build/html.
# antsibull-docs sphinx-init writes the Sphinx project for the working tree's collection (--use-current: the one
# ANSIBLE_COLLECTIONS_PATH finds, .cache/collections) with the theme Sphinx ships (alabaster: nothing beyond
# requirements/ee.txt, which .venv-ee holds); its build.sh renders every plugin's and role's page and the guides of
# docs/docsite, then runs sphinx-build. Offline: intersphinx is off, so links into the ansible-core docs (common
# return values, ansible.builtin modules) stay plain text (--lenient: warnings, not errors); any warning in a guide of
# docs/docsite fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tests/output/docsite
rm -rf "$out"
mkdir -p "$out"
antsibull-docs sphinx-init --use-current --dest-dir "$out" --sphinx-theme alabaster --fail-on-error --lenient \
  --project gpufleet.nvidia --title "gpufleet.nvidia" --html-short-title gpufleet.nvidia gpufleet.nvidia >/dev/null
printf '\n# make docs (tests/tools/docs.sh): offline, no inventories fetched\nintersphinx_mapping = {}\n' >> "$out/conf.py"
log=$out/build.log
if ! bash "$out/build.sh" >"$log" 2>&1; then
  tail -40 "$log" >&2
  echo "docs: the build failed (whole log: $log)" >&2
  exit 1
fi
if grep -E '(ERROR|WARNING)' "$log" | grep -E '/gpufleet/nvidia/docsite/|extra-docs|links\.yml'; then
  echo "docs: the guides of docs/docsite have the warnings above (whole log: $log)" >&2
  exit 1
fi
while read -r page; do
  test -s "$out/build/html/collections/gpufleet/nvidia/docsite/$page.html" \
    || { echo "docs: no page for the guide $page" >&2; exit 1; }
done < <(sed -n 's/^      - //p' docs/docsite/extra-docs.yml)
echo "docs: $out/build/html/index.html ($(grep -c WARNING "$log" || true) warnings, all links into the ansible-core docs)"
