"""Makes the working tree importable as ``ansible_collections.gpufleet.nvidia``.

``make setup`` links the repository in as ``.cache/collections/ansible_collections/gpufleet/nvidia``;
putting ``.cache/collections`` first on ``sys.path`` lets the tests import the working tree's code
exactly as ansible-core will, with no copy anywhere.
"""

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO_ROOT, ".cache", "collections")
_LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpufleet", "nvidia")

if not os.path.isdir(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    os.symlink(os.path.join("..", "..", "..", ".."), _LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)


import pytest  # noqa: E402

DEBIAN_TREE = os.path.join(REPO_ROOT, ".cache", "debian-nvidia", "root")


@pytest.fixture(scope="session")
def debian_driver_tree():
    """``(root, version)`` of the real Debian 12 NVIDIA 535 userspace, extracted from Debian's own
    packages with its ld.so.cache written by the real ldconfig (see tests/tools/debian_driver_tree.py).
    Built once, then reused; needs Debian's package mirror the first time."""
    sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "tools"))
    try:
        import debian_driver_tree as builder
    finally:
        sys.path.pop(0)
    return DEBIAN_TREE, builder.build(DEBIAN_TREE)
