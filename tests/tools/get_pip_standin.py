# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Offline stand-in for the ``get-pip.py`` script that ansible-test downloads.

ansible-test bootstraps pip into every virtual environment it creates by running
``python get_pip_<version>.py [pip options] pip==<version> [--no-setuptools] [--no-wheel]``
with a script it fetches from a host this machine cannot reach.  ``make setup`` copies this
file to the cache path ansible-test looks at first, so the bootstrap becomes: ``ensurepip``
(pip bundled with the interpreter), then ``pip install`` of exactly what ansible-test asked for,
from the package index that is reachable.
"""

import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main(argv):
    pip_args = [arg for arg in argv if arg not in GET_PIP_ONLY]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
    if any(not arg.startswith("-") for arg in pip_args):
        subprocess.check_call([sys.executable, "-m", "pip", "install", *pip_args])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
