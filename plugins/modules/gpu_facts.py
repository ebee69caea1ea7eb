#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: Discover NVIDIA GPUs, the driver, device nodes, driver files and container engines
version_added: 1.0.0
description:
  - Sets C(ansible_facts.nvidia) from what the host under O(root) shows, without changing anything.
  - Works with no driver installed (PCI scan in sysfs), with the driver installed but its kernel module
    not loaded, and with it loaded (NVML through ctypes, C(nvidia-smi -q -x), C(/proc/driver/nvidia)).
  - Every source that is available answers, best first, and each value says which source gave it.
    A source that fails is reported in C(warnings), never as a module failure; a host without GPUs
    returns C(gpu_count=0).
  - C(nvidia-smi) is run only when named in O(sources), or under C(auto) when NVML did not answer while
    the kernel module is loaded.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  root:
    description:
      - Directory under which C(sys/), C(proc/), C(dev/) and C(etc/) of the host are read, for instance a
        host root mounted into a container, or a fixture tree.
    type: path
    default: /
  driver_root:
    description:
      - Root of the driver userspace (its C(ld.so.cache), libraries and binaries).
      - A containerized driver lives under C(/run/nvidia/driver).
      - Defaults to O(root).
    type: path
  sources:
    description:
      - Where GPU facts come from. V(auto) uses every one available, best first
        (V(nvml), V(nvidia-smi), V(procfs), V(sysfs)).
    type: list
    elements: str
    choices: [auto, nvml, nvidia-smi, procfs, sysfs]
    default: [auto]
  toolkit_bindir:
    description:
      - Where the C(gpufleet.nvidia.toolkit) role installed the collection's programs (its C(toolkit_bindir)), for
        RV(ansible_facts.nvidia.toolkit).
    type: path
    default: /usr/local/bin
  kernel_log:
    description:
      - Where the XID events of RV(ansible_facts.nvidia.xid_events) are read, under O(root), the kernel's
        C(/dev/kmsg) (read without blocking, what the ring buffer still holds since boot), or a file of its
        records or of C(dmesg) lines.
      - When it cannot be read and O(root) is C(/), C(journalctl -k -b) is asked instead.
    type: path
    default: /dev/kmsg
attributes:
  check_mode:
    description: Can run in check mode and returns the same facts.
    support: full
  diff_mode:
    description: Changes nothing, so has no diff.
    support: none
  facts:
    description: Sets C(ansible_facts.nvidia).
    support: full
  idempotent:
    description: Read-only; C(changed) is always false.
    support: full
notes:
  - NVML is loaded in-process through ctypes (no Python package needed); from O(driver_root)'s
    C(ld.so.cache) when O(driver_root) is not C(/).
  - Secure Boot check - the kernel does not say in sysfs who signed a module, so an unsigned module
    is recognised by its taint flag C(E) in C(/sys/module/nvidia/taint) when loaded, and an installed
    driver whose module is not loaded while Secure Boot is on is reported as probably refused.
seealso:
  - name: NVIDIA GPU feature discovery
    description: The node labels this module computes in C(labels).
    link: https://github.com/NVIDIA/k8s-device-plugin
"""

EXAMPLES = r"""
- name: Discover the GPUs
  gpufleet.nvidia.gpu_facts:

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia.gpu_count }} GPU(s), driver {{ ansible_facts.nvidia.driver.loaded_version }}"

- name: From a container with the host root mounted at /host and the driver in a container
  gpufleet.nvidia.gpu_facts:
    root: /host
    driver_root: /host/run/nvidia/driver

- name: Only what the kernel module says (no NVML, no nvidia-smi)
  gpufleet.nvidia.gpu_facts:
    sources: [procfs, sysfs]

- name: Stop on problems
  ansible.builtin.assert:
    that: ansible_facts.nvidia.problems | length == 0
    fail_msg: "{{ ansible_facts.nvidia.problems | map(attribute='message') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts, under C(nvidia).
  returned: always
  type: dict
  contains:
    nvidia:
      description:
        - Everything discovered.
        - Every key below is returned always, except where its entry says when.
      returned: always
      type: dict
      contains:
        gpus:
          description:
          - One entry per GPU the driver sees, sorted by minor number.
          - Without a driver-level source (no module loaded), the PCI GPUs bound to C(nvidia) in sysfs.
          type: list
          elements: dict
          contains:
            index:
              description: NVML index (PCI order when only procfs or sysfs answered).
              type: int
            minor:
              description: Device minor (C(/dev/nvidia<minor>)).
              type: int
            uuid:
              description: C(GPU-...) UUID.
              type: str
            name:
              description: Product name.
              type: str
              sample: NVIDIA A100-SXM4-40GB
            pci_bus_id:
              description: PCI address, in lower case.
              type: str
              sample: '0000:07:00.0'
            pci_device_id:
              description: PCI device and vendor id as NVML prints it.
              type: str
              sample: '0x20b010de'
            memory_mib:
              description: Frame buffer size in MiB.
              type: int
            compute_capability:
              description: CUDA compute capability.
              type: str
              sample: '8.0'
            architecture:
              description: Architecture name.
              type: str
              sample: Ampere
            mig_mode:
              description: C(enabled), C(disabled) or null (not MIG-capable or unknown).
              type: str
            numa_node:
              description: NUMA node of the GPU; null when the platform does not say.
              type: int
            source:
              description: The best source that reported this GPU.
              type: str
              sample: nvml
            field_sources:
              description: For each field, the source that gave its value (C(table) for values from the product-name
                table).
              type: dict
            lost:
              description: The driver counts this GPU but cannot reach it (fallen off the bus).
              type: bool
            mig_devices:
              description: MIG devices when MIG is on.
              type: list
              elements: dict
              contains:
                index:
                  description: MIG device index on its GPU.
                  type: int
                uuid:
                  description: C(MIG-...) UUID (NVML only).
                  type: str
                gi_id:
                  description: GPU instance id.
                  type: int
                ci_id:
                  description: Compute instance id.
                  type: int
                memory_mib:
                  description: Memory of the instance in MiB.
                  type: int
                name:
                  description: Device name (NVML only).
                  type: str
                  returned: when NVML answered
                profile:
                  description: Profile from the name.
                  type: str
                  returned: when NVML answered
                  sample: 1g.5gb
            health:
              description:
                - The GPU's health as NVML reports it; a counter the GPU does not support is left out, so C({}) plus
                  C(xid_events) without NVML.
                - Each bad state is also a RV(ansible_facts.nvidia.problems) entry with NVIDIA's recommended action.
              type: dict
              contains:
                ecc_uncorrected_volatile:
                  description: Uncorrected ECC errors since the last GPU reset or driver load.
                  type: int
                  returned: when the GPU reports it
                ecc_uncorrected_aggregate:
                  description: Uncorrected ECC errors over the GPU's life.
                  type: int
                  returned: when the GPU reports it
                remapped_rows:
                  description: Row remapping (Ampere and later), C({correctable, uncorrectable, pending, failure});
                    C(pending) needs a GPU reset, C(failure) is an RMA case.
                  type: dict
                  returned: when the GPU reports it
                retired_pages_pending:
                  description: Retired pages waiting for a driver reload or GPU reset (GPUs before Ampere).
                  type: bool
                  returned: when the GPU reports it
                clocks_event_reasons:
                  description: Why the clocks are lowered now (NVML clocks event / throttle reasons), for instance
                    C(gpu_idle), C(sw_power_cap), C(hw_slowdown), C(hw_thermal_slowdown), C(hw_power_brake_slowdown).
                  type: list
                  elements: str
                  returned: when the GPU reports it
                persistence_mode:
                  description: C(enabled) or C(disabled).
                  type: str
                  returned: when the GPU reports it
                xid_events:
                  description: This GPU's entries of RV(ansible_facts.nvidia.xid_events).
                  type: list
                  elements: dict
            mig_mode_pending:
              description: MIG mode after the next GPU reset.
              type: str
              returned: when known
            brand:
              description: NVML's brand of the GPU (C(nvmlDeviceGetBrand)), named as C(nvidia-smi -q) names it.
              type: str
              returned: when NVML answered
              sample: Tesla
            vbios_version:
              description: Video BIOS version.
              type: str
              returned: when known
            serial:
              description: Board serial number (nvidia-smi).
              type: str
              returned: when known
            persistence_mode:
              description: Persistence mode (nvidia-smi).
              type: str
              returned: when known
            excluded:
              description: The driver excluded this GPU (procfs).
              type: bool
              returned: when known
        gpu_count:
          description: GPUs the driver sees (the length of C(gpus)).
          type: int
        pci_gpu_count:
          description: NVIDIA display and 3D controllers on the PCI bus.
          type: int
        gpu_node:
          description:
            - Whether the host has an NVIDIA GPU on the PCI bus (C(pci_gpu_count > 0)), driver or not. Every stage of
              C(site.yml) and every role acts on GPU nodes only; this is the one statement of that rule.
          type: bool
        container:
          description:
            - The container manager the host under O(root) runs in (C(docker), C(podman), C(lxc), C(systemd-nspawn),
              C(openvz), C(containerd) ...), or null on a host that is not a container.
            - Read from the marks managers leave in files (C(/run/systemd/container), C(container=) in PID 1's
              environment, C(/.dockerenv), C(/run/.containerenv), C(/proc/vz), PID 1's cgroup). A container can
              neither build nor load the kernel module, so the driver role manages the userspace only there.
          type: str
          sample: docker
        pci_devices:
          description: Every NVIDIA PCI function (GPUs, their audio/USB functions, NVSwitches).
          type: list
          elements: dict
          contains:
            pci_bus_id:
              description: PCI address.
              type: str
            vendor_id:
              description: Vendor id.
              type: str
              sample: '0x10de'
            device_id:
              description: Device id.
              type: str
              sample: '0x20b0'
            subsystem_vendor_id:
              description: Subsystem vendor id.
              type: str
            subsystem_device_id:
              description: Subsystem device id.
              type: str
            class:
              description: PCI class.
              type: str
              sample: '0x030200'
            is_gpu:
              description: A display or 3D controller.
              type: bool
            driver:
              description: Kernel driver bound to it.
              type: str
              sample: nvidia
            numa_node:
              description: NUMA node.
              type: int
            iommu_group:
              description: IOMMU group.
              type: str
        driver:
          description: The driver.
          type: dict
          contains:
            installed_version:
              description: Version of the installed userspace (from C(ld.so.cache)).
              type: str
            loaded_version:
              description: Version of the loaded kernel module.
              type: str
            loaded:
              description: The kernel module is loaded (or NVML/nvidia-smi answered).
              type: bool
            kernel_module_flavor:
              description: C(open), C(proprietary) or null.
              type: str
            uvm_loaded:
              description:
                - The C(nvidia-uvm) module is loaded (its major is in C(/proc/devices), or C(/sys/module/nvidia_uvm) is
                  live), so the driver provides C(/dev/nvidia-uvm), which CUDA needs in every container.
              type: bool
            cuda_version:
              description:
                - Highest CUDA version the driver supports (NVML, else C(nvidia-smi)); null when unknown (nvidia-smi
                  writes C(Not Found) when it cannot load C(libcuda)).
              type: str
              sample: '12.2'
            reboot_required:
              description: Installed and loaded versions differ.
              type: bool
            device_files:
              description:
                - The owner, group and mode the driver gives its device files (the nvidia module's
                  C(NVreg_DeviceFileUID)/C(GID)/C(Mode)) - C(uid), C(gid), C(mode) (octal text), C(source)
                  (C(/proc/driver/nvidia/params) while the driver is loaded, else C(modprobe.d), else C(default) -
                  root, root, 0666) - and C(additional_gids), the group a container's process is given to open them
                  (empty where everyone may; M(gpufleet.nvidia.cdi_spec)).
              type: dict
              sample: {uid: 0, gid: 44, mode: "0660", source: modprobe.d, additional_gids: [44]}
            sources:
              description: For each field above, the source that gave it.
              type: dict
        device_nodes:
          description: Every C(/dev/nvidia*) and C(/dev/nvidia-caps/*) character device present.
          type: list
          elements: dict
          contains:
            path:
              description: Path in the host's terms.
              type: str
              sample: /dev/nvidia0
            major:
              description: Major number.
              type: int
            minor:
              description: Minor number.
              type: int
            char_link:
              description: The C(/dev/char/<major>:<minor>) link it needs.
              type: str
            char_link_present:
              description: That link exists.
              type: bool
        libraries:
          description:
          - Driver files by capability (C(utility), C(compute), C(video), C(graphics), C(display), C(ngx), C(compat32)),
            each a list of C({kind, name, path, resolved, arch}); C(kind) is library, binary, config, ipc or firmware.
          type: dict
        engines:
          description:
          - For C(docker), C(containerd), C(crio) and C(podman) - C(installed), C(binary), C(version), C(config_path),
            C(runtimes) (names registered), C(default_runtime), C(cdi_enabled); containerd adds C(config_version).
          - docker adds C(unit_flags) - the flags its systemd unit passes to dockerd that conflict with the runtime
            registration in C(daemon.json) (C(--add-runtime), C(--default-runtime), also through C($DOCKER_OPTS)),
            each C({flag, option, file}); each is also a problem C(docker_unit_runtime_flag) with its fix.
          - docker, containerd and CRI-O add C(runtime_paths) - the program of each registered runtime
            that names its program (docker's C(path), containerd's C(options.BinaryName), CRI-O's C(runtime_path)); a
            program that does not exist is a problem C(runtime_program_missing).
          type: dict
        labels:
          description: The node labels NVIDIA's GPU feature discovery would set; every value a string.
          type: dict
          sample:
            nvidia.com/gpu.present: 'true'
            nvidia.com/gpu.count: '8'
            nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
        problems:
          description: Problems found, each C({code, message, fix}).
          type: list
          elements: dict
          contains:
            code:
              description: Stable code.
              type: str
              sample: driver_version_mismatch
            message:
              description: What is wrong.
              type: str
            fix:
              description: How to fix it.
              type: str
        toolkit:
          description:
          - The container toolkit installed on the host, as the C(toolkit) role publishes it in C(gpufleet_toolkit), so
            that a stage that runs alone (C(site.yml --tags runtime)) finds what an earlier run installed; null when
            neither provider is installed.
          - The native provider is found by its launchers in O(toolkit_bindir) (marked C(installed by gpufleet.nvidia))
            and C(/etc/gpufleet/runtime.json); NVIDIA's by C(/usr/bin/nvidia-container-runtime) and
            C(/etc/nvidia-container-runtime/config.toml).
          type: dict
          contains:
            provider:
              description: C(native) or C(nvidia).
              type: str
              returned: when installed
            runtime_path:
              description: The OCI runtime to register with the engines.
              type: str
              returned: when installed
            hook_path:
              description: The collection's CDI hook, null when it is not installed.
              type: str
              returned: when installed
            programs:
              description: The toolkit's programs found, absolute paths.
              type: list
              elements: str
              returned: when installed
            version:
              description: Always null here (the C(toolkit) role's fact carries the version).
              type: str
              returned: when installed
            accept_envvar_unprivileged:
              description: Whether the runtime honours C(NVIDIA_VISIBLE_DEVICES) from unprivileged containers.
              type: bool
              returned: when installed
            accept_volume_mounts:
              description: Whether the runtime reads device requests from volume mounts.
              type: bool
              returned: when installed
            accept_cdi_annotations_unprivileged:
              description:
                - Whether the runtime honours C(cdi.k8s.io/) annotations from unprivileged containers (the shim's
                  C(runtime.json); always true for NVIDIA's runtime, which has no such setting).
              type: bool
              returned: when installed
            source:
              description: C(discovered).
              type: str
              returned: when installed
          sample:
            provider: native
            runtime_path: /usr/local/bin/gpufleet-container-runtime
            hook_path: /usr/local/bin/gpufleet-cdi-hook
            programs: [/usr/local/bin/gpufleet-container-runtime, /usr/local/bin/gpufleet-cdi-hook]
            version: null
            accept_envvar_unprivileged: true
            accept_volume_mounts: false
            accept_cdi_annotations_unprivileged: true
            source: discovered
        cdi_spec:
          description:
          - The NVIDIA CDI spec found first of C(/etc/cdi/nvidia.yaml), C(/etc/cdi/nvidia.json),
            C(/var/run/cdi/nvidia.yaml), C(/var/run/cdi/nvidia.json); null when there is none.
          type: dict
          contains:
            path:
              description: The spec's path.
              type: str
              returned: when found
            driver_version:
              description: The driver version the collection stamped it with, null when it carries no stamp.
              type: str
              returned: when found
        nvidia_toolkit:
          description:
          - NVIDIA's own container toolkit, whoever installed it, and every CDI spec the engines read - what the
            C(toolkit) role's C(toolkit_provider=auto) adopts and what the problems C(cdi_spec_conflict),
            C(cdi_spec_shadowed) and C(nvidia_program_shadowed) are found from.
          type: dict
          contains:
            installed:
              description: Any of NVIDIA's packages, or its C(/usr/bin/nvidia-container-runtime), C(nvidia-ctk) or
                C(nvidia-container-cli), is there.
              type: bool
            packages:
              description: The version of each of NVIDIA's four packages that are installed (dpkg; C(rpm -q)).
              type: dict
              sample: {nvidia-container-toolkit: 1.17.8-1, nvidia-container-toolkit-base: 1.17.8-1}
            binaries:
              description:
              - A dict C(version) by path, for C(nvidia-ctk), C(nvidia-container-runtime),
                C(nvidia-container-runtime-hook), C(nvidia-cdi-hook), C(nvidia-container-cli) found in C(/usr/bin);
                the version is what the program's C(--version) prints, read on O(root=/) only (null otherwise).
              type: dict
            config_path:
              description: C(/etc/nvidia-container-runtime/config.toml) when it exists, else null.
              type: str
            cdi_specs:
              description:
              - Every CDI spec the engines load (C(*.json), C(*.yaml) in C(/etc/cdi) then C(/var/run/cdi)), each
                C({path, priority, kind, devices, ours}) - C(priority) 0 for C(/etc/cdi), 1 for C(/var/run/cdi)
                (which wins), C(devices) the device names, C(ours) whether the C(cdi_spec) module wrote it.
              type: list
              elements: dict
            units:
              description: NVIDIA's C(nvidia-cdi-refresh.service) and C(.path) (toolkit 1.18 and later) when found, each
                C({path, enabled, masked}).
              type: dict
            repositories:
              description: The apt and dnf source files that name NVIDIA's container toolkit repository.
              type: list
              elements: str
        gpu_users:
          description:
          - The processes holding an NVIDIA device (C(/dev/nvidia*), C(nvidiactl), C(nvidia-uvm), C(nvidia-caps/*))
            open, whatever started them - docker (C(--gpus), C(--runtime nvidia), CDI), podman, containerd (C(ctr),
            Kubernetes pods), CRI-O or a plain host process - read from C(/proc/<pid>/fd) under O(root), each with the
            container its cgroup (or its containerd shim) names. The driver role refuses a driver change or a reboot
            while one runs.
          - Bounded - at most 65536 processes, a million descriptors and 256 users (C(truncated) says when a bound was
            reached); the module's own process is left out. About 45 ms for 530 processes.
          type: dict
          contains:
            processes:
              description: Each process, by pid.
              type: list
              elements: dict
              contains:
                pid:
                  description: Process id (in the PID namespace of O(root)'s C(/proc)).
                  type: int
                command:
                  description: Command name (C(/proc/<pid>/stat)), null when the process exited while read.
                  type: str
                devices:
                  description: The NVIDIA device paths it holds, as the process names them.
                  type: list
                  elements: str
                container:
                  description:
                  - Null for a process in no container; else C(engine) (C(docker), C(podman), C(containerd), C(crio),
                    or C(kubernetes) for a pod whose cgroup does not name its runtime), C(id) (the engine's
                    container id), C(pod_uid) (Kubernetes) and C(namespace) (the containerd namespace, when a
                    containerd shim told it).
                  type: dict
            scanned:
              description: Processes looked at.
              type: int
            unreadable:
              description: Processes whose open files could not be read (another user's, without root).
              type: int
            truncated:
              description: Whether a bound stopped the scan early.
              type: bool
          sample:
            processes:
            - pid: 4242
              command: python3
              devices: [/dev/nvidia0, /dev/nvidia-uvm, /dev/nvidiactl]
              container:
                engine: docker
                id: 4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b
                pod_uid: null
                namespace: null
            - pid: 5151
              command: nvidia-persistenced
              devices: [/dev/nvidia0, /dev/nvidiactl]
              container: null
            scanned: 412
            unreadable: 0
            truncated: false
        sources:
          description: C(requested) (the sources tried, best first) and C(answered) (those that answered).
          type: dict
        xid_events:
          description:
            - The XID events in the kernel log since boot, one entry per GPU and XID,
              C({pci_bus_id, xid, count, bucket, last_message}); C(bucket) is the immediate action of NVIDIA's Xid
              catalog (C(RESTART_APP), C(RESET_GPU), C(RESTART_BM), C(IGNORE), ...; C(UNKNOWN) for an XID the
              collection has no entry for).
            - Where the C(gpu_watch) role's watch runs, the XIDs of this boot it saw and the ring buffer no longer
              holds count too (those entries carry C(source=gpu_watch)); per GPU and XID the larger count wins.
          type: list
          elements: dict
          sample:
            - pci_bus_id: '0000:17:00.0'
              xid: 79
              count: 1
              bucket: RESTART_BM
              last_message: GPU has fallen off the bus.
        fabric_manager:
          description:
            - NVSwitches on the PCI bus (C(nvswitch_count), NVIDIA functions of class C(0x0680)) and, where there are
              some, the state C(systemctl is-active nvidia-fabricmanager) gives (C(state); null when not asked, for
              instance under another O(root)). Not C(active) with NVSwitches present is the problem
              C(fabric_manager_down).
          type: dict
          sample: {nvswitch_count: 4, state: active}
        imex:
          description:
            - "IMEX (NVLink domains): C(present) (C(nvidia-caps-imex-channels) in C(/proc/devices)), its C(major),
              C(channels) (the N of each C(/dev/nvidia-caps-imex-channels/channelN) of that major), C(config_path),
              C(nodes_config) (its addresses; null without the file), C(service) (C(unit), C(installed), C(active),
              C(enabled), C(masked); null where not asked) and, from the C(imex) role's record, C(domain), C(mode),
              C(members), C(wanted_channels). Problems C(imex_nodes_config_mismatch), C(imex_channel_missing),
              C(imex_service_down), C(imex_service_not_masked)."
          type: dict
        dra:
          description: DRA driver readiness (null without GPUs) - C(ready), C(release), C(checks); docs/kubernetes.md.
          type: dict
        next_boot:
          description:
            - The kernel the bootloader starts next and whether the installed driver's nvidia module pairs with it
              (the reboot guard, C(playbooks/tasks/reboot_guard.yml), refuses a reboot on its problems).
            - C(kernel), C(bootloader) (C(grub), C(systemd-boot) or null), C(source) (which file or EFI variable
              named it), C(entry), C(running_kernel); C(module) (that kernel's C(nvidia.ko*) as C(modules.dep) lists
              it), its C(version), C(vermagic), C(signer) and C(sig_key) (read from the file's C(.modinfo) section and
              appended PKCS#7 signature), C(secure_boot), C(trusted_by) (C(the kernel's own build key), C(kernel),
              C(enrolled MOK) or C(MOK pending enrolment)), C(state) and C(detail).
            - C(state) is C(ok), C(unknown) (the next kernel or, without Secure Boot, its module could not be read),
              or one the guard refuses - C(no_module), C(not_indexed), C(wrong_kernel), C(version_mismatch),
              C(unsigned), C(untrusted), C(unverified), C(enrolment_pending) - each also a problem (codes
              C(next_boot_no_nvidia_module), C(next_boot_module_version_mismatch), C(next_boot_module_untrusted),
              C(next_boot_mok_enrolment_pending)) when a driver is installed.
          type: dict
          sample: {kernel: 6.8.0-45-generic, bootloader: grub, source: /boot/grub/grubenv saved_entry,
                   module: /lib/modules/6.8.0-45-generic/updates/dkms/nvidia.ko, version: 580.95.05,
                   signer: gpufleet MOK, sig_key: '5A:17:C0:DE', trusted_by: enrolled MOK, state: ok}
        mig_boot:
          description:
            - C(layout), the name of the MIG layout C(gpufleet-mig-layout.service) (installed by the C(mig) role)
              applies again at every boot, from C(/etc/gpufleet/mig-layout.json); null when no layout is recorded.
            - C(status), what that unit did at this boot (C(ok), C(changed), C(message), C(gpus), C(stopped)); null
              when it has not run since the boot. A failure is also the problem C(mig_boot_failed).
          type: dict
          sample:
            layout: all-1g.10gb
            status: {ok: true, changed: true, message: applied, gpus: [], stopped: [nvidia-persistenced.service]}
        gpu_watch:
          description:
            - "The GPU watch (the C(gpu_watch) role's timer), from its state file
              C(/var/lib/gpufleet/gpu-watch.json): C(installed) (a state file is there), C(state_file), C(last_run)
              (Unix time), C(age_s), C(interval_s), C(stale) (the last run is older than 3 intervals, at least
              180 s, or the state cannot be read), C(error) (what its last run could not do), C(nvml_up) and
              C(kmsg_lost) (kernel log records the ring buffer dropped before the watch read them)."
            - A stale watch is the problem C(gpu_watch_stale), a failed last run C(gpu_watch_failed).
          type: dict
          sample: {installed: true, state_file: /var/lib/gpufleet/gpu-watch.json, last_run: 1764300000.0, age_s: 12.5,
                   interval_s: 60, stale: false, error: null, nvml_up: true, kmsg_lost: 0}
        xid_source:
          description: Where the XID events were read (O(kernel_log) or C(journalctl)); null without a kernel log.
          type: str
        warnings:
          description: Sources that failed, and why.
          type: list
          elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import facts_module


def main() -> None:
    module = AnsibleModule(argument_spec=facts_module.argspec(), supports_check_mode=True)
    run_module(module, facts_module.FactsRequest.from_params, facts_module.run_gpu_facts)


if __name__ == "__main__":
    main()
