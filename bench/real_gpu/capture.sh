#!/usr/bin/env bash
# The real-GPU capture (bench/real_gpu/prepare.sh builds what it needs in .gpu/): the host's driver documents,
# discovery, the CDI spec, and GPU containers started through the runtime shim with runc. Results:
# $OUT/gpu-capture.tgz. Run from the repository root on the GPU host, as root.
set -u
export PYTHONUNBUFFERED=1
R=$(pwd)
G="$R/.gpu"
O="$OUT/r"
B=/tmp/b
RUNC=/usr/local/sbin/runc-wrap
SHIM=/usr/local/bin/gpufleet-container-runtime
mkdir -p "$O"
exec > >(tee "$O/log.txt") 2>&1
log() { echo; echo "=== $*"; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
CAPTURE=("$PY" "$R/bench/real_gpu/capture.py")

log env
date -u; uname -a; head -4 /etc/os-release; id; "$PY" --version
log tools
for t in nvidia-smi runc crun docker podman containerd nvidia-ctk nvidia-container-cli ldconfig modinfo mokutil; do
  echo "$t: $(command -v "$t")"
done
log devices
find /dev -maxdepth 2 \( -name "nvidia*" -o -path /dev/char \) -ls 2>&1 | head -50
log proc
tee "$O/proc-version.txt" < /proc/driver/nvidia/version
for d in /proc/driver/nvidia/gpus/*; do echo "# $d"; cat "$d/information"; done | tee "$O/proc-information.txt"
cp /proc/driver/nvidia/params "$O/proc-params.txt"
log pci
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x10de ] || continue
  echo "$d class=$(cat "$d/class") device=$(cat "$d/device") numa=$(cat "$d/numa_node" 2>/dev/null) driver=$(readlink "$d/driver")"
done | tee "$O/pci.txt"
log modules
grep -i nvidia /proc/modules
log ldcache
ldconfig -p | grep -Ei 'nvidia|cuda' | tee "$O/ldconfig-nvidia.txt" | head -80
log driver-files
find /usr/local/nvidia -maxdepth 3 2>/dev/null | head -150 > "$O/usr-local-nvidia.txt"
ls -la /usr/bin/nvidia* 2>&1; mount | grep -i nvidia
log smi
nvidia-smi -L; nvidia-smi -q -x > "$O/nvidia-smi-q-x.xml"; nvidia-smi -q > "$O/nvidia-smi-q.txt"
echo "--- /usr/bin/nvidia-smi:"; head -20 /usr/bin/nvidia-smi
log boot
uname -r; find /boot /lib/modules /sys/firmware/efi -maxdepth 1 2>&1 | head -30
find /lib/modules -name "nvidia*.ko*" 2>/dev/null | head
log discover
timeout 120 "${CAPTURE[@]}" facts "$G/tree" "$O"

log mig-profiles
timeout 60 "${CAPTURE[@]}" mig "$G/tree" "$O"
nvidia-smi mig -lgip > "$O/nvidia-smi-mig-lgip.txt" 2>&1; head -40 "$O/nvidia-smi-mig-lgip.txt"
log nvidia-ctk
if [ -x "$G/nvidia-ctk" ]; then
  "$G/nvidia-ctk" --version
  cat /sys/module/firmware_class/parameters/path > "$O/firmware-class-path.txt"; cat "$O/firmware-class-path.txt"
  for _ in 1 2 3 4 5 6 7 8; do  # alternating, each a process with its start-up: NVIDIA's, then the collection's
    s=$EPOCHREALTIME
    "$G/nvidia-ctk" cdi generate --output="$O/nvidia-ctk-cdi.yaml" > "$O/nvidia-ctk-cdi.log" 2>&1
    rc=$?; echo "nvidia-ctk cdi generate rc=$rc $(awk "BEGIN{print $EPOCHREALTIME - $s}")s"
    s=$EPOCHREALTIME
    "${CAPTURE[@]}" cdi "$G/tree" /tmp/gpufleet-cdi.yaml
    rc=$?; echo "gpufleet cdi generate rc=$rc $(awk "BEGIN{print $EPOCHREALTIME - $s}")s"
  done
  tail -5 "$O/nvidia-ctk-cdi.log"
  "$G/nvidia-ctk" cdi generate --driver-root=/usr/local/nvidia --output="$O/nvidia-ctk-cdi-usr-local-nvidia.yaml" 2>&1 | tail -3
fi

log install
install -m 0755 "$G/runc" /usr/local/sbin/runc-gf
mkdir -p /tmp/seccomp && dpkg-deb -x "$G"/debs/libseccomp2_*.deb /tmp/seccomp
# shellcheck disable=SC2016  # "$@" is the wrapper's own
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/seccomp/usr/lib/x86_64-linux-gnu exec /usr/local/sbin/runc-gf "$@"\n' > "$RUNC"
chmod 0755 "$RUNC"; "$RUNC" --version
"$PY" "$G/tree/tests/tools/install_host_programs.py" --bindir /usr/local/bin --libdir /usr/local/lib/gpufleet \
  --python "$PY" --runtime "$RUNC" | tail -3
mkdir -p /etc/gpufleet
printf '{"runtime": "%s", "index": "/etc/gpufleet/cdi-nvidia.json"}\n' "$RUNC" > /etc/gpufleet/runtime.json
chmod 0644 /etc/gpufleet/runtime.json
log container-cli
/usr/local/bin/nvidia-container-cli info 2>&1 | tee "$O/container-cli-info.txt"
/usr/local/bin/nvidia-container-cli list 2>&1 | tee "$O/container-cli-list.txt" | head -30

log bundle
mkdir -p "$B/rootfs"
for f in "$G"/debs/libc6_*.deb "$G"/debs/busybox-static_*.deb; do dpkg-deb -x "$f" "$B/rootfs"; done
mkdir -p "$B/rootfs/usr/bin" "$B/rootfs/proc" "$B/rootfs/dev" "$B/rootfs/sys" "$B/rootfs/tmp"
for a in sh ls cat grep head wc id; do ln -sf /bin/busybox "$B/rootfs/bin/$a"; done
install -m 0755 "$G/cudacheck" "$B/rootfs/usr/bin/cudacheck"
(cd "$B" && "$RUNC" spec && mv config.json base.json)
GPUCMD='nvidia-smi -L; nvidia-smi --query-gpu=name,uuid,driver_version,compute_cap --format=csv,noheader; cudacheck; ls /dev/nvidia*; id'
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
n=0
ctr() {  # ctr TITLE UID CMD [ENV ...]
  n=$((n + 1)); log "container $n: $1"; shift
  "${CAPTURE[@]}" config "$B" "$@"
  timeout 60 "$SHIM" --root /run/gf run --bundle "$B" "c$n" 2>&1 | tee "$O/container-$n.txt"
  echo "rc=${PIPESTATUS[0]}"
}
ctr "NVIDIA_VISIBLE_DEVICES=all, root (docker run --gpus all ... nvidia-smi)" 0 "$GPUCMD" NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
cp "$B/config.json" "$O/config-shim-out.json"
ctr "NVIDIA_VISIBLE_DEVICES=0, uid 1000" 1000 "$GPUCMD" NVIDIA_VISIBLE_DEVICES=0 NVIDIA_DRIVER_CAPABILITIES=compute,utility
ctr "the GPU's UUID, utility only (no libcuda expected)" 0 "$GPUCMD" "NVIDIA_VISIBLE_DEVICES=$UUID" NVIDIA_DRIVER_CAPABILITIES=utility
ctr "NVIDIA_VISIBLE_DEVICES=none (no GPU expected)" 0 "$GPUCMD" NVIDIA_VISIBLE_DEVICES=none
ctr "no request (no GPU expected)" 0 "$GPUCMD"
log "start timing: the shim with a GPU request, runc alone, the shim with no request; same bundle, 10 rounds"
"${CAPTURE[@]}" timing "$B" "$SHIM" "$RUNC" | tee "$O/start-timing.txt"
log "done"
ls -la "$O"
tar czf "$OUT/gpu-capture.tgz" -C "$O" . && cp "$O/log.txt" "$OUT/log.txt"
