"""``docker-compose.yml`` cannot run where the tests run (no Docker engine): what can be
checked without one is that every ``window-operator`` command in it is one the command
line takes, that the job config it mounts loads, and that Kafka keeps its topics in a
volume as the job keeps its state (a second ``up`` after ``down`` found the job's
checkpoint past the end of an empty broker's topics)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from window_operator.cli import _parser
from window_operator.config import load_any_config

ROOT = Path(__file__).resolve().parents[1]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
COMMANDS = {
    name: shlex.split(service["command"])
    for name, service in COMPOSE["services"].items()
    if str(service.get("command", "")).startswith("window-operator ")
}


@pytest.mark.parametrize("service", sorted(COMMANDS))
def test_each_window_operator_command_is_one_the_cli_takes(service: str) -> None:
    argv = COMMANDS[service][1:]
    args = _parser().parse_args(argv)  # exits 2 on an unknown option
    assert args.func is not None
    load_any_config(ROOT / args.config)


def test_the_sample_loader_and_the_job_are_in_the_file_and_survive_a_restart() -> None:
    assert sorted(COMMANDS) == ["job", "load-sample"]
    assert "--once" in COMMANDS["load-sample"]  # a second `up` loads nothing twice
    kafka = COMPOSE["services"]["kafka"]
    log_dir = kafka["environment"]["KAFKA_LOG_DIRS"]
    assert any(v.endswith(f":{log_dir}") for v in kafka["volumes"])
    assert "CLUSTER_ID" in kafka["environment"]
    assert any(v.endswith(":/app/state") for v in COMPOSE["services"]["job"]["volumes"])
