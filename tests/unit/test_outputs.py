"""Output paths checked before any work (`cli.outputs`): each way a path cannot be
written is refused naming the option; a path that can is taken, and nothing is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.outputs import OutputError, check_directory, check_file

UNWRITABLE = Path("/proc/nodewright")
"""Not writable even for root: /proc takes no new file."""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "old.jsonl").write_text("x")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.md").mkdir()  # a directory where a file goes
    return tmp_path


@pytest.mark.parametrize(
    ("path", "says"),
    [
        (".", "is a directory: give the path of a file to write"),
        ("missing/log.jsonl", "missing does not exist"),
        ("a-file/log.jsonl", "a-file is not a directory, so"),
        (str(UNWRITABLE / "log.jsonl"), "/proc/nodewright does not exist"),
        ("/proc/log.jsonl", "cannot write in /proc"),
    ],
)
def test_a_file_that_cannot_be_written_is_refused_naming_the_option(tree: Path, path: str, says: str):
    with pytest.raises(OutputError) as refused:
        check_file(tree / path, "--save-anchor")
    assert str(refused.value).startswith("--save-anchor: ") and says in str(refused.value)


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("a-file", "a-file exists and is not a directory"),
        ("a-file/report", "a-file is not a directory, so"),
        ("report", "report.md is a directory, where the report writes a file"),
        (str(UNWRITABLE / "report"), "cannot write in /proc"),
    ],
)
def test_a_directory_that_cannot_be_written_is_refused_naming_the_option(tree: Path, path: str, says: str):
    with pytest.raises(OutputError) as refused:
        check_directory(tree / path, "--report", ("nodes.png", "report.md", "summary.json"))
    assert str(refused.value).startswith("--report: ") and says in str(refused.value)


def test_what_can_be_written_is_taken_and_nothing_is_left_behind(tree: Path):
    before = sorted(tree.rglob("*"))
    check_file(tree / "new.jsonl", "FILE")
    check_file(tree / "old.jsonl", "FILE")  # written over, as before
    check_directory(tree / "new" / "deeper", "DIRECTORY", ("report.md",))  # made with its parents later
    check_directory(tree, "DIRECTORY", ("report.md",))
    assert sorted(tree.rglob("*")) == before
