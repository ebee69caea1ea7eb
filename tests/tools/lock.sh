#!/usr/bin/env bash
# Re-resolves requirements/*.in into fully pinned lock files, each in a throw-away venv of the
# interpreter it is for. Run it on purpose (make lock), commit the result with the reason.
set -euo pipefail
cd "$(dirname "$0")/../.."
lock() {  # lock PYTHON IN OUT
  local tmp; tmp=$(mktemp -d)
  "$1" -m venv "$tmp/venv"
  "$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check -r "$2"
  "$tmp/venv/bin/python" -m pip freeze --exclude-editable | grep -v '^pip==' > "$3"
  rm -rf "$tmp"; echo "lock: $3"
}
pyenv_py() { find "$(pyenv root)/versions" -path "*/versions/$1.*/bin/python$1" 2>/dev/null | sort -V | tail -1; }
lock "$(command -v python3.12 || pyenv_py 3.12)" requirements/dev.in requirements/dev-py312.txt
lock "$(command -v python3.11 || pyenv_py 3.11)" requirements/dev-py311.in requirements/dev-py311.txt
lock "$(command -v python3.8 || pyenv_py 3.8)" requirements/target-py38.in requirements/target-py38.txt
lock "$(command -v python3.11 || pyenv_py 3.11)" requirements/bench.in requirements/bench.txt  # make bench only
lock "$(command -v python3.12 || pyenv_py 3.12)" requirements/ee.in requirements/ee.txt  # make ee, make docs-lint
lock "$(command -v python3.12 || pyenv_py 3.12)" requirements/importer.in requirements/importer.txt  # make galaxy-import
