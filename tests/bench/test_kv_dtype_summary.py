"""bench/kv_dtype_summary.py: fp8 figures beside bf16's, with the issue's targets checked."""
from __future__ import annotations

import json
from pathlib import Path

from bench.kv_dtype_summary import main, summarize


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_figures_ratios_and_checks(tmp_path: Path) -> None:
    detail, out = tmp_path / "detail", tmp_path / "out"
    out.mkdir()
    write(detail / "suite-auto" / "summary.json", {"ttft_p50_ms_128": 7.5, "ttft_p50_ms_2048": 48.0,
                                                   "ttft_p50_ms_8192": 190.0, "itl_p50_ms_b1": 4.7,
                                                   "itl_p50_ms_b64_ctx2048": 9.0, "gpu_name": "x"})
    write(detail / "suite-fp8" / "summary.json", {"ttft_p50_ms_128": 7.6, "ttft_p50_ms_2048": 49.5,
                                                  "ttft_p50_ms_8192": 191.0, "itl_p50_ms_b1": 4.6,
                                                  "itl_p50_ms_b64_ctx2048": 6.4})
    write(out / "kv_debug_auto.json", {"dtype": "bfloat16", "pool_tokens": 884_976, "bytes_per_token": 131072})
    write(out / "kv_debug_fp8.json", {"dtype": "fp8_e4m3", "pool_tokens": 1_742_992, "bytes_per_token": 66560})
    s = summarize(detail, out)
    assert s["itl_p50_ms_b64_ctx2048_fp8"] == 6.4 and s["kv_pool_tokens_fp8"] == 1_742_992
    assert s["kv_pool_tokens_ratio_fp8"] == round(1_742_992 / 884_976, 4)
    assert s["checks"] == {"itl_b64_ctx2048_fp8_le_7ms": True, "ttft_p50_ms_128_fp8_within_2pct": True,
                           "ttft_p50_ms_2048_fp8_within_2pct": False, "ttft_p50_ms_8192_fp8_within_2pct": True,
                           "itl_p50_ms_b1_fp8_within_2pct": True, "kv_pool_tokens_fp8_ge_1.95x": True}
    assert "gpu_name" not in s
    assert main([str(detail), str(out)]) == 0
    md = (out / "kv_dtype_summary.md").read_text()
    assert "| ttft_p50_ms_2048 | 48.000 | 49.500 | +3.1% |" in md and "| ttft_p50_ms_2048_fp8_within_2pct | NO |" in md


def test_missing_runs_leave_their_figures_out(tmp_path: Path) -> None:
    s = summarize(tmp_path / "none", tmp_path)
    assert s == {"checks": {}}


def test_decode_floors_at_the_measured_copy_rate(tmp_path: Path) -> None:
    """At the H200's ~4.3 TB/s the fp8 floor is the issue's 5.5 ms, so 7.0 ms there is the ratio
    held to on any GPU: here 10.0 ms at 3.0 TB/s passes (floor 7.91 ms) and 10.2 does not."""
    detail, out = tmp_path / "detail", tmp_path / "out"
    write(detail / "suite-auto" / "summary.json", {"itl_p50_ms_b64_ctx2048": 12.0})
    write(out / "kv_debug_auto.json", {"dtype": "bfloat16", "pool_tokens": 1, "bytes_per_token": 131072})
    write(out / "kv_debug_fp8.json", {"dtype": "fp8_e4m3", "pool_tokens": 2, "bytes_per_token": 66560})
    write(out / "rates.json", {"copy_tbps": 4.3})
    write(detail / "suite-fp8" / "summary.json", {"itl_p50_ms_b64_ctx2048": 7.0})
    s = summarize(detail, out)
    assert abs(s["itl_b64_ctx2048_floor_ms_fp8"] - 5.52) < 0.01 and abs(s["itl_b64_ctx2048_floor_ms"] - 7.49) < 0.01
    assert s["checks"]["itl_b64_ctx2048_fp8_le_1.27x_floor"] and s["checks"]["itl_b64_ctx2048_fp8_le_7ms"]
    write(out / "rates.json", {"copy_tbps": 3.0})
    for itl, met in ((10.0, True), (10.2, False)):
        write(detail / "suite-fp8" / "summary.json", {"itl_p50_ms_b64_ctx2048": itl})
        s = summarize(detail, out)
        assert abs(s["itl_b64_ctx2048_floor_ms_fp8"] - 7.911) < 0.001
        assert abs(s["itl_b64_ctx2048_ratio_to_floor_fp8"] - itl / 7.911) < 1e-3
        assert s["checks"]["itl_b64_ctx2048_fp8_le_1.27x_floor"] is met and not s["checks"]["itl_b64_ctx2048_fp8_le_7ms"]


def test_ttft_ratios_to_their_floors_at_the_sustained_rate(tmp_path: Path) -> None:
    from bench.floors import ttft_floor_ms
    from gpu_stage.loaders.dummy_loader import dummy_preset

    detail, out = tmp_path / "detail", tmp_path / "out"
    write(detail / "suite-auto" / "summary.json", {"ttft_p50_ms_2048": 48.0})
    write(detail / "suite-fp8" / "summary.json", {"ttft_p50_ms_2048": 49.0})
    write(out / "rates.json", {"copy_tbps": 3.0, "sustained_tflops": 670.0})
    s = summarize(detail, out)
    floor = ttft_floor_ms(dummy_preset("llama-3.1-8b"), 2048, 670.0, 3.0)
    assert s["ttft_p50_ms_2048_floor"] == round(floor, 3)
    assert s["ttft_p50_ms_2048_ratio_to_floor"] == round(48.0 / floor, 4)
    assert s["ttft_p50_ms_2048_ratio_to_floor_fp8"] == round(49.0 / floor, 4)
    assert "ttft_p50_ms_128_ratio_to_floor" not in s  # no such figure measured


def test_the_512_token_ttft_and_the_batch_1_itl_get_their_floor_ratios(tmp_path: Path) -> None:
    from bench.floors import decode_floor_ms, ttft_floor_ms
    from gpu_stage.loaders.dummy_loader import dummy_preset

    detail, out = tmp_path / "detail", tmp_path / "out"
    config = dummy_preset("llama-3.1-8b")
    write(detail / "suite-auto" / "summary.json", {"ttft_p50_ms_512": 20.0, "itl_p50_ms_b1": 6.0})
    write(detail / "suite-fp8" / "summary.json", {"ttft_p50_ms_512": 21.0, "itl_p50_ms_b1": 5.9})
    write(out / "kv_debug_auto.json", {"dtype": "bfloat16", "pool_tokens": 1000, "bytes_per_token": 131072})
    write(out / "kv_debug_fp8.json", {"dtype": "fp8_e4m3", "pool_tokens": 1970, "bytes_per_token": 66560})
    write(out / "rates.json", {"copy_tbps": 3.0, "sustained_tflops": 670.0})
    s = summarize(detail, out)
    assert s["ttft_p50_ms_512_ratio_to_floor"] == round(20.0 / ttft_floor_ms(config, 512, 670.0, 3.0), 4)
    assert s["ttft_p50_ms_512_ratio_to_floor_fp8"] == round(21.0 / ttft_floor_ms(config, 512, 670.0, 3.0), 4)
    b1 = decode_floor_ms(config, 1, 256, 3.0, 131072)
    assert s["itl_b1_floor_ms"] == round(b1, 3) and s["itl_b1_ratio_to_floor"] == round(6.0 / b1, 4)
    assert s["itl_b1_ratio_to_floor_fp8"] == round(5.9 / decode_floor_ms(config, 1, 256, 3.0, 66560), 4)
    assert s["itl_b1_ratio_to_floor"] > 1.0  # 6 ms against a ~5.4 ms read of 16 GB at 3 TB/s
