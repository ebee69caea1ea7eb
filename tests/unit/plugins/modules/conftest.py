"""Module tests run a module's ``main()`` in this process, as it runs on a target host."""

import pytest
from ansible.module_utils import _internal


@pytest.fixture(autouse=True)
def _as_on_a_target(monkeypatch):
    """Importing any controller code (``ansible.errors``, a filter plugin's test) flips ansible-core's
    ``is_controller`` for the whole process; ``module.warn()`` then goes to the controller's display
    instead of the module's JSON result. A module never runs in a controller context: pin it off."""
    monkeypatch.setattr(_internal, "is_controller", False)
