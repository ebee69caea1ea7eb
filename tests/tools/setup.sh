#!/usr/bin/env bash
# Installs the pinned development toolchain into ./.venv (and ./.venv-py38 for the oldest target
# Python), links the working tree in as ansible_collections/gpufleet/nvidia, and gives
# ansible-test its offline get-pip stand-in. Re-running it is a no-op while the locks are unchanged.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

find_python() {  # find_python 3.12 -> path of an interpreter of that version, or nothing
  local v=$1 c
  for c in "python$v" "$(command -v pyenv >/dev/null 2>&1 && pyenv root)/versions/$v"*/bin/python"$v"; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$v'.split('.'))))" 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

if py=$(find_python 3.12); then lock=requirements/dev-py312.txt
elif py=$(find_python 3.11); then lock=requirements/dev-py311.txt
  echo "setup: no Python 3.12 here; using Python 3.11 with ansible-core 2.19 ($lock)"
else echo "setup: need Python 3.12 (or 3.11); none found on PATH or under pyenv" >&2; exit 1
fi

venv_install() {  # venv_install DIR PYTHON LOCK
  local dir=$1 python=$2 lockfile=$3 stamp
  # The interpreter itself, not DIR's link to it: with DIR/bin first on PATH (the Makefile's), find_python names
  # DIR's python, which the rm -rf below would take away before the new venv is made from it.
  python=$(readlink -f "$python")
  stamp="$(sha256sum "$lockfile" | cut -c1-16)-$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
  if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ]; then
    echo "setup: $dir is current ($lockfile)"; return 0
  fi
  echo "setup: installing $lockfile into $dir with $python"
  rm -rf "$dir"
  "$python" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$lockfile" 2>&1 | grep -v "^WARNING: Location 'file:" || true
  "$dir/bin/python" -m pip check >/dev/null
  echo "$stamp" > "$dir/.stamp"
}

venv_install .venv "$py" "$lock"
if py38=$(find_python 3.8); then
  venv_install .venv-py38 "$py38" requirements/target-py38.txt
else
  echo "setup: no Python 3.8 here; the oldest-target unit run will be skipped (a failure under CI=true)"
fi

# The working tree, seen as an installed collection: no copy, no files in the user's home.
mkdir -p .cache/collections/ansible_collections/gpufleet
ln -sfn ../../../.. .cache/collections/ansible_collections/gpufleet/nvidia

# The collections only the tests use (galaxy.yml declares what shipped content needs): installed next to the link,
# nothing to do (and no Galaxy) while the pinned `ansible` package in .venv already carries them.
ANSIBLE_COLLECTIONS_PATH="$root/.cache/collections" .venv/bin/ansible-galaxy collection install \
  -r tests/requirements.yml -p .cache/collections | grep -v "^Starting galaxy collection install process" || true
ANSIBLE_COLLECTIONS_PATH="$root/.cache/collections" .venv/bin/ansible-galaxy collection install --offline \
  -r tests/requirements.yml -p .cache/collections >/dev/null  # fails when one is still missing

# ansible-test's get-pip bootstrap, served locally (see tests/tools/get_pip_standin.py).
pip_version=$(.venv/bin/python - <<'PY'
import re, ansible_test, pathlib
src = (pathlib.Path(ansible_test.__file__).parent / "_internal/python_requirements.py").read_text()
print(re.search(r"default_packages = dict\(\s*pip='([^']+)'", src).group(1))
PY
)
mkdir -p ~/.ansible/test/cache
cp tests/tools/get_pip_standin.py ~/.ansible/test/cache/get_pip_"${pip_version//./_}".py
echo "setup: ready ($(.venv/bin/ansible --version 2>/dev/null | sed -n 1p); get-pip stand-in for pip $pip_version)"
