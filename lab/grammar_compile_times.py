"""Compile times of a few JSON schemas with the llguidance backend on SmolLM2's vocabulary, beside
the time to tokenize a 2,000-token prompt: how late a compile can be next to what it overlaps at
ingress (notes/structured.md).

    PYTHONPATH=$PWD python lab/grammar_compile_times.py
"""
import time, orjson, statistics
from gpu_stage.loaders import default_model_path, load_model_source
from structured.tokenizer_bridge import ll_tokenizer, warm
from structured.llguidance_backend import LlguidanceBackend
from bench.extra_body import PRESETS
src = load_model_source(str(default_model_path()))
ll = ll_tokenizer(src.tokenizer, src.config.vocab_size); warm(ll)
b = LlguidanceBackend(ll)
schemas = {
 "preset": PRESETS["json_schema"]["response_format"]["json_schema"]["schema"],
 "30_fields": {"type": "object", "properties": {f"f{i}": {"type": ["string", "integer", "boolean"][i % 3]} for i in range(30)}, "required": [f"f{i}" for i in range(30)]},
 "enum_2000": {"type": "object", "properties": {"city": {"enum": [f"city number {i}" for i in range(2000)]}}, "required": ["city"]},
 "regex_heavy": {"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": "^([a-z]{2,8}-){1,4}[0-9]{3,6}(\\.[A-Z]+)?$"} for i in range(20)}},
}
for name, s in schemas.items():
    spec = orjson.dumps(s).decode()
    ts = []
    for k in range(5):
        t0 = time.perf_counter(); b.compile("json_schema", spec + " " * k); ts.append(time.perf_counter() - t0)
    print(name, "compile ms median", round(statistics.median(ts) * 1e3, 2), "max", round(max(ts) * 1e3, 2))
text = "word " * 2000
t0 = time.perf_counter(); ids = src.tokenizer.encode(text, add_special_tokens=True); print("tokenize", len(ids), "tokens ms", round((time.perf_counter() - t0) * 1e3, 2))
