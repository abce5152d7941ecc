"""Bad input is an error naming the rule, never a crash: the YAML/JSON loader's limits
(`shared.api.loading`) and the file reader's (`shared.runtime.inputs`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shared.api.loading import MAX_ALIAS_NODES, LoadError, check_nesting, json_value, yaml_documents
from shared.config import InputLimits
from shared.runtime.inputs import InputError, json_lines, read_json, read_text, read_yaml
from shared.runtime.scenarios import load_scenario
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc


def flow(depth: int) -> str:
    return "a: " + "[" * depth + "]" * depth


def block(depth: int) -> str:
    return "".join(" " * i + "k:\n" for i in range(depth))


def laughs(levels: int = 9) -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for previous, name in zip("abcdefghij", "bcdefghijk"[: levels - 1], strict=False):
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
    return text


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (flow(65), "nested deeper than 64 levels (the limit is NODEWRIGHT_MAX_NESTING=64), at line 1"),
        (block(100), "nested deeper than 64 levels"),
        (flow(1000), "nested deeper than 64 levels"),  # libyaml's own stop
        (flow(100_000), "nested deeper than 64 levels"),
        ("- " * 5000 + "x", "nested deeper than 64 levels"),
        (laughs(), "a 'billion laughs'?"),
        ("a: &a [1, *a]", "contain itself"),
        ("a: 2026-13-45", "not valid YAML: month must be in 1..12"),
        ("a: " + "9" * 5000, "not valid YAML: Exceeds the limit"),
        ("? [a]\n: 1", "not valid YAML"),
        ("a: [1, 2", "not valid YAML"),
        ("\ud800", "not valid YAML"),
    ],
    ids=[
        "flow-65",
        "block-100",
        "flow-1000",
        "flow-100000",
        "sequence-5000",
        "billion-laughs",
        "recursive-alias",
        "bad-date",
        "int-5000-digits",
        "list-key",
        "unclosed",
        "surrogate",
    ],
)
def test_yaml_past_a_limit_is_a_load_error(text, fragment):
    with pytest.raises(LoadError) as caught:
        yaml_documents(text)
    assert fragment in str(caught.value)


def test_yaml_within_the_limits_loads():
    assert yaml_documents(flow(63)) == [{"a": eval("[" * 63 + "]" * 63)}]
    assert yaml_documents("---\n# nothing\n---\nx: 1\n--- 2\n") == [{"x": 1}, 2]
    assert yaml_documents(laughs(4))[0]["d"][0][0][0] == ["lol"] * 9  # 9**4 nodes: accepted
    shared = "base: &r {cpu: '1'}\n" + "".join(f"w{i}: *r\n" for i in range(1000))
    assert len(yaml_documents(shared)[0]) == 1001
    assert yaml_documents(flow(100), max_nesting=101)[0]["a"]


def test_many_aliases_of_a_large_node_are_refused():
    big = "big: &b [" + ",".join(["1"] * 1000) + "]\n"
    ok = big + "use: [" + ",".join(["*b"] * (MAX_ALIAS_NODES // 1001)) + "]\n"
    yaml_documents(ok)
    with pytest.raises(LoadError, match="billion laughs"):
        yaml_documents(big + "use: [" + ",".join(["*b"] * 200) + "]\n")


def test_json_past_the_nesting_limit():
    for depth in (65, 1000, 100_000):
        with pytest.raises(LoadError, match="nested deeper than 64 levels"):
            json_value("[" * depth + "]" * depth)
    assert json_value('{"a": [1]}') == {"a": [1]}
    with pytest.raises(LoadError, match="not valid JSON"):
        json_value("{")
    with pytest.raises(LoadError, match="nested deeper than 3"):
        check_nesting({"a": [{"b": [1]}]}, 3)


def limits(**values: object) -> InputLimits:
    return InputLimits.model_validate(values)


def test_a_file_past_the_size_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("a: 1\n" * 1000)
    with pytest.raises(InputError) as caught:
        read_text(path, limits(max_input_bytes="1KiB"))
    assert "is 4.9KiB (5,000 bytes): larger than the limit of 1.0KiB (1,024 bytes)" in str(caught.value)
    assert "NODEWRIGHT_MAX_INPUT_BYTES" in caught.value.reason
    assert read_text(path, limits(max_input_bytes=5000)).count("\n") == 1000
    with pytest.raises(InputError, match="holds more than the limit"):  # a device: no size to stat
        read_text(Path("/dev/zero"), limits(max_input_bytes=100))


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (bytes(range(128, 256)), "is not UTF-8 text (a binary file?): byte 0x80 at offset 0"),
        (b"a: 1\n\x00\x01", "is not text (a binary file?): a NUL byte at offset 5"),
    ],
)
def test_binary_files_are_refused(tmp_path, content, fragment):
    path = tmp_path / "x.yaml"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        read_yaml(path)
    assert fragment in str(caught.value)


def test_unreadable_files_and_bad_settings(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="cannot read: No such file or directory"):
        read_json(tmp_path / "missing.json")
    with pytest.raises(InputError, match="cannot read: Is a directory"):
        read_text(tmp_path)
    monkeypatch.setenv("NODEWRIGHT_MAX_NESTING", "1000000")
    with pytest.raises(InputError, match="a bad setting: NODEWRIGHT_MAX_NESTING"):
        read_text(tmp_path / "x")


def test_jsonl_bounds_each_line_not_the_file(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n\n' + '{"b": "' + "x" * 100 + '"}\n' * 3)
    small = limits(max_input_bytes=50)
    rows = json_lines(path, small)
    assert next(rows) == (1, {"a": 1})
    with pytest.raises(InputError, match=r"log.jsonl:3: a line longer than the limit of 50 bytes"):
        next(rows)
    path.write_text('{"a": 1}\n' * 100)  # 900 bytes: far over 50, each line under it
    assert len(list(json_lines(path, small))) == 100
    path.write_text('{"a": 1}\n' + "[" * 70 + "]" * 70 + "\n")
    with pytest.raises(InputError, match=r"log.jsonl:2: nested deeper than 64 levels"):
        list(json_lines(path))


def test_scenario_files_go_through_the_limits(tmp_path):
    path = tmp_path / "s.yaml"
    for text, fragment in [
        ("", "holds no document: a Scenario file holds exactly one"),
        ("# only a comment\n---\n", "holds no document"),
        ("a: 1\n---\nb: 2\n", "holds 2 documents"),
        (laughs(), "billion laughs"),
        (flow(200), "nested deeper than 64 levels"),
    ]:
        path.write_text(text)
        with pytest.raises(ValueError, match=fragment):
            load_scenario(path)
    (tmp_path / "pools.yaml").write_text(yaml.safe_dump(nodepool_doc()) * 20)
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe")
    path.write_text(yaml.safe_dump(scenario_doc(nodePoolFiles=["pools.yaml", "binary.yaml", "none.yaml"])))
    with pytest.raises(ValueError) as caught:
        load_scenario(path, limits(max_input_bytes=2000))
    errors = {e.path: e.message for e in caught.value.errors}  # type: ignore[attr-defined]
    assert "larger than the limit of 2.0KiB (2,000 bytes)" in errors["spec.nodePoolFiles[0]"]
    assert "not UTF-8 text" in errors["spec.nodePoolFiles[1]"]
    assert "not found" in errors["spec.nodePoolFiles[2]"]
