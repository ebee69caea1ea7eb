#!/usr/bin/env bash
# make ee: the execution environment's build context. Builds the collection tarball, checks that
# `ansible-builder introspect` of the installed collection finds its Python and system needs
# (meta/execution-environment.yml) and none of the test-only collections' (community.docker: docker, paramiko,
# requests), then renders extensions/ee/execution-environment.yml into tests/output/ee/context with
# `ansible-builder create`. Building that context needs the base image's registry, Galaxy and PyPI.
# EE_BUILD=1 also builds the image gpufleet-nvidia-ee:latest HERE from tests/ee/execution-environment.yml: the same
# EE on the simulated fleet's local Debian base image (no registry), with the collection's dependencies packed from
# the toolchain's ansible package (no Galaxy) and pip through this machine's CA bundle. Docker's layer cache keeps
# a rebuild to the layers after the collection tarball, and to none when the tree is the same (the tarball is
# repacked byte-stable).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
builder=.venv-ee/bin/ansible-builder
out=tests/output/ee
# One build at a time: make test builds the image in lane 2 while lane 1's test_ee_runner.py asks for it too
# (tests/tools/test_all.sh); the later one waits here, then finds every layer cached (the same tree).
mkdir -p tests/output
exec 9>tests/output/ee.lock
flock -n 9 || { echo "ee: another build holds tests/output/ee.lock; waiting for it"; flock 9; }
rm -rf "$out" && mkdir -p "$out/collections"
ansible-galaxy collection build --force --output-path "$out/collections" . >/dev/null
mv "$out"/collections/gpufleet-nvidia-*.tar.gz "$out/collections/gpufleet-nvidia.tar.gz"
# the same tree, the same bytes (ansible-galaxy stamps the build's time in it): a rebuild of it stays cached
python tests/tools/ee_collections.py --repack "$out/collections/gpufleet-nvidia.tar.gz"

# Introspect the collection as an EE build installs it: from the tarball, with the dependencies galaxy.yml names
# (from the toolchain's ansible package: no Galaxy here), and nothing else.
inst="$out/introspect"
ANSIBLE_COLLECTIONS_PATH="$inst" ansible-galaxy collection install --no-deps -p "$inst" \
  "$out/collections/gpufleet-nvidia.tar.gz" >/dev/null
site=$(python -c 'import ansible_collections, os; print(os.path.dirname(ansible_collections.__path__[0]))')
for dep in $(python -c 'import yaml; print(" ".join(yaml.safe_load(open("galaxy.yml"))["dependencies"]))'); do
  ns=${dep%%.*} name=${dep#*.}
  mkdir -p "$inst/ansible_collections/$ns"
  cp -r "$site/ansible_collections/$ns/$name" "$inst/ansible_collections/$ns/"
done
"$builder" introspect "$inst" > "$out/introspect.yml"
cat "$out/introspect.yml"
for want in "kubernetes>=24.2.0  # from collection gpufleet.nvidia" "openssh-clients [platform:rpm]  # from collection gpufleet.nvidia" \
  "helm [platform:fedora]  # from collection gpufleet.nvidia" "kustomize [platform:debian-trixie]  # from collection gpufleet.nvidia"; do
  grep -qF -- "$want" "$out/introspect.yml" || { echo "ee: introspect does not find '$want'" >&2; exit 1; }
done
if grep -iE "^- '(docker|paramiko)\b" "$out/introspect.yml"; then
  echo "ee: the EE would carry a test-only collection's requirements (above); see galaxy.yml dependencies" >&2; exit 1
fi
echo "ee: introspect finds the collection's needs and no test-only collection's"

"$builder" create -f extensions/ee/execution-environment.yml -c "$out/context" --output-filename Dockerfile >/dev/null
test -f "$out/context/_build/collections/gpufleet-nvidia.tar.gz"
grep -q "ansible-galaxy collection install" "$out/context/Dockerfile"
echo "ee: build context in $out/context (docker build -f $out/context/Dockerfile -t gpufleet-nvidia-ee $out/context)"
[ "${EE_BUILD:-}" = "1" ] || exit 0

start=$(date +%s)
base=$(python -c 'import sys; sys.path.insert(0, "."); from tests.sim import images; print(images.build_base("trixie"))')
local_dir="$out/local"
mkdir -p "$local_dir"
cp /etc/ssl/certs/ca-certificates.crt "$local_dir/ca-certificates.crt"
cp tests/ee/ee-pkgmgr "$local_dir/ee-pkgmgr"
# The dependencies (galaxy.yml's and theirs, from the toolchain's ansible package) as collection artifacts, the same
# bytes on every build (tests/tools/ee_collections.py); local/requirements.yml names them and the collection's tarball.
deps=$(python tests/tools/ee_collections.py "$site" "$out/collections")
echo "collections:" > "$local_dir/requirements.yml"
for dep in gpufleet.nvidia $deps; do
  echo "  - {name: /build/collections/${dep%%.*}-${dep#*.}.tar.gz, type: file}" >> "$local_dir/requirements.yml"
done
"$builder" create -f tests/ee/execution-environment.yml -c "$out/local-context" --output-filename Dockerfile >/dev/null
docker build -q --force-rm -f "$out/local-context/Dockerfile" --build-arg "EE_BASE_IMAGE=$base" \
  --build-arg ANSIBLE_GALAXY_CLI_COLLECTION_OPTS=--offline -t gpufleet-nvidia-ee:latest "$out/local-context"
docker run --rm gpufleet-nvidia-ee:latest ansible-galaxy collection list gpufleet.nvidia
echo "ee: built gpufleet-nvidia-ee:latest from $base in $(( $(date +%s) - start )) s"
