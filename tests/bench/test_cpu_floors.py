"""bench.cpu_floors: the floors' arithmetic on SmolLM2's shape, the probes on small buffers, the
ratios a compare record gets, and the command's output and refusals."""
from __future__ import annotations

import json

import pytest
import torch

from bench import cpu_floors
from bench.cpu_floors import (bandwidth_gbps, decode_floor_ms, matmul_gflops, prefill_floor_ms, ratios,
                              weight_read_bytes_f32)
from bench.floors import prefill_flops
from gpu_stage.loaders.dummy_loader import dummy_preset

SMOL = dummy_preset("smollm2-135m")


def test_a_decode_step_reads_the_float32_weights_and_the_kv() -> None:
    assert weight_read_bytes_f32(SMOL) == SMOL.num_params() * 4  # tied: the table is read as the head
    assert 530e6 < weight_read_bytes_f32(SMOL) < 545e6
    alone = decode_floor_ms(SMOL, 1, 0, read_gbps=10.0)
    assert alone == pytest.approx(weight_read_bytes_f32(SMOL) / 10e9 * 1e3)
    kv = 4 * 1000 * 2 * 30 * 192 * 4  # batch x context x (K and V, layers, kv size, float32)
    assert decode_floor_ms(SMOL, 4, 1000, 10.0) - alone == pytest.approx(kv / 10e9 * 1e3)


def test_a_prefill_floor_is_its_flops_over_the_rate() -> None:
    assert prefill_floor_ms(SMOL, 100, 50.0) == pytest.approx(prefill_flops(SMOL, 100) / 50e9 * 1e3)


def test_the_probes_measure_something_positive() -> None:
    bw = bandwidth_gbps(buffer_mib=8, repeats=1)
    assert bw["read_gbps"] > 0 and bw["copy_gbps"] > 0
    assert matmul_gflops(torch.float32, ((32, 64, 48),), repeats=1) > 0


def _floors() -> dict:
    return {"read_gbps": 20.0, "matmul_gflops_f32": 100.0, "model": SMOL.__dict__}


def test_a_record_gets_its_ratios_to_the_floor() -> None:
    record = {"median_itl_ms": 50.0, "median_ttft_ms": 100.0}
    out = ratios(record, _floors(), concurrency=4, input_len=40, output_len=32)
    assert out["decode_floor_ms"] == pytest.approx(decode_floor_ms(SMOL, 4, 56, 20.0))
    assert out["itl_to_floor"] == pytest.approx(50.0 / out["decode_floor_ms"])
    assert out["ttft_to_floor"] == pytest.approx(100.0 / prefill_floor_ms(SMOL, 40, 100.0))
    assert ratios({"error": "boom"}, _floors(), 4, 40, 32) == {}


def test_the_command_writes_json(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cpu_floors, "bandwidth_gbps", lambda repeats: {"read_gbps": 20.0, "copy_gbps": 30.0})
    monkeypatch.setattr(cpu_floors, "matmul_gflops", lambda dtype, shapes=(), repeats=1: 100.0)
    out = tmp_path / "f" / "floors.json"
    assert cpu_floors.main(["--out", str(out), "--repeats", "1"]) == 0
    data = json.loads(out.read_text())
    assert data["read_gbps"] == 20.0 and data["cpu_flags"] is not None and data["usable_cores"] >= 1
    assert data["decode_floor_ms"]["b1_ctx56"] == pytest.approx(decode_floor_ms(SMOL, 1, 56, 20.0))
    assert json.loads(capsys.readouterr().out) == data


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--preset", "no-such-model"]])
def test_bad_arguments_exit_2(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cpu_floors.main(argv)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err
