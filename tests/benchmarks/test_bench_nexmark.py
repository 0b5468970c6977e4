"""The Nexmark benchmark's arguments: each says what it sets, and a mistake is a usage
error before a broker or Spark starts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_nexmark  # noqa: E402


def test_every_option_says_what_it_sets() -> None:
    parser = bench_nexmark.build_parser()
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert {a.dest for a in options} >= {"events", "queries", "partitions", "tmpdir"}
    silent = [a.option_strings[0] for a in options if not a.help or a.help == argparse.SUPPRESS]
    assert silent == []


def test_a_tmpdir_that_is_no_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a FileNotFoundError traceback from mkdtemp
    missing = tmp_path / "nonexistent"
    a_file = tmp_path / "file"
    a_file.write_text("")
    for where, why in [(missing, "does not exist"), (a_file, "is not a directory")]:
        with pytest.raises(SystemExit) as exit_:
            bench_nexmark.main(["--tmpdir", str(where)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1].endswith(f"--tmpdir {where} {why}"), err
        assert "Traceback" not in err
