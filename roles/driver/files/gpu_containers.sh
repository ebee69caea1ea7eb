#!/bin/sh
# Print how many running containers use NVIDIA devices (/dev/nvidia* device mappings, --gpus requests,
# or CDI nvidia.com/gpu devices). 0 when docker is not installed or not running.
command -v docker >/dev/null 2>&1 || { echo 0; exit 0; }
ids=$(docker ps -q 2>/dev/null) || { echo 0; exit 0; }
count=0
for id in $ids; do
  if docker inspect --format '{{json .HostConfig.Devices}} {{json .HostConfig.DeviceRequests}}' "$id" 2>/dev/null |
    grep -q -e '/dev/nvidia' -e '"Driver":"nvidia"' -e 'nvidia.com/gpu'; then
    count=$((count + 1))
  fi
done
echo "$count"
