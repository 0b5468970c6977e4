"""A fresh 4-partition input topic per test."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from jobkit import create_topic


@pytest.fixture
def topic(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> str:
    name = unique_name("in")
    create_topic(kafka_bootstrap, name)
    return name
