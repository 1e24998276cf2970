"""Files we read back and places we write to: a damaged JSON file or an unwritable place is one
UserError naming it, never a traceback (issue #11)."""

from __future__ import annotations

import pytest

from precision_doctor.errors import UserError
from precision_doctor.jsonio import CannotWrite, InvalidJSON, read_json, write_json
from precision_doctor.zoo import fetch as zoo


@pytest.mark.parametrize("content, words", [
    ("", "is empty"),
    ('{"passed": true, "fallback_nodes": ["a", ', r"not valid JSON \(line 1 column"),
    ("\x00\x01 garbage", "not valid JSON"),
])
def test_damaged_json_is_a_user_error_and_a_value_error(tmp_path, content, words):
    p = tmp_path / "report.json"
    p.write_text(content)
    with pytest.raises(InvalidJSON, match=words) as info:
        read_json(p)
    assert str(p) in str(info.value) and isinstance(info.value, UserError) and isinstance(info.value, ValueError)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(InvalidJSON, match="not UTF-8"):
        read_json(tmp_path / "bin.json")


def test_round_trip_and_unwritable_place(tmp_path):
    write_json(tmp_path / "a.json", {"x": float("nan"), "y": [1, 2]}, writer=None)
    assert read_json(tmp_path / "a.json") == {"x": "nan", "y": [1, 2]}
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(CannotWrite, match=r"cannot write .*afile/b\.json") as info:
        write_json(tmp_path / "afile" / "b.json", {}, writer=None)
    assert isinstance(info.value, OSError) and (tmp_path / "afile").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "afile"]  # no temporary file left


def test_zoo_dest_that_is_a_file_or_unknown_name_writes_nothing(tmp_path):
    (tmp_path / "afile").write_text("mine")

    def no_download(req, into):
        raise AssertionError("nothing is downloaded for a bad --dest")

    with pytest.raises(UserError, match=r"--dest .*afile exists and is not a directory"):
        zoo.fetch(tmp_path / "afile", download=no_download, log=lambda s: None)
    with pytest.raises(UserError, match=r"--dest .*afile/zoo: cannot write there"):
        zoo.fetch(tmp_path / "afile" / "zoo", download=no_download, log=lambda s: None)
    with pytest.raises(UserError, match="unknown zoo model 'nope'"):
        zoo.fetch(tmp_path / "z", names=["nope"], download=no_download, log=lambda s: None)
    assert not (tmp_path / "z").exists() and (tmp_path / "afile").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
