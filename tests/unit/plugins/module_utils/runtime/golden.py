# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Golden files of the runtime editors' tests: inputs and expected results under fixtures/<engine>/.

Regenerate the expected files with ``REGEN_RUNTIME_FIXTURES=1 pytest ...`` after a deliberate change, and
review the diff.
"""

import os

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
SHIM = "/usr/local/bin/nvidia-shim"
REGEN = os.environ.get("REGEN_RUNTIME_FIXTURES") == "1"


def read_fixture(*parts):
    with open(os.path.join(FIX, *parts), encoding="utf-8") as f:
        return f.read()


def golden(actual, *parts):
    path = os.path.join(FIX, *parts)
    if REGEN:
        with open(path, "w", encoding="utf-8") as f:
            f.write(actual)
    assert actual == read_fixture(*parts), f"{path} differs (REGEN_RUNTIME_FIXTURES=1 rewrites it; review the diff)"
