"""Progress bars: none (and no tqdm) unless stderr is a terminal."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from stores.changelog import RestoreProgress
from window_operator.observe.progress import RestoreBar, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_bar(total=10, desc="x") is None
    bar = RestoreBar(0)
    bar(RestoreProgress("t", 0, start=0, position=5, end=10, records=5))
    bar(RestoreProgress("t", 0, start=0, position=10, end=10, records=10, done=True))
    assert bar.bar is None


def test_a_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", _Terminal())
    bar = progress_bar(total=10, desc="x")
    assert bar is not None
    bar.update(4)
    assert bar.n == 4
    bar.close()


def test_tqdm_is_not_even_imported_off_a_terminal() -> None:
    code = (
        "import sys\n"
        "from window_operator.observe.progress import progress_bar\n"
        "progress_bar(total=1, desc='x')\n"
        "print('tqdm' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
