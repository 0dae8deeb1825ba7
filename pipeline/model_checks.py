"""What `ttft serve` checks of the model and the device before it listens or loads any weight.

The flags' ranges come first (pipeline/flag_checks.py); then, on the built EngineConfig, what needs
a look at the disk: that `--model` names something loadable (an existing `.gguf` file, a directory
with a `config.json`, a known dummy preset, or the installed default), that `--speculative-config`
and `--chat-template` parse, and that `--kv-disk-path` is no regular file. These run before torch
loads (its import is most of a refusal's time); `check_device_and_kv` then asks torch whether
`--device cuda` has a device and whether the KV format runs on it. Each failure is a one-line
`UsageError` naming the flag. Loading the weights can still refuse a model (a field it cannot run):
that is a start-up error, exit 2 too.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pipeline.config import EngineConfig
from pipeline.flag_checks import UsageError

MODEL_KINDS = "a .gguf file, a Hugging Face model directory or dummy:<preset>"


def check_model_and_flags(cfg: EngineConfig) -> None:
    """Raise UsageError for the first of these that cannot work; imports no torch."""
    check_model(cfg.model)
    check_speculative(cfg)
    check_chat_template(cfg.chat_template)
    check_kv_disk_path(cfg.kv_disk_path)


def check_device_and_kv(cfg: EngineConfig) -> None:
    """Raise UsageError when the device or its KV format cannot work (imports torch: call it after
    the OpenMP environment is set)."""
    check_device(cfg)
    check_kv_cache_dtype(cfg)


def check_model(spec: str | None) -> None:
    from gpu_stage.loaders import DUMMY_PREFIX, default_model_path
    from gpu_stage.loaders.dummy_presets import dummy_preset

    if spec is None:
        try:
            default_model_path()
        except ValueError as exc:
            raise UsageError(f"--model (the default SmolLM2-135M-Instruct): {exc}") from None
        return
    if spec.startswith(DUMMY_PREFIX):
        try:
            dummy_preset(spec[len(DUMMY_PREFIX):])  # its shape; its weights are drawn at start-up
        except ValueError as exc:
            raise UsageError(f"--model {spec}: {exc}") from None
        return
    path = Path(spec).expanduser()
    if not path.exists():
        raise UsageError(f"--model {spec}: no such file or directory (expected {MODEL_KINDS})")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"--model {spec}: a model directory needs a config.json (expected {MODEL_KINDS})")
        return
    if path.suffix.lower() != ".gguf":
        raise UsageError(f"--model {spec}: not a .gguf file (expected {MODEL_KINDS})")
    if not os.access(path, os.R_OK):
        raise UsageError(f"--model {spec}: cannot be read (permission denied)")


def check_device(cfg: EngineConfig) -> None:
    if cfg.device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here (use --device cpu or auto)")


def check_kv_cache_dtype(cfg: EngineConfig) -> None:
    import torch

    from gpu_stage.kv.format import check_kv_format, resolve_kv_format

    model_dtype = getattr(torch, cfg.resolved_dtype())
    try:
        check_kv_format(resolve_kv_format(cfg.kv_cache_dtype, model_dtype), cfg.resolved_device())
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_speculative(cfg: EngineConfig) -> None:
    from pipeline.spec_flags import resolve_speculative

    try:
        resolve_speculative(dataclasses.replace(cfg))  # on a copy: it settles async scheduling in place
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_chat_template(value: str | None) -> None:
    if value is None:
        return
    from ingress.chat_template import load_chat_template

    try:
        load_chat_template(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_kv_disk_path(value: str | None) -> None:
    """The disk tier's directory, made at start-up when missing: a file in its place or on its way
    (or a directory that cannot be written) could only fail once the weights are loaded."""
    if value is None:
        return
    path = Path(value).expanduser()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        where = "" if existing == path else f" ({existing} is a file)"
        raise UsageError(f"--kv-disk-path {value}: not a directory{where}: the disk KV tier "
                         "keeps a directory of block files")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--kv-disk-path {value}: {existing} cannot be written (permission denied)")
