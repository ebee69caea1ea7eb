# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""mig/layout.py: mig-parted's vocabulary against discovery's GPUs, each model's profiles and placements (NVIDIA's MIG
user guide), idempotence and the refusals an operator reads."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig import layout as _layout
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.mig import static_profiles as static

A100 = "NVIDIA A100-SXM4-40GB"


def gpu(index, name=A100, mode="disabled", migs=(), pci="0x20b010de"):
    return {
        "index": index, "name": name, "uuid": f"GPU-{index}", "mig_mode": mode, "pci_device_id": pci,
        "mig_devices": [{"index": k, "profile": p} for k, p in enumerate(migs)],
    }  # fmt: skip


def plan(gpus, layout):
    """The planner with each GPU's profiles from the fixture table, as NVML would list them for that model."""
    tables = {g["index"]: static.profiles_for(g["name"], g["pci_device_id"]) for g in gpus if g["mig_mode"]}
    return _layout.plan(gpus, layout, {k: v for k, v in tables.items() if v})


ALL_1G = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ({"1g.5gb": 7}, [("1g.5gb", s) for s in range(7)]),
        ({"2g.10gb": 3}, [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4)]),
        ({"3g.20gb": 2}, [("3g.20gb", 0), ("3g.20gb", 4)]),
        ({"4g.20gb": 1, "3g.20gb": 1}, [("4g.20gb", 0), ("3g.20gb", 4)]),
        ({"7g.40gb": 1}, [("7g.40gb", 0)]),
        ({"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}, [("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6), None]),
    ],
)
def test_placements_of_the_user_guides_combinations(counts, expected):
    table = static.PROFILES_BY_MODEL["A100-SXM4-40GB"]
    fit = _layout.placements(counts, table)
    if expected[-1] is None:  # a fit exists; check it is one: no memory slice shared, starts allowed
        assert fit is not None and sorted(p for p, _s in fit) == sorted(p for p, n in counts.items() for _i in range(n))
        used = set()
        for profile, start in fit:
            assert start in table[profile][3]
            slices = set(range(start, start + table[profile][2]))
            assert not used & slices
            used |= slices
    else:
        assert fit == expected


@pytest.mark.parametrize("counts", [{"1g.5gb": 8}, {"4g.20gb": 2}, {"7g.40gb": 1, "1g.5gb": 1}, {"3g.20gb": 3}])
def test_combinations_that_do_not_fit(counts):
    assert _layout.placements(counts, static.PROFILES_BY_MODEL["A100-SXM4-40GB"]) is None


def test_plan_enables_mig_and_creates_then_nothing_to_do_once_applied():
    (step,) = plan([gpu(0)], ALL_1G)
    assert step["set_mig_mode"] is True and step["changed"] and not step["destroy"]
    assert [p for p, _s in step["create"]] == ["1g.5gb"] * 7
    assert (step["before"], step["after"]) == ("MIG disabled", "MIG enabled: 1g.5gb x7")
    (again,) = plan([gpu(0, mode="enabled", migs=["1g.5gb"] * 7)], ALL_1G)
    assert again["changed"] is False and again["create"] == [] and again["set_mig_mode"] is None


def test_a_changed_layout_destroys_and_recreates():
    layout = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]
    (step,) = plan([gpu(0, mode="enabled", migs=["1g.5gb"] * 7), gpu(1)], layout)
    assert step["index"] == 0 and step["destroy"] and step["set_mig_mode"] is None
    assert step["create"] == [("3g.20gb", 0), ("3g.20gb", 4)]


def test_disabling_mig_destroys_the_instances_first():
    (step,) = plan([gpu(0, mode="enabled", migs=["7g.40gb"])], [{"devices": "all", "mig-enabled": False}])
    assert (step["destroy"], step["set_mig_mode"], step["create"]) == (True, False, [])
    assert step["after"] == "MIG disabled"


def test_device_filter_by_pci_id_or_model_name_and_untouched_gpus():
    gpus = [gpu(0), gpu(1, name="NVIDIA H100 80GB HBM3", pci="0x233010de", mode="disabled")]
    assert [s["index"] for s in plan(gpus, [dict(ALL_1G[0], **{"device-filter": "0x20B010DE"})])] == [0]
    assert [s["index"] for s in plan(gpus, [dict(ALL_1G[0], **{"device-filter": ["A100-SXM4-40GB"]})])] == [0]


def test_unknown_profile_is_refused_with_the_offered_ones():
    layout = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.6gb": 4}}]
    with pytest.raises(_layout.LayoutError) as err:
        plan([gpu(0)], layout)
    assert str(err.value) == (
        "GPU 0 (NVIDIA A100-SXM4-40GB) does not offer MIG profile(s) 1g.6gb; it offers 1g.5gb, 1g.5gb+me, 1g.10gb, "
        "2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
    )


# Per model (NVIDIA's MIG user guide, "Supported MIG Profiles"; counts as mig-parted's config-default.yaml): the
# product name NVML gives, its PCI device id, each profile with the most instances one GPU takes, and one profile
# of another model that it refuses.
MODELS = {
    "A30-24GB": ("NVIDIA A30", "0x20b710de",
                 {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}, "1g.5gb"),
    "A100-40GB": ("NVIDIA A100-PCIE-40GB", "0x20b110de",
                  {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1,
                   "7g.40gb": 1}, "7g.80gb"),
    "A100-80GB": ("NVIDIA A100-SXM4-80GB", "0x20b210de",
                  {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                   "7g.80gb": 1}, "1g.5gb"),
    "H100-80GB SXM": ("NVIDIA H100 80GB HBM3", "0x233010de",
                      {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                       "7g.80gb": 1}, "7g.94gb"),
    "H100-80GB PCIe": ("NVIDIA H100 PCIe", "0x233110de",
                       {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                        "7g.80gb": 1}, "1g.12gb"),
    "H100-94GB NVL": ("NVIDIA H100 NVL", "0x232110de",
                      {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1,
                       "7g.94gb": 1}, "7g.80gb"),
    "H200-141GB": ("NVIDIA H200", "0x233510de",
                   {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1,
                    "7g.141gb": 1}, "1g.23gb"),
    "H200 NVL": ("NVIDIA H200 NVL", "0x233b10de",
                 {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1,
                  "7g.141gb": 1}, "7g.180gb"),
    "B200": ("NVIDIA B200", "0x290110de",
             {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1,
              "7g.180gb": 1}, "1g.18gb"),
}  # fmt: skip


@pytest.mark.parametrize("model", MODELS)
def test_each_models_profiles_at_their_most_and_one_more_refused(model):
    name, pci, most, foreign = MODELS[model]
    table = static.profiles_for(name, pci)
    assert table is not None and {p: row[4] for p, row in table.items()} == most
    assert static.profiles_for(name) is table  # the product name alone finds the same table
    for profile, count in most.items():
        (step,) = plan([gpu(0, name=name, pci=pci)], [{"mig-enabled": True, "mig-devices": {profile: count}}])
        assert sorted(p for p, _s in step["create"]) == [profile] * count, profile
        with pytest.raises(_layout.LayoutError, match="does not fit on one GPU"):
            plan([gpu(0, name=name, pci=pci)], [{"mig-enabled": True, "mig-devices": {profile: count + 1}}])
    with pytest.raises(_layout.LayoutError) as err:
        plan([gpu(0, name=name, pci=pci)], [{"mig-enabled": True, "mig-devices": {foreign: 1}}])
    assert f"does not offer MIG profile(s) {foreign}; it offers {', '.join(most)}" in str(err.value)


@pytest.mark.parametrize(
    ("name", "pci", "counts"),
    [
        # the "balanced" layouts of mig-parted's config-default.yaml, one per model
        ("NVIDIA A30", "0x20b710de", {"1g.6gb": 2, "2g.12gb": 1}),
        ("NVIDIA A100-SXM4-80GB", "0x20b210de", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        ("NVIDIA H100 NVL", "0x232110de", {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}),
        ("NVIDIA H200", "0x233510de", {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        ("NVIDIA B200", "0x290110de", {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}),
        # media extensions beside plain instances
        ("NVIDIA A30", "0x20b710de", {"2g.12gb+me": 1, "1g.6gb": 2}),
        ("NVIDIA H100 80GB HBM3", "0x233010de", {"1g.10gb+me": 1, "1g.10gb": 6}),
    ],
)
def test_mixed_layouts_fit(name, pci, counts):
    (step,) = plan([gpu(0, name=name, pci=pci)], [{"mig-enabled": True, "mig-devices": counts}])
    assert sorted(p for p, _s in step["create"]) == sorted(p for p, n in counts.items() for _i in range(n))


def test_the_a30_has_four_compute_slices():
    table = static.profiles_for("NVIDIA A30", "0x20b710de")
    assert _layout.placements({"2g.12gb": 1, "1g.6gb": 3}, table) is None  # 5 of 4 compute slices
    assert _layout.placements({"4g.24gb": 1, "1g.6gb": 1}, table) is None


def test_the_pci_id_wins_over_the_name():
    """ "NVIDIA H100 NVL" (94GB) is no H100 80GB, whatever the name holds; an unknown id falls back to the name."""
    assert static.model_of("NVIDIA H100 NVL", "0x232110de") == "H100-94GB"
    assert static.model_of("NVIDIA H100 NVL") == "H100-94GB"
    assert static.model_of("NVIDIA H100 80GB HBM3", "0x233010de") == "H100-80GB"
    assert static.model_of("NVIDIA A100-SXM4-40GB", "0xffff10de") == "A100-SXM4-40GB"
    assert static.model_of("Tesla T4", "0x1eb810de") is None


@pytest.mark.parametrize(
    ("layout", "gpus", "message"),
    [
        ([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 8}}], [gpu(0)], "does not fit on one GPU"),
        (ALL_1G, [gpu(0, name="Tesla T4", mode=None)], "GPU 0 (Tesla T4) does not support MIG"),
        ([{"devices": [3], "mig-enabled": True}], [gpu(0)], "no GPU with index [3] on this host"),
        ([{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.5gb": 1}}], [gpu(0)], "mig-enabled false"),
        ([{"devices": "all", "mig-enabled": "yes"}], [gpu(0)], "layout[0].mig-enabled: true or false"),
        ([{"devices": "all", "mig-enable": True}], [gpu(0)], "unknown key(s) mig-enable"),
        ([ALL_1G[0], {"devices": [0], "mig-enabled": False}], [gpu(0)], "named by layout[0] and layout[1]"),
        ([], [gpu(0)], "non-empty list"),
    ],
)
def test_refusals_name_the_entry_and_the_fix(layout, gpus, message):
    with pytest.raises(_layout.LayoutError) as err:
        plan(gpus, layout)
    assert message in str(err.value)


def test_enabled_with_no_instances_on_a_model_without_a_table_is_fine():
    (step,) = plan([gpu(0, name="NVIDIA GH200 480GB", pci="0x234210de")], [{"mig-enabled": True}])
    assert step["set_mig_mode"] is True and step["create"] == [] and step["after"] == "MIG enabled: no instances"


def test_holders_of_one_gpu():
    users = {
        "processes": [
            {"pid": 10, "command": "python3", "devices": ["/dev/nvidia0", "/dev/nvidiactl"],
             "container": {"engine": "docker", "id": "4f3c2b1a0e9d" + "0" * 52}},
            {"pid": 11, "command": "nvidia-persistenced", "devices": ["/dev/nvidiactl"], "container": None},
            {"pid": 12, "command": "train", "devices": ["/dev/nvidia1"], "container": None},
        ]
    }  # fmt: skip
    assert _layout.holders(users, 0) == ["pid 10 (python3) in docker container 4f3c2b1a0e9d"]
    assert _layout.holders(users, 1) == ["pid 12 (train)"]
    assert _layout.holders(users, 2) == [] and _layout.holders(None, 0) == []
