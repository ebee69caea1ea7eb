# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The AWX job templates and surveys (plugins/plugin_utils/awx.py, extensions/awx/): every survey variable is a role
or playbook variable whose type the question keeps, the surveys pass AWX's own survey-spec checks, an answer as AWX
sends it means the argument spec's default to the roles, and configure.yml hands the same objects to the dispatch
role (a recording stand-in here: AWX cannot run on these machines)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.awx import FilterModule
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import awx, role_vars
from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[4]


def _tool():
    spec = importlib.util.spec_from_file_location("awx_config", REPO / "tests" / "tools" / "awx_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OPTIONS = _tool().options()
CONFIG = yaml.safe_load((REPO / "extensions" / "awx" / "job_templates.yml").read_text())
OBJECTS = awx.controller_objects(CONFIG, OPTIONS)
SURVEYS = {t["name"]: t["survey_spec"] for t in OBJECTS["controller_templates"] if t["survey_enabled"]}

# AWX's checks of a survey spec (ansible/awx, awx/api/views/__init__.py, JobTemplateSurveySpec._validate_spec_data and
# ALLOWED_TYPES; the API's own description: awx/api/templates/api/job_template_survey_spec.md): name, description
# (strings) and a non-empty spec list; each question a dict with type, question_name, variable (strings) and required
# (bool), variables unique, the type one of the allowed, a non-empty default of the type's Python type, min/max
# integers, choices for the choice types, a multiplechoice's single default and every default among the choices.
ALLOWED_TYPES = {
    "text": str,
    "textarea": str,
    "password": str,
    "multiplechoice": str,
    "multiselect": str,
    "integer": int,
    "float": (float, int),
}


def awx_survey_errors(survey: dict) -> list[str]:
    errors = [
        f"{k} is not a {t.__name__}"
        for k, t in (("name", str), ("description", str), ("spec", list))
        if not isinstance(survey.get(k), t)
    ]
    if errors or not survey["spec"]:
        return errors or ["spec has no questions"]
    seen = set()
    for i, q in enumerate(survey["spec"]):
        for field, kind in (("type", str), ("question_name", str), ("variable", str), ("required", bool)):
            if not isinstance(q.get(field), kind):
                errors.append(f"{i}: {field} missing or not a {kind.__name__}")
        if q["variable"] in seen:
            errors.append(f"{i}: {q['variable']} twice")
        seen.add(q["variable"])
        if q["type"] not in ALLOWED_TYPES:
            errors.append(f"{i}: type {q['type']}")
            continue
        default = q.get("default", "")
        if default != "" and (isinstance(default, bool) or not isinstance(default, ALLOWED_TYPES[q["type"]])):
            errors.append(f"{i}: default {default!r} for a {q['type']}")
        errors += [f"{i}: {k} {q[k]!r}" for k in ("min", "max") if q.get(k) is not None and not isinstance(q[k], int)]
        if q["type"] in ("multiplechoice", "multiselect"):
            if "choices" not in q:
                errors.append(f"{i}: no choices")
                continue
            defaults = [d for d in str(default).splitlines() if d.strip()]
            if q["type"] == "multiplechoice" and len(defaults) > 1:
                errors.append(f"{i}: several defaults")
            errors += [f"{i}: default {d!r} not a choice" for d in defaults if d not in q["choices"]]
    return errors


def answer(question: dict):
    """The value AWX puts in the job's extra variables when the survey is launched with the question's default."""
    if question["type"] == "multiselect":
        return [d for d in question["default"].splitlines() if d]
    return question["default"]


def test_the_templates_the_issue_asks_for_exist_with_surveys():
    playbooks = {t["name"]: (t["playbook"], t["job_tags"]) for t in OBJECTS["controller_templates"]}
    assert playbooks["gpufleet site"] == ("playbooks/site.yml", "")
    assert playbooks["gpufleet validate"] == ("playbooks/site.yml", "validate")
    assert {"gpufleet uninstall", "gpufleet discover", "gpufleet report", "gpufleet driver upgrade"} <= set(playbooks)
    for path, _tags in playbooks.values():
        assert (REPO / path).is_file(), path
    assert {"gpufleet site", "gpufleet validate", "gpufleet uninstall", "gpufleet driver upgrade"} <= set(SURVEYS)
    steps = [n["identifier"] for n in OBJECTS["controller_workflows"][0]["workflow_nodes"]]
    assert steps == ["gpufleet discover", "gpufleet site", "gpufleet report"]
    assert all(
        n["unified_job_template"]["name"] in playbooks for n in OBJECTS["controller_workflows"][0]["workflow_nodes"]
    )


@pytest.mark.parametrize("template", sorted(SURVEYS))
def test_every_survey_passes_awx_checks(template):
    assert awx_survey_errors(SURVEYS[template]) == []


@pytest.mark.parametrize("template", sorted(SURVEYS))
def test_every_survey_variable_is_an_argument_spec_variable_of_a_compatible_type(template):
    compatible = {
        "bool": {"multiplechoice"},
        "int": {"integer"},
        "str": {"text", "multiplechoice"},
        "path": {"text"},
        "list": {"text", "multiselect"},
    }
    for q in SURVEYS[template]["spec"]:
        option = OPTIONS[q["variable"]]  # KeyError: a survey variable no spec describes
        kind = option.get("type", "str")
        assert q["type"] in compatible[kind], (q["variable"], kind, q["type"])
        if q["type"] == "multiplechoice" and kind != "bool":
            assert q["choices"] == [str(c) for c in option["choices"]], q["variable"]
        if kind == "bool":
            assert q["choices"] == ["true", "false"], q["variable"]


@pytest.mark.parametrize("template", sorted(SURVEYS))
def test_a_survey_answered_with_its_defaults_means_the_argument_spec_defaults(template):
    read = {"bool": role_vars.as_bool, "int": role_vars.as_int, "list": role_vars.as_list}
    for q in SURVEYS[template]["spec"]:
        option = OPTIONS[q["variable"]]
        value = read.get(option.get("type", "str"), lambda v, name: v)(answer(q), q["variable"])
        expected = option.get("default")
        if option.get("type", "str") in ("str", "path") and expected is None:
            expected = ""
        assert value == expected, q["variable"]


def test_a_non_default_survey_answer_is_read_as_typed():
    q = {s["variable"]: s for s in SURVEYS["gpufleet site"]["spec"]}
    assert q["driver_hold"]["type"] == "multiplechoice" and role_vars.as_bool("false") is False
    assert q["runtime_engines"]["type"] == "multiselect"
    assert role_vars.as_list(["docker", "podman"]) == ["docker", "podman"]
    assert q["validate_timeout"]["type"] == "integer"


def test_the_committed_controller_config_is_what_the_sources_give():
    assert _tool().main(["--check"]) == 0, "run tests/tools/awx_config.py"


def test_survey_refuses_what_no_spec_describes_and_what_a_survey_cannot_send():
    filters = FilterModule().filters()
    with pytest.raises(AnsibleFilterError, match="not_a_variable"):
        filters["awx_survey"](["not_a_variable"], OPTIONS)
    with pytest.raises(AnsibleFilterError, match="device_plugin_node_selector: a dict"):
        filters["awx_survey"](["device_plugin_node_selector"], OPTIONS)
    with pytest.raises(AnsibleFilterError, match="device_plugin_enabled: a bool whose null"):
        filters["awx_survey"](["device_plugin_enabled"], OPTIONS)
    survey = filters["awx_survey"](["driver_hold", "validate_timeout"], OPTIONS, name="x")
    assert [q["type"] for q in survey["spec"]] == ["multiplechoice", "integer"]


RECORDER = """
- name: Record what the dispatch role is given
  ansible.builtin.copy:
    content: "{{ {'controller_projects': controller_projects, 'controller_execution_environments':
                  controller_execution_environments, 'controller_templates': controller_templates,
                  'controller_workflows': controller_workflows} | to_json }}"
    dest: "{{ record_to }}"
    mode: "0644"
"""


@pytest.mark.parametrize("apply", ["true", "false"])
def test_configure_playbook_hands_the_objects_to_the_dispatch_role(tmp_path, apply):
    """configure.yml with awx_apply a string, as a survey or -e sends it, and a recording stand-in for
    infra.controller_configuration's dispatch role: the recorder gets exactly the committed objects, the written
    file is the same, and awx_apply=false applies nothing."""
    role = tmp_path / "roles" / "recorder" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text(RECORDER)
    proc = run_playbook(
        REPO / "extensions" / "awx" / "configure.yml",
        "-e",
        f"awx_apply={apply}",
        "-e",
        "awx_dispatch_role=recorder",
        "-e",
        f"awx_config_dest={tmp_path / 'out.yml'}",
        "-e",
        f"record_to={tmp_path / 'record.json'}",
        ANSIBLE_ROLES_PATH=str(tmp_path / "roles"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    committed = yaml.safe_load((REPO / "extensions" / "awx" / "controller_config.yml").read_text())
    assert yaml.safe_load((tmp_path / "out.yml").read_text()) == committed
    if apply == "true":
        assert json.loads((tmp_path / "record.json").read_text()) == committed
    else:
        assert not (tmp_path / "record.json").exists()
