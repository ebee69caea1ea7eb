#!/usr/bin/env bash
# Makes this Debian machine able to run the tests and the demo: installs the apt packages they need
# (the Docker engine, containerd, debootstrap, a C compiler, shellcheck, ...) and starts dockerd in
# the background when no engine answers. Run by `make setup` (so by `make test` and `make demo`) and
# by .ci/run. A no-op when everything is there; without root it only says what is missing (a failure
# under CI=true).
set -euo pipefail
packages=(docker.io containerd debootstrap shellcheck gcc libc6-dev make git ca-certificates
          iproute2 procps xz-utils zstd binutils util-linux
          systemd        # systemctl: the fabric manager's state as discovery asks it (test_discover.py)
          gpg gpg-agent  # make keys: the apt keyring and OpenPGP tests, the integration tests' signed stand-in repository
          rpm            # rpm and rpmbuild: a real RPM database for the RHEL-family package discovery (test_nvidia_toolkit.py)
          chromium   # chromium: the fleet report page's script in a real browser (tests/controller/.../test_report_browser.py)
          prometheus               # promtool: the shipped alert rules checked and unit-tested (tests/controller/eda)
          openjdk-17-jre-headless)  # the Java runtime ansible-rulebook's Drools engine runs on (tests/controller/eda)
# Every program a test needs is here: with CI=true a test that skips for want of one fails (tests/ci_skips.py).
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "host-setup: missing apt packages (install them as root): ${missing[*]}" >&2
    # CI's tests would fail for want of them (a skip fails there): say so now, not one test at a time.
    if [ "${CI:-}" = "true" ]; then exit 1; fi
  else
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    echo "host-setup: installed ${missing[*]}"
  fi
fi

if ! command -v docker >/dev/null 2>&1; then
  echo "host-setup: no docker CLI; the integration tests, molecule and the demo need a Docker engine" >&2
elif docker info >/dev/null 2>&1; then
  echo "host-setup: docker engine $(docker version --format '{{.Server.Version}}') answers"
elif [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null 2>&1; then
  mkdir -p /var/log
  nohup dockerd >/var/log/gpufleet-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  if ! docker info >/dev/null 2>&1; then
    echo "host-setup: dockerd did not come up:" >&2; tail -30 /var/log/gpufleet-dockerd.log >&2; exit 1
  fi
  echo "host-setup: started dockerd $(docker version --format '{{.Server.Version}}') (log: /var/log/gpufleet-dockerd.log)"
else
  echo "host-setup: no Docker engine answers; start dockerd (as root) for the integration tests, molecule and the demo" >&2
fi

# Every simulated node boots systemd, which with its engines takes about eight inotify instances; the kernel's
# default of 128 per user (all the nodes run as root) stops new nodes from booting once a dozen run.
if [ "$(id -u)" = 0 ] && [ "$(sysctl -n fs.inotify.max_user_instances 2>/dev/null || echo 0)" -lt 8192 ]; then
  if sysctl -q -w fs.inotify.max_user_instances=8192 fs.inotify.max_user_watches=1048576 2>/dev/null; then
    echo "host-setup: fs.inotify.max_user_instances raised to 8192 (simulated nodes boot systemd)"
  else
    echo "host-setup: could not raise fs.inotify.max_user_instances; many simulated nodes at once may not boot" >&2
  fi
fi
