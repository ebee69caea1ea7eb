#!/bin/sh
# Installed by nothing: run by gpufleet.nvidia's runtime role (runtime_state=absent) through ansible.builtin.script.
# remove_empty_dirs.sh check|apply DIR...: for each DIR that is a real folder, empty, and owned by no package (dpkg,
# rpm), print it and, with "apply", remove it (rmdir refuses a folder that is not empty).
mode="$1"
shift
for dir in "$@"; do
  if [ ! -d "$dir" ] || [ -L "$dir" ]; then continue; fi
  [ -z "$(ls -A "$dir")" ] || continue
  if command -v dpkg-query >/dev/null 2>&1 && dpkg-query -S "$dir" >/dev/null 2>&1; then continue; fi
  if command -v rpm >/dev/null 2>&1 && rpm -qf "$dir" >/dev/null 2>&1; then continue; fi
  if [ "$mode" = apply ]; then rmdir "$dir" || exit 1; fi
  echo "$dir"
done
