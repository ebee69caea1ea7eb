#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_keyring
short_description: Install a repository's OpenPGP key as a binary keyring for apt's signed-by
version_added: 1.0.0
description:
  - Fetches a repository's signing key (O(url)) or takes it as given (O(content)), de-armours it when it is
    ASCII-armoured, checks that it is an OpenPGP public key (and, with O(fingerprints), one of those keys), and
    writes it to O(dest) as binary OpenPGP packets - what C(gpg --dearmor -o DEST) writes, without needing gpg on
    the host. apt's C(signed-by) option reads a C(*.gpg) keyring only in that form.
  - NVIDIA's install guide for the container toolkit does this with
    C(curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --dearmor -o
    /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg).
  - The key is fetched in check mode as well (a read); the file is written (atomically) only when its bytes or mode
    differ.
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
options:
  dest:
    description: The keyring file to write.
    type: path
    required: true
  url:
    description: Where to fetch the key (C(https://), C(http://) or C(file://)). One of O(url) and O(content).
    type: str
  content:
    description: The key itself, ASCII-armoured. One of O(url) and O(content).
    type: str
  fingerprints:
    description:
      - When given, every primary key in the fetched data must have one of these fingerprints (40 hex digits,
        spaces ignored); otherwise the module fails and writes nothing.
    type: list
    elements: str
    default: []
  mode:
    description: The keyring's permissions (apt reads it as the unprivileged C(_apt) user).
    type: raw
    default: "0644"
  timeout:
    description: Seconds to wait for O(url).
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: NVIDIA's key, where NVIDIA's install guide puts it
  gpufleet.nvidia.apt_keyring:
    url: https://nvidia.github.io/libnvidia-container/gpgkey
    dest: /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
"""

RETURN = r"""
dest:
  description: O(dest).
  returned: always
  type: str
fingerprints:
  description: The fingerprints of the primary keys written (v4 keys; C(v5-key) / C(v6-key) for newer ones).
  returned: always
  type: list
  elements: str
  sample: [6AB542B6C4AF9CB137302BCD9B0100171D9782DD]
"""

import functools

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import openpgp
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Failure, run_module


def argspec() -> dict:
    return {
        "dest": {"type": "path", "required": True},
        "url": {"type": "str"},
        "content": {"type": "str"},
        "fingerprints": {"type": "list", "elements": "str", "default": []},
        "mode": {"type": "raw", "default": "0644"},
        "timeout": {"type": "int", "default": 30},
    }


def _fetch(module: AnsibleModule, url: str, timeout: int) -> bytes:
    response, info = fetch_url(module, url, timeout=timeout)
    # an HTTP error comes back as a response too; file:// answers with no status or 200
    if response is None or info.get("status") not in (200, None):
        raise Failure(
            f"{url}: could not fetch the repository key ({info.get('status')}: {info.get('msg')}); "
            "check the key URL variable and that the host can reach it"
        )
    return response.read(openpgp.MAX_KEY_BYTES + 1)


def main() -> None:
    module = AnsibleModule(
        argument_spec=argspec(),
        required_one_of=[("url", "content")],
        mutually_exclusive=[("url", "content")],
        supports_check_mode=True,
    )
    work = functools.partial(openpgp.write_keyring, fetch=functools.partial(_fetch, module))
    run_module(module, openpgp.KeyringRequest.from_params, work)


if __name__ == "__main__":
    main()
