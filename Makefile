# gpufleet.nvidia: the one entry point. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT := $(abspath .)
VENV := $(ROOT)/.venv
COLLECTION_DIR := $(ROOT)/.cache/collections/ansible_collections/gpufleet/nvidia
export PATH := $(VENV)/bin:$(PATH)
PYVER = $(shell $(VENV)/bin/python -c "import sys; print('%d.%d' % sys.version_info[:2])")
export ANSIBLE_COLLECTIONS_PATH := $(ROOT)/.cache/collections
export ANSIBLE_FORCE_COLOR := 0
export PY_COLORS := 0
# Every step says what it runs before running it.
run = $(ROOT)/tests/tools/step.sh $(1)

.PHONY: bench k8s-live help setup lock test lint unit unit-py38 controller sanity ansible-lint integration faults build-check galaxy-import molecule demo build changelog clean ee docs-lint docs

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

setup: ## apt packages + a running Docker engine (tests/tools/host_setup.sh), the pinned toolchain in .venv, the collection link
	@tests/tools/host_setup.sh
	@tests/tools/setup.sh

lock: ## re-resolve requirements/*.in into the pinned lock files (needs the network)
	@tests/tools/lock.sh

test: setup ## the whole test suite: quick checks, then the static and the fleet lanes at once (tests/tools/test_all.sh)
	@tests/tools/test_all.sh
	@echo "==> make test: every step passed"

lint: ## ruff over every Python file, and the changelog fragments
	@$(call run,ruff check .)
	@$(call run,ruff format --check .)
	@$(call run,antsibull-changelog lint)

unit: ## pytest over tests/unit: modules, module_utils, the simulated fleet (no controller code in the process)
	@$(call run,python -m pytest -q -p no:cacheprovider -n auto tests/unit)

unit-py38: ## the stdlib-only module_utils tests under the oldest target Python (3.8)
	@if ! ls tests/unit/plugins/module_utils/*/test_*.py >/dev/null 2>&1; then \
	  echo "==> unit-py38: no module_utils tests in the tree yet"; \
	elif [ -x .venv-py38/bin/python ]; then \
	  $(call run,.venv-py38/bin/python -m pytest -q -p no:cacheprovider -n auto -m "not controller" tests/unit/plugins/module_utils); \
	elif [ "$${CI:-}" = "true" ]; then \
	  echo "unit-py38: no Python 3.8 (.venv-py38), and CI must run the target-side tests under the oldest target Python (make setup makes it where a python3.8 is found)" >&2; exit 1; \
	else echo "==> unit-py38: skipped, no Python 3.8 on this machine (CI=true makes this a failure)"; fi

controller: ## pytest over tests/controller: filters, plugin_utils, roles and playbooks run by ansible-playbook on localhost
	@$(call run,python -m pytest -q -p no:cacheprovider -n auto tests/controller)

sanity: ## ansible-test sanity on the working tree, no ignore file
	@cd $(COLLECTION_DIR) && export ANSIBLE_TEST_CONTENT_ROOT=$(COLLECTION_DIR) && \
	  $(call run,ansible-test sanity --color no --python $(PYVER) --requirements)

ansible-lint: ## ansible-lint, production profile
	@$(call run,ansible-lint --offline)

integration: ## pytest over tests/integration on the simulated fleet, when a Docker engine answers
	@tests/tools/integration.sh

faults: ## fault injection on one simulated fleet (full disk, killed module, node restart, refused config, two runs at once): tests/output/faults.md
	@tests/tools/integration.sh faults

build-check: ## build the collection tarball, install it into an empty folder, list its plugins
	@$(call run,tests/tools/check_build.sh)

galaxy-import: .venv-importer/.installed ## galaxy-importer on the built tarball (ansible-lint and ansible-doc on, offline): zero warnings; require_v1_or_greater from 1.0.0 (GALAXY_IMPORTER_REQUIRE_V1)
	@$(call run,tests/tools/galaxy_import.sh)

.venv-importer/.installed: requirements/importer.txt
	$(VENV)/bin/python -m venv .venv-importer
	.venv-importer/bin/pip install -q --disable-pip-version-check -r requirements/importer.txt
	touch $@

molecule: ## every molecule scenario, when a Docker engine answers
	@tests/tools/molecule.sh

bench: setup .venv-bench/.installed ## start-path, discovery and fleet timings on the simulated fleet (not in make test): bench/results/<date>.{json,md,png}
	@$(call run,python bench/bench.py)

k8s-live: setup ## NVIDIA's device plugin and GFD (GPUFLEET_K8S_LIVE_BIN, built from source) under the kubelet stand-in on a simulated node, root (not in make test): bench/k8s-live/<date>.{json,md}
	@$(call run,python tests/tools/kubelet_standin/live.py)

ee: setup .venv-ee/.installed ## the execution environment's build context (tests/output/ee/context): collection tarball, introspected needs, ansible-builder create (EE_BUILD=1 also builds the image)
	@$(call run,tests/tools/ee.sh)

docs-lint: .venv-ee/.installed ## antsibull-docs lint-collection-docs --plugin-docs --check-extra-docs-refs: every plugin's and role's documentation and the docsite guides (docs/docsite: RST, labels, plugin references), zero errors
	@$(call run,env PATH=$(ROOT)/.venv-ee/bin:$(PATH) ANSIBLE_COLLECTIONS_PATH=$(ANSIBLE_COLLECTIONS_PATH):$(VENV)/lib/python$(PYVER)/site-packages .venv-ee/bin/antsibull-docs lint-collection-docs --plugin-docs --check-extra-docs-refs .)

docs: .venv-ee/.installed ## the docsite (antsibull-docs sphinx-init + build, offline): plugin and role pages and the guides of docs/docsite, in tests/output/docsite/build/html
	@$(call run,env PATH=$(ROOT)/.venv-ee/bin:$(PATH) ANSIBLE_COLLECTIONS_PATH=$(ANSIBLE_COLLECTIONS_PATH):$(VENV)/lib/python$(PYVER)/site-packages tests/tools/docs.sh)

.venv-ee/.installed: requirements/ee.txt
	$(VENV)/bin/python -m venv .venv-ee
	.venv-ee/bin/pip install -q --disable-pip-version-check -r requirements/ee.txt
	touch $@

.venv-bench/.installed: requirements/bench.txt
	python3 -m venv .venv-bench
	.venv-bench/bin/pip install -q --disable-pip-version-check -r requirements/bench.txt
	touch $@

demo: setup ## the main job: bring up the simulated fleet and run site.yml against it
	@tests/tools/demo.sh

build: setup ## gpufleet-nvidia-<version>.tar.gz in the repo root
	@$(call run,ansible-galaxy collection build --force .)

changelog: setup ## lint the fragments and render CHANGELOG.rst
	@$(call run,antsibull-changelog lint)
	@$(call run,antsibull-changelog release)

clean: ## remove what the tests and builds left behind (not the toolchain)
	rm -rf tests/output .pytest_cache .ruff_cache .hypothesis .tmp gpufleet-nvidia-*.tar.gz
