#!/bin/bash
# The real-GPU capture (bench/real_gpu/prepare.sh builds what it needs in .gpu/): the host's driver documents,
# discovery, the CDI spec, and GPU containers started through the runtime shim with runc. Results: $OUT/gpu-capture.tgz.
set -u
export PYTHONUNBUFFERED=1
R=$(pwd); G=$R/.gpu; O=$OUT/r; mkdir -p "$O"
exec > >(tee "$O/log.txt") 2>&1
log(){ echo; echo "=== $*"; }
PY=/usr/bin/python3; [ -x $PY ] || PY=$(command -v python3)
log env; date -u; uname -a; cat /etc/os-release | head -4; id; $PY --version; ls -l /usr/bin/python3
log tools; for t in nvidia-smi runc crun docker podman containerd ctr nvidia-ctk nvidia-container-cli ldconfig modinfo mokutil lspci dpkg; do echo "$t: $(command -v $t)"; done
log devices; ls -la /dev/nvidia* /dev/char 2>&1 | head -40; ls -la /dev/nvidia-caps 2>&1
log proc; cat /proc/driver/nvidia/version | tee "$O/proc-version.txt"
for d in /proc/driver/nvidia/gpus/*; do echo "# $d"; cat "$d/information"; done | tee "$O/proc-information.txt"
cat /proc/driver/nvidia/params > "$O/proc-params.txt"; ls -la /proc/driver/nvidia/ /proc/driver/nvidia/capabilities 2>&1
log pci; for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor)" = 0x10de ] || continue; echo "$d class=$(cat $d/class) device=$(cat $d/device) subsys=$(cat $d/subsystem_vendor):$(cat $d/subsystem_device) numa=$(cat $d/numa_node 2>/dev/null) driver=$(readlink $d/driver) iommu=$(readlink $d/iommu_group)"; done | tee "$O/pci.txt"
log modules; grep -i nvidia /proc/modules; cat /sys/module/nvidia/version 2>&1; ls /sys/module | grep -i nvidia
log ldcache; ldconfig -p | grep -Ei 'nvidia|cuda|libnvoptix|libGLX_nv|libEGL_nv' | tee "$O/ldconfig-nvidia.txt" | head -80; cat /etc/ld.so.conf.d/* 2>&1 | head
log driver-files; ls -la /usr/local/nvidia 2>&1; find /usr/local/nvidia -maxdepth 3 2>/dev/null | head -150 > "$O/usr-local-nvidia.txt"; wc -l "$O/usr-local-nvidia.txt"; ls -la /usr/bin/nvidia* 2>&1; mount | grep -i nvidia
log smi; nvidia-smi -L; nvidia-smi -q -x > "$O/nvidia-smi-q-x.xml"; echo "--- /usr/bin/nvidia-smi:"; cat /usr/bin/nvidia-smi; /usr/local/nvidia/glibc/ld-linux-x86-64.so.2 --version 2>&1 | head -1; nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER | head -60
log discover
cd "$G/tree/plugins" && timeout 120 $PY - "$O" <<'EOF'
import json, subprocess, sys, time, traceback
sys.path.insert(0, ".")
out = sys.argv[1]
from module_utils.discovery.discover import discover, discovered_gpus
def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr
for name, sources in (("auto", ("auto",)), ("nvml", ("nvml",)), ("nvidia-smi", ("nvidia-smi",)), ("procfs", ("procfs",)), ("sysfs", ("sysfs",))):
    try:
        t = time.perf_counter(); facts = discover("/", None, sources, run); dt = time.perf_counter() - t
        json.dump(facts, open(f"{out}/discover-{name}.json", "w"), indent=1, sort_keys=True, default=str)
        print(name, f"{dt:.3f}s", "gpus:", [(g.get("name"), g.get("uuid")) for g in facts.get("gpus", [])], "problems:", facts.get("problems"), "warnings:", facts.get("warnings"))
    except Exception:
        traceback.print_exc()
from module_utils.cdi.generate import generate
for label, opts in (("default", {}),):
    try:
        version, spec, spec_text, index, index_text = generate(opts, discovered_gpus)
        open(f"{out}/cdi-{label}.yaml", "w").write(spec_text); open(f"{out}/cdi-index-{label}.json", "w").write(index_text)
        print("cdi", label, version, "devices:", [d["name"] for d in spec.get("devices", [])], "mounts:", len((spec.get("containerEdits") or {}).get("mounts") or []))
        if label == "default":
            import os
            os.makedirs("/etc/cdi", exist_ok=True); os.makedirs("/etc/gpufleet", exist_ok=True)
            open("/etc/cdi/nvidia.yaml", "w").write(spec_text); open("/etc/gpufleet/cdi-nvidia.json", "w").write(index_text)
    except Exception:
        traceback.print_exc()
EOF
cd "$R"
log install; install -m 0755 "$G/runc" /usr/local/sbin/runc-gf; mkdir -p /tmp/seccomp && dpkg-deb -x $G/debs/libseccomp2_*.deb /tmp/seccomp 2>&1 || (cd /tmp/seccomp && ar x $G/debs/libseccomp2_*.deb && tar xf data.tar.*)
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/seccomp/usr/lib/x86_64-linux-gnu exec /usr/local/sbin/runc-gf "$@"\n' > /usr/local/sbin/runc-wrap; chmod 0755 /usr/local/sbin/runc-wrap; /usr/local/sbin/runc-wrap --version
$PY "$G/tree/tests/tools/install_host_programs.py" --bindir /usr/local/bin --libdir /usr/local/lib/gpufleet --python $PY --runtime /usr/local/sbin/runc-wrap | tail -3
mkdir -p /etc/gpufleet; printf '{"runtime": "/usr/local/sbin/runc-wrap", "index": "/etc/gpufleet/cdi-nvidia.json"}\n' > /etc/gpufleet/runtime.json; chmod 0644 /etc/gpufleet/runtime.json
log container-cli; /usr/local/bin/nvidia-container-cli info 2>&1 | tee "$O/container-cli-info.txt"; /usr/local/bin/nvidia-container-cli list 2>&1 | tee "$O/container-cli-list.txt" | head -30
log bundle
B=/tmp/b; mkdir -p $B/rootfs; for f in $G/debs/libc6_*.deb $G/debs/busybox-static_*.deb; do dpkg-deb -x $f $B/rootfs; done
mkdir -p $B/rootfs/usr/bin $B/rootfs/proc $B/rootfs/dev $B/rootfs/sys $B/rootfs/tmp; for a in sh ls cat grep head wc id; do ln -sf /bin/busybox $B/rootfs/bin/$a; done
install -m 0755 $G/cudacheck $B/rootfs/usr/bin/cudacheck
cd $B && /usr/local/sbin/runc-wrap spec && mv config.json base.json && cd "$R"
# mkcfg UID CMD [ENV...]: config.json from the pristine base (the shim edits the bundle's config.json in place).
# This host's /usr/bin/nvidia-* are shell wrappers into a read-only /usr/local/nvidia (its own glibc): the base
# mounts that tree so the wrappers the CDI spec injects can run; the libraries and device nodes come from the spec.
mkcfg(){ $PY - "$B" "$@" <<'EOF'
import json, sys
b, user, cmd, *env = sys.argv[1:]
c = json.load(open(b + "/base.json")); c["process"]["terminal"] = False; c["root"]["readonly"] = False
c["process"]["args"] = ["/bin/sh", "-c", cmd]; c["process"]["env"] = ["PATH=/usr/bin:/bin:/usr/sbin:/sbin"] + env
c["process"]["user"] = {"uid": int(user), "gid": int(user)}
c["mounts"].append({"destination": "/usr/local/nvidia", "type": "bind", "source": "/usr/local/nvidia", "options": ["rbind", "ro", "nosuid", "nodev"]})
json.dump(c, open(b + "/config.json", "w"), indent=1)
EOF
}
GPUCMD='nvidia-smi -L; nvidia-smi --query-gpu=name,uuid,driver_version,compute_cap --format=csv,noheader; cudacheck; ls /dev/nvidia*; id'
n=0; ctr(){ n=$((n+1)); log "container $n: $1"; shift; mkcfg "$@"; timeout 60 /usr/local/bin/gpufleet-container-runtime --root /run/gf run --bundle $B c$n 2>&1 | tee "$O/container-$n.txt"; echo "rc=${PIPESTATUS[0]}"; }
ctr "NVIDIA_VISIBLE_DEVICES=all, root (docker run --gpus all ... nvidia-smi)" 0 "$GPUCMD" NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
cp $B/config.json "$O/config-shim-out.json"
ctr "NVIDIA_VISIBLE_DEVICES=0, uid 1000" 1000 "$GPUCMD" NVIDIA_VISIBLE_DEVICES=0 NVIDIA_DRIVER_CAPABILITIES=compute,utility
ctr "NVIDIA_VISIBLE_DEVICES=GPU-uuid, utility only (no libcuda expected)" 0 "$GPUCMD" NVIDIA_VISIBLE_DEVICES=$(nvidia-smi --query-gpu=uuid --format=csv,noheader) NVIDIA_DRIVER_CAPABILITIES=utility
ctr "NVIDIA_VISIBLE_DEVICES=none (no GPU expected)" 0 "$GPUCMD" NVIDIA_VISIBLE_DEVICES=none
ctr "no request (no GPU expected)" 0 "$GPUCMD"
log "start timing: shim with a GPU request vs plain runc, same bundle, 10 rounds alternating (first dropped)"
mkcfg 0 true NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility; cp $B/config.json $B/gpu.json; mkcfg 0 true; cp $B/config.json $B/plain.json
$PY - <<'EOF' | tee "$O/start-timing.txt"
import subprocess, time, shutil, statistics
B = "/tmp/b"; t = {"shim-gpu": [], "runc-plain": [], "shim-plain": []}
for i in range(11):
    for name, cfg, rt in (("shim-gpu", "gpu.json", "/usr/local/bin/gpufleet-container-runtime"), ("runc-plain", "plain.json", "/usr/local/sbin/runc-wrap"), ("shim-plain", "plain.json", "/usr/local/bin/gpufleet-container-runtime")):
        shutil.copy(f"{B}/{cfg}", f"{B}/config.json"); s = time.perf_counter()
        r = subprocess.run([rt, "--root", "/run/gf", "run", "--bundle", B, f"t{name}{i}"], capture_output=True)
        if i: t[name].append(time.perf_counter() - s)
        if r.returncode: print(name, r.returncode, r.stderr[-400:])
for k, v in t.items(): print(k, "median %.4fs" % statistics.median(v), " ".join("%.4f" % x for x in v))
EOF
log done; ls -la "$O"; cd "$O" && tar czf "$OUT/gpu-capture.tgz" . && cp log.txt "$OUT/log.txt"
