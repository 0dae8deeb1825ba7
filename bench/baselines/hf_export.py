"""Write any model ttft loads as a Hugging Face directory (config.json, model.safetensors, tokenizer
files), so that another server (vLLM's CPU build, transformers) can serve exactly ttft's weights.

    python -m bench.baselines.hf_export OUT_DIR [--model SPEC] [--dtype float32]

The tensors go through ttft's own loader (`build_hf_model_from_source`: a GGUF dequantized and
un-permuted once, by the code `ttft serve` runs), then transformers' `save_pretrained`. The
tokenizer of a GGUF file is converted by transformers' GGUF reader (`gguf_file=`), which writes
tokenizer.json with the chat template; a Hugging Face directory's own tokenizer files are copied.
The directory is reused when its `export.json` names the same source fingerprint and dtype.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from bench.baselines.hf_weights import DTYPES, build_hf_model_from_source, import_transformers
from gpu_stage.loaders import default_model_path, load_model_source

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")
STAMP = "export.json"


def _source_path(spec: str | None) -> Path | None:
    """The file or directory behind a model spec (None for dummy weights, which have no tokenizer files)."""
    if spec is None:
        return default_model_path()
    return None if spec.startswith("dummy:") else Path(spec).expanduser()


def _save_tokenizer(path: Path, out: Path):
    """Tokenizer files for `out`, from a GGUF file or a Hugging Face directory; -> the tokenizer."""
    transformers = import_transformers()
    if path.is_dir():
        for name in TOKENIZER_FILES:
            if (path / name).is_file():
                shutil.copy2(path / name, out / name)
        return transformers.AutoTokenizer.from_pretrained(str(path))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tokenizer.save_pretrained(str(out))
    return tokenizer


def export_hf_dir(out: str | Path, spec: str | None = None, dtype: str = "float32") -> Path:
    """`out` holding the model of `spec` (None: the packaged SmolLM2) in `dtype`; -> `out`."""
    out = Path(out)
    source = load_model_source(spec)
    stamp = {"fingerprint": source.fingerprint, "dtype": dtype}
    if (out / STAMP).is_file() and json.loads((out / STAMP).read_text()) == stamp:
        return out
    path = _source_path(spec)
    if path is None:
        raise ValueError("dummy weights have no tokenizer files to export: name a .gguf file or a model directory")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _save_tokenizer(path, out)
    model = build_hf_model_from_source(source, "cpu", DTYPES[dtype])
    # The real special tokens (hf_config leaves EOS unset for the dummy tokenizer's sake).
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(model.config, name, getattr(tokenizer, name))
        setattr(model.generation_config, name, getattr(tokenizer, name))
    model.config.dtype = dtype
    model.save_pretrained(str(out), safe_serialization=True)
    (out / STAMP).write_text(json.dumps(stamp))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="directory to write")
    parser.add_argument("--model", default=None, help="what `ttft serve --model` takes (default: the packaged SmolLM2)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    args = parser.parse_args(argv)
    print(export_hf_dir(args.out, args.model, args.dtype))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
