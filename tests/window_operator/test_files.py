"""Files replaced whole (clock log, progress, heartbeat)."""

from __future__ import annotations

from pathlib import Path

from window_operator.files import write_atomically


def test_a_file_is_replaced_whole_in_a_folder_made_for_it(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "entry.json"
    write_atomically(path, b"first")
    write_atomically(path, b"second", durable=True)
    assert path.read_bytes() == b"second"
    assert [p.name for p in path.parent.iterdir()] == ["entry.json"]  # no temporary left
