# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Install the native toolkit's host programs from this working tree (tests, demos, by hand).

tests/tools/install_host_programs.py --bindir /usr/local/bin --libdir /usr/local/lib/gpufleet
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "plugins"))

from module_utils.hostprog import install as _host_programs  # noqa: E402  # a namespace package: the relative imports work


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bindir", default="/usr/local/bin")
    parser.add_argument("--libdir", default="/usr/local/lib/gpufleet")
    parser.add_argument("--python", default=_host_programs.PYTHON)
    parser.add_argument("--runtime", default=_host_programs.DEFAULT_RUNTIME)
    args = parser.parse_args()
    for path in _host_programs.install(args.bindir, args.libdir, args.python, runtime=args.runtime):
        print(path)


if __name__ == "__main__":
    main()
