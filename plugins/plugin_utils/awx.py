# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""AWX / Automation Controller objects of the collection, generated from one source.

A survey question is made from the variable's option in the roles' ``meta/argument_specs.yml`` (or, for the
variables the playbooks read themselves, ``extensions/awx/playbook_variables.yml``): its type, choices and default.
So a change of a role variable changes the survey, and no survey can offer a value the role refuses. The job
templates themselves (name, playbook, which variables the survey asks) are ``extensions/awx/job_templates.yml``.

The output is the data ``infra.controller_configuration``'s ``dispatch`` role takes (``controller_projects``,
``controller_execution_environments``, ``controller_templates``, ``controller_workflows``), whose job template and
survey fields are AWX's API fields (``/api/v2/job_templates/``, ``survey_spec``). A survey answer arrives in the
job's extra variables: ``integer`` as a number, ``multiplechoice`` and ``text`` as strings (``"false"``),
``multiselect`` as a list; every role reads them through ``as_bool`` / ``as_int`` / ``as_list``
(plugin_utils/role_vars.py)."""

from __future__ import annotations

import re
from typing import Any

# AWX's survey question types (awx/main/models/mixins.py SurveyJobTemplateMixin, awx 24.6.1).
SURVEY_TYPES = ("text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect")
TEXT_MAX = 1024
INT_MAX = 2**31 - 1
_MARKUP = re.compile(r"\b[CMOVPRLUEIB]\(([^()]*)\)")


def _description(option: dict[str, Any]) -> str:
    text = option.get("description", "")
    if isinstance(text, list):
        text = " ".join(text)
    return " ".join(str(text).split())


def _flat(text: str, limit: int) -> str:
    """Ansible doc markup to plain text (C(x), O(x=y), P(name#type) -> x, x=y, name), cut at ``limit`` on a word."""
    text = _MARKUP.sub(lambda m: m.group(1).split("#")[0], text)
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + "…"


def question(name: str, option: dict[str, Any]) -> dict[str, Any]:
    """One survey question for the variable ``name`` from its argument-spec ``option``."""
    kind = option.get("type", "str")
    default = option.get("default")
    choices = option.get("choices")
    spec: dict[str, Any] = {
        "question_name": name,
        "question_description": _flat(_description(option), 500),
        "variable": name,
        "required": bool(option.get("required", False)),
    }
    if kind == "bool":
        if default is None:
            raise ValueError(f"{name}: a bool whose null means 'derive it' has no survey answer for null; leave it out")
        spec.update(type="multiplechoice", choices=["true", "false"], default="true" if default else "false")
    elif kind == "int":
        spec.update(type="integer", min=0, max=INT_MAX)
        if default is not None:
            spec["default"] = int(default)
    elif kind == "list":
        if option.get("elements", "str") != "str":
            raise ValueError(f"{name}: a list of {option.get('elements')} has no survey question")
        if choices:
            spec.update(type="multiselect", choices=[str(c) for c in choices], default="\n".join(default or []))
        else:
            spec.update(type="text", min=0, max=TEXT_MAX, default=",".join(default or []))
    elif kind in ("str", "path"):
        if choices:
            spec.update(type="multiplechoice", choices=[str(c) for c in choices], default=str(default))
        else:
            spec.update(type="text", min=0, max=TEXT_MAX, default="" if default is None else str(default))
    else:
        raise ValueError(f"{name}: a {kind} has no survey question")
    return spec


def survey_spec(names: list[str], options: dict[str, dict[str, Any]], name: str, description: str = "") -> dict:
    """AWX's ``survey_spec`` for the variables ``names``, each typed by its option in ``options``."""
    missing = [n for n in names if n not in options]
    if missing:
        raise ValueError(
            f"survey {name!r}: {', '.join(missing)} in no role's argument specs nor playbook_variables.yml"
        )
    return {"name": name, "description": description, "spec": [question(n, options[n]) for n in names]}


def controller_objects(config: dict[str, Any], options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``extensions/awx/job_templates.yml`` (``config``) as infra.controller_configuration's variables."""
    organization = config["organization"]
    project = config["project"]
    ee = config["execution_environment"]
    templates = []
    for tpl in config["job_templates"]:
        survey = tpl.get("survey", [])
        item = {
            "name": tpl["name"],
            "description": tpl.get("description", ""),
            "job_type": tpl.get("job_type", "run"),
            "organization": organization,
            "project": project["name"],
            "inventory": config["inventory"],
            "playbook": tpl["playbook"],
            "execution_environment": ee["name"],
            "ask_limit_on_launch": True,
            "ask_verbosity_on_launch": True,
            "ask_job_type_on_launch": tpl.get("ask_job_type_on_launch", False),
            "job_tags": tpl.get("job_tags", ""),
            "job_slice_count": int(tpl.get("job_slice_count", 1)),
            "allow_simultaneous": False,
            # gpu_facts' ansible_facts.nvidia from a discover or site job reach a later report job
            "use_fact_cache": True,
            "survey_enabled": bool(survey),
            "survey_spec": survey_spec(survey, options, tpl["name"], tpl.get("description", "")) if survey else {},
        }
        if tpl.get("credentials", config.get("credentials")):
            item["credentials"] = tpl.get("credentials", config.get("credentials"))
        templates.append(item)
    workflows = []
    for flow in config.get("workflows", []):
        nodes = []
        for index, step in enumerate(flow["steps"]):
            node = {
                "identifier": step,
                "unified_job_template": {"name": step, "type": "job_template", "organization": {"name": organization}},
                "related": {},
            }
            if index + 1 < len(flow["steps"]):
                node["related"]["success_nodes"] = [{"identifier": flow["steps"][index + 1]}]
            nodes.append(node)
        workflows.append(
            {
                "name": flow["name"],
                "description": flow.get("description", ""),
                "organization": organization,
                "inventory": config["inventory"],
                "allow_simultaneous": False,
                "workflow_nodes": nodes,
            }
        )
    return {
        "controller_projects": [
            {
                "name": project["name"],
                "organization": organization,
                "scm_type": "git",
                "scm_url": project["scm_url"],
                "scm_branch": project.get("scm_branch", "main"),
                "scm_update_on_launch": True,
                "default_environment": ee["name"],
            }
        ],
        "controller_execution_environments": [
            {"name": ee["name"], "image": ee["image"], "pull": ee.get("pull", "missing"), "organization": organization}
        ],
        "controller_templates": templates,
        "controller_workflows": workflows,
    }
