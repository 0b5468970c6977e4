"""ConfigError: its text and pickling."""

from __future__ import annotations

import pickle

from window_operator.config import ConfigError, ConfigProblem


def test_config_error_pickles() -> None:
    error = ConfigError("a.yaml", [ConfigProblem("job", "required key is missing")])
    copied = pickle.loads(pickle.dumps(error))
    assert (
        str(copied) == str(error) == "invalid job config a.yaml:\n  - job: required key is missing"
    )
    assert copied.problems == error.problems
