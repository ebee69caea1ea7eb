# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Private to this collection: no compatibility promise. module_utils is the modules' and host programs' code; its
# names and signatures may change in any release (the public surface: docs/architecture.md, "Public surface").
