"""model_checks: what needs a look at the disk is refused before any weight loads; here the disk KV
tier's directory (a file in its place, or on its way to it, is one line naming the flag)."""
from __future__ import annotations

import pytest

from pipeline.flag_checks import UsageError
from pipeline.model_checks import check_kv_disk_path


def test_a_directory_or_a_path_still_to_make_passes(tmp_path):
    check_kv_disk_path(None)
    check_kv_disk_path(str(tmp_path))
    check_kv_disk_path(str(tmp_path / "new" / "deeper"))


@pytest.mark.parametrize("below", ["", "sub", "sub/deeper"])
def test_a_file_in_the_way_is_refused_naming_the_flag(tmp_path, below):
    (tmp_path / "blocks").write_text("x")
    path = tmp_path / "blocks" / below if below else tmp_path / "blocks"
    with pytest.raises(UsageError) as info:
        check_kv_disk_path(str(path))
    message = str(info.value)
    assert message.startswith(f"--kv-disk-path {path}: not a directory") and "\n" not in message
    assert (f"({tmp_path / 'blocks'} is a file)" in message) == bool(below)
