"""Compile the decode kernel for sm_90 on a machine without a GPU and count its SASS: registers,
spills, shared memory, and the instructions of the K/V tile loop by opcode. A variant's static
cost before spending device time on it (the device's Triton is 3.6.0: run this with that version
first on the path, e.g. a venv holding triton==3.6.0):

    PYTHONPATH=/path/to/triton36/site-packages:$PWD python lab/sass_probe.py kbits_n64_w2_s2 [more...]
    python lab/sass_probe.py bf16 --dump DIR     # also writes each variant's PTX and SASS

The loop is the largest basic-block run between the backward branch and its target; counts are
per warp per K/V tile (the case: Llama-3-8B shape, 8-bit pool rows of 1,040 bytes, block 16).
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from gpu_stage.kernels import decode_attention as da  # noqa: E402
from gpu_stage.kernels.decode_variants import QUANT_VARIANTS  # noqa: E402
from gpu_stage.kernels.kv_dequant import QUANT_KNOBS  # noqa: E402

PTR_TYPES = {"q_ptr": "*bf16", "out_ptr": "*bf16", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32",
             "seq_lens_ptr": "*i32", "bt_ptr": "*i32", "scale_ptr": "*bf16", "sm_scale_log2": "fp32"}
# what Triton's launcher would see at the case: 16-divisible values get the divisibility hint
INTS = {"stride_q_t": 4096, "stride_q_h": 128, "stride_o_t": 4096, "stride_o_h": 128,
        "stride_c_block": 64 * 16 * 1040, "stride_c_kv": 16 * 1040, "stride_c_tok": 1040, "stride_c_head": 128,
        "stride_bt": 130, "block_size": 16, "num_heads": 32, "window": 3, "stride_s_block": 32 * 16 * 520,
        "stride_s_kv": 16 * 520, "stride_s_tok": 520}


def compile_variant(name: str, fmt: int = 1, num_splits: int = 1):
    quant = name != "bf16"
    cfg = dict(da.GPU_CONFIG) if not quant else dict(QUANT_VARIANTS[name])
    kernel = da.decode_kernel_of(cfg)
    knobs = {k: cfg.pop(k) for k in QUANT_KNOBS if k in cfg}
    if quant:
        knobs["FMT"] = fmt
        knobs["BLOCK_SIZE"] = 16 if knobs.pop("CONST_BLOCK", False) else 0
    constexprs = {"GROUP": 4, "HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_H": 16, "BLOCK_N": cfg.pop("BLOCK_N"),
                  "NUM_SPLITS": num_splits, "IEEE": False, "UPCAST": False, "USE_PDL": False, "QUANT": quant,
                  **knobs}
    signature, attrs = {}, {}
    for i, arg in enumerate(kernel.arg_names):
        if arg in constexprs:
            signature[arg] = "constexpr"
        elif arg == "kv_ptr":
            signature[arg] = "*fp8e4nv" if quant else "*bf16"
        elif arg in PTR_TYPES:
            signature[arg] = PTR_TYPES[arg]
        else:
            signature[arg] = "i32"
        if signature[arg].startswith("*") or INTS.get(arg, 1) % 16 == 0:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(kernel, signature, {(kernel.arg_names.index(k),): v for k, v in constexprs.items()}, attrs)
    options = {k: v for k, v in cfg.items() if k in ("num_warps", "num_stages", "maxnreg")}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def sass_of(compiled) -> tuple[str, str]:
    """(SASS, resource usage line) of a compiled kernel, by the tools bundled with Triton."""
    import subprocess
    import tempfile

    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        sass = subprocess.run([str(tools / "nvdisasm"), "-c", f.name], capture_output=True, text=True, check=True)
        res = subprocess.run([str(tools / "cuobjdump"), "-res-usage", f.name], capture_output=True, text=True)
    usage = re.search(r"REG:\d+.*", res.stdout)
    return sass.stdout, usage.group(0) if usage else res.stdout.strip()[-200:]


def loop_counts(sass: str) -> tuple[int, collections.Counter]:
    """Opcodes of the instructions from the tile loop's start (the target of the last backward
    branch) to that branch."""
    lines = [ln for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", ln)]
    addr = [int(re.search(r"/\*([0-9a-f]{4,})\*/", ln).group(1), 16) for ln in lines]
    labels = {m.group(1): None for ln in sass.splitlines() if (m := re.match(r"\.(L_x_\d+):", ln.strip()))}
    # nvdisasm prints labels on their own lines: map each label to the next instruction's address
    label_addr, pending = {}, []
    for ln in sass.splitlines():
        m = re.match(r"\s*\.(L_x_\d+):", ln)
        if m:
            pending.append(m.group(1))
        elif (a := re.search(r"/\*([0-9a-f]{4,})\*/", ln)) and pending:
            for p in pending:
                label_addr[p] = int(a.group(1), 16)
            pending = []
    del labels
    best = (0, 0)
    for ln, a in zip(lines, addr):
        m = re.search(r"BRA\s+.*?`?\(?\.(L_x_\d+)", ln)
        if m and label_addr.get(m.group(1), a + 1) < a and a - label_addr[m.group(1)] > best[1] - best[0]:
            best = (label_addr[m.group(1)], a)
    ops = collections.Counter()
    for ln, a in zip(lines, addr):
        if best[0] <= a <= best[1]:
            m = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[\w.]+)?", ln)
            if m:
                ops[m.group(1)] += 1
    return sum(ops.values()), ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--fmt", type=int, default=1, help="0 int8, 1 fp8 e4m3, 2 fp8 e5m2")
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--dump", type=Path)
    ap.add_argument("--top", type=int, default=14)
    args = ap.parse_args()
    print(f"triton {triton.__version__}, sm_90")
    for name in args.variants:
        c = compile_variant(name, args.fmt, args.splits)
        sass, usage = sass_of(c)
        n, ops = loop_counts(sass)
        print(f"{name}: {c.metadata.num_warps} warps, {usage}; "
              f"loop {n} instr/warp/tile: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(args.top)))
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{name}.ptx").write_text(c.asm["ptx"])
            (args.dump / f"{name}.sass").write_text(sass)


if __name__ == "__main__":
    main()
