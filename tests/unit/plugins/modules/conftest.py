# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A module's main() run in-process as Ansible runs it: its arguments, check and diff mode; its exit code, result."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args


@pytest.fixture
def call_main(capsys):
    """``call_main(module, check=False, diff=False, **args)`` -> ``(exit code, result)``."""

    def run(module, check=False, diff=False, **args):
        extra = {"_ansible_check_mode": check, "_ansible_diff": diff}
        with patch_module_args({**args, **extra}), pytest.raises(SystemExit) as exit_info:
            module.main()
        return exit_info.value.code, json.loads(capsys.readouterr().out)

    return run
