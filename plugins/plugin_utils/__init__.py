# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Private to this collection: no compatibility promise. plugin_utils is the filters' controller-side code; its names
# and signatures may change in any release (the public surface: docs/architecture.md, "Public surface").
