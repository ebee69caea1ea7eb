# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Private to this collection: no compatibility promise (docs/architecture.md, "Public surface").
"""Everything this collection knows about podman: ``facts`` (``INFO`` and the read side)."""
