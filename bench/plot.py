# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The PNG of a ``make bench`` result: per measurement, its median and IQR beside its baseline's.

``plot.py RESULT.json OUT.png``; run with ``.venv-bench`` (matplotlib from requirements/bench.txt).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(src, dest):
    with open(src, encoding="utf-8") as f:
        result = json.load(f)
    rows = [r for r in result["rows"] if "value" in r and "baseline" in r]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(rows) + 1.5))
    for i, row in enumerate(reversed(rows)):
        scale = 1 / 1048576 if row["unit"] == "bytes" else 1000
        for offset, stats, color in ((0.18, row["value"], "tab:blue"), (-0.18, row["baseline"], "tab:gray")):
            med = stats["median"] * scale
            lo, hi = med - stats["q1"] * scale, stats["q3"] * scale - med
            ax.barh(i + offset, med, height=0.34, color=color, xerr=[[lo], [hi]], capsize=3)
        ratio = row.get("ratio")
        ax.text(
            max(row["value"]["median"], row["baseline"]["median"]) * scale,
            i,
            f"  x{ratio:.2f}" if ratio else "",
            va="center",
        )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["name"] + (" (MiB)" if r["unit"] == "bytes" else "") for r in reversed(rows)], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("median, ms (RSS: MiB); bars: IQR. blue: measured, gray: baseline (same run)")
    ax.set_title("gpufleet.nvidia make bench {}".format(result["date"]))
    fig.tight_layout()
    fig.savefig(dest, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
