"""lab/request_path.py: the files one streaming chat request runs through (every thread's), the
entries into the routes, the files that name framing (code only, not comments or strings), and the
time to the first write."""
from __future__ import annotations

import asyncio

from lab import request_path


async def test_the_path_of_one_request_is_recorded_up_to_its_first_chunk():
    result = await request_path.measure()
    files = set(result["files"])
    assert {"pipeline/openai_routes.py", "ingress/stage.py", "scheduler/stage.py", "gpu_stage/stage.py",
            "emitter/stage.py", "protocol/responses/replies.py"} <= files
    assert all(f.split("/")[0] in request_path.PACKAGES for f in files) and result["num_files"] == len(files)
    assert result["route_entries"] >= 1
    assert result["first_chunk"].startswith('data: {"id":"chatcmpl-') and '"role":"assistant"' in result["first_chunk"]
    assert result["framing_files"] and all(f.startswith("protocol/responses/") for f in result["framing_files"])


def test_framing_is_found_by_the_names_code_uses(tmp_path):
    code = tmp_path / "code.py"
    code.write_text('"""sse_event in a docstring"""\n# SSE_DONE in a comment\nx = "framer"\n')
    assert not request_path.FRAMING & request_path.names_in(code)
    code.write_text("from x import sse_event\n")
    assert request_path.FRAMING & request_path.names_in(code) == {"sse_event"}
    assert request_path.packaged(str(request_path.ROOT / "protocol" / "errors.py")) == "protocol/errors.py"
    assert request_path.packaged(str(request_path.ROOT / "lab" / "request_path.py")) is None


def test_time_to_first_chunk():
    times = asyncio.run(request_path.time_to_first_chunk(3))
    assert len(times) == 3 and times == sorted(times) and times[0] > 0
