"""Compile the decode kernel (or, --prefill, the general prefill / mixed one) for sm_90 on a machine
without a GPU and count its SASS: registers, spills, shared memory, and the instructions of the K/V
tile loop by opcode. A variant's static
cost before spending device time on it (the device's Triton is 3.6.0: run this with that version
first on the path, e.g. a venv holding triton==3.6.0):

    PYTHONPATH=/path/to/triton36/site-packages:$PWD python lab/sass_probe.py kbits_n64_w2_s2 [more...]
    python lab/sass_probe.py bf16 --dump DIR     # also writes each variant's PTX and SASS
    python lab/sass_probe.py --prefill bf16 vt_khere_vhere_m64_w4   # prefill_variants' names
    python lab/sass_probe.py --rope bf16 fp8 fp8-vt --lines          # the fused RoPE + store, whole

The loop is the largest basic-block run between the backward branch and its target; counts are
per warp per K/V tile (the case: Llama-3-8B shape, 8-bit pool rows of 1,040 bytes, block 16).
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from gpu_stage.kernels import decode_attention as da  # noqa: E402
from gpu_stage.kernels import interpreting  # noqa: E402
from gpu_stage.kernels.decode_variants import QUANT_VARIANTS  # noqa: E402
from gpu_stage.kernels.kv_dequant import QUANT_KNOBS  # noqa: E402

PTR_TYPES = {"q_ptr": "*bf16", "out_ptr": "*bf16", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32",
             "seq_lens_ptr": "*i32", "bt_ptr": "*i32", "scale_ptr": "*bf16", "sm_scale_log2": "fp32"}
# what Triton's launcher would see at the case: 16-divisible values get the divisibility hint
INTS = {"stride_q_t": 4096, "stride_q_h": 128, "stride_o_t": 4096, "stride_o_h": 128,
        "stride_c_block": 64 * 16 * 1040, "stride_c_kv": 16 * 1040, "stride_c_tok": 1040, "stride_c_head": 128,
        "stride_bt": 130, "block_size": 16, "num_heads": 32, "window": 3, "stride_s_block": 32 * 16 * 520,
        "stride_s_kv": 16 * 520, "stride_s_tok": 520}
INTS_VT = {"stride_v_tok": 1, "stride_v_head": 128 * 16, "stride_v_d": 16}  # the V-transposed layout's V


def compile_variant(name: str, fmt: int = 1, num_splits: int = 1):
    quant = name != "bf16"
    cfg = dict(da.GPU_CONFIG) if not quant else dict(QUANT_VARIANTS[name])
    kernel = da.decode_kernel_of(cfg)
    knobs = {k: cfg.pop(k) for k in QUANT_KNOBS if k in cfg}
    vt = cfg.pop("V_LAYOUT", None) == "vt"
    cfg.pop("MMA_T", None)
    ints = {**INTS, **(INTS_VT if vt else {"stride_v_tok": 1040, "stride_v_head": 128, "stride_v_d": 1})}
    if quant:
        knobs["FMT"] = fmt
        knobs["BLOCK_SIZE"] = 16 if knobs.pop("CONST_BLOCK", False) else 0
    constexprs = {"GROUP": 4, "HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_H": 16, "BLOCK_N": cfg.pop("BLOCK_N"),
                  "NUM_SPLITS": num_splits, "IEEE": False, "UPCAST": False, "USE_PDL": False, "QUANT": quant,
                  **knobs}
    constexprs["V_KEYS"] = vt  # the V-transposed layout
    for param in kernel.params:  # the variant's other knobs (K_BITS, ...), the rest at their defaults
        if param.is_constexpr and param.name not in constexprs:
            constexprs[param.name] = cfg.pop(param.name, param.default)
    return _compile(kernel, constexprs, ints, PTR_TYPES, quant, cfg)


def _compile(kernel, constexprs: dict, ints: dict, ptr_types: dict, quant: bool, cfg: dict):
    """triton.compile for sm_90 with the launcher's specialisations: 16-divisible ints and pointers hinted."""
    signature, attrs = {}, {}
    for i, arg in enumerate(kernel.arg_names):
        if arg in constexprs:
            signature[arg] = "constexpr"
        elif arg == "kv_ptr":
            signature[arg] = "*fp8e4nv" if quant else "*bf16"
        elif arg in ptr_types:
            signature[arg] = ptr_types[arg]
        elif ints.get(arg) == 1:
            signature[arg] = "constexpr"
            constexprs[arg] = 1
        else:
            signature[arg] = "i32"
        if signature[arg].startswith("*") or (signature[arg] == "i32" and ints.get(arg, 1) % 16 == 0):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(kernel, signature, {(kernel.arg_names.index(k),): v for k, v in constexprs.items()}, attrs)
    options = {k: v for k, v in cfg.items() if k in ("num_warps", "num_stages", "maxnreg")}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


PREFILL_INTS = {"num_seqs": 3, "stride_q_t": 4096, "stride_q_h": 128, "stride_o_t": 4096, "stride_o_h": 128,
                "stride_c_block": 64 * 16 * 1040, "stride_c_kv": 16 * 1040, "stride_c_tok": 1040,
                "stride_c_head": 128, "stride_bt": 256, "block_size": 16, "window": 3,
                "stride_s_block": 32 * 16 * 520, "stride_s_kv": 16 * 520, "stride_s_tok": 520,
                "stride_f_t": 6144, "stride_f_h": 128, "stride_f_kv": 1024}


def compile_prefill_variant(name: str, fmt: int = 1):
    """The general (prefill / mixed) kernel of prefill_variants `name` ("bf16": the plain pool's)."""
    from gpu_stage.kernels import prefill_attention as pa
    from gpu_stage.kernels.prefill_variants import QUANT_VARIANTS as PREFILL

    quant = name != "bf16"
    cfg = dict(pa.GPU_CONFIG) if not quant else dict(PREFILL[name])
    knobs = {k: cfg.pop(k) for k in QUANT_KNOBS if k in cfg}
    vt = cfg.pop("V_LAYOUT", None) == "vt"
    ints = {**PREFILL_INTS, **(INTS_VT if vt else {"stride_v_tok": 1040, "stride_v_head": 128, "stride_v_d": 1})}
    if quant:
        knobs["FMT"] = fmt
        knobs["BLOCK_SIZE"] = 16 if knobs.pop("CONST_BLOCK", False) else 0
    block_m = cfg.pop("BLOCK_M")
    constexprs = {"GROUP": 4, "HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_M": block_m, "BLOCK_Q": block_m // 4,
                  "BLOCK_N": cfg.pop("BLOCK_N"), "IEEE": False, "UPCAST": False, "QUANT": quant, "V_KEYS": vt,
                  **knobs}
    kernel = pa._prefill_attention_kernel
    for param in kernel.params:  # the variant's other knobs, the rest (FRESH: off) at their defaults
        if param.is_constexpr and param.name not in constexprs:
            constexprs[param.name] = cfg.pop(param.name, param.default)
    ptrs = {**PTR_TYPES, "cu_q_ptr": "*i32", "fresh_ptr": "*bf16"}
    return _compile(kernel, constexprs, ints, ptrs, quant, cfg)


ROPE_INTS = {"stride_q_t": 6144, "stride_q_h": 128, "stride_k_t": 6144, "stride_k_h": 128, "stride_cs": 128,
             "num_heads": 32, "num_kv_heads": 8, "stride_v_t": 6144, "stride_v_h": 128, "block_size": 16,
             "stride_c_head": 128, "stride_s_block": 32 * 16 * 520, "stride_s_kv": 16 * 520, "stride_s_tok": 520}
ROPE_POOLS = {"bf16": None, "fp8": "fp8_e4m3", "fp8-vt": "fp8_e4m3", "int8": "int8"}


def compile_rope_store(pool: str):
    """rope_store's fused RoPE + K/V store (one program per token) into a pool of ROPE_POOLS `pool`
    (`-vt`: V transposed), at the Llama-3-8B shape."""
    from gpu_stage.kernels import rope_store as rs
    from gpu_stage.kernels.kv_quant import quant_constexprs

    fmt, vt = ROPE_POOLS[pool], pool.endswith("-vt")
    row = 1040 if fmt else 1024  # a token's bytes (codes and scales) or bf16 values per block row
    ints = {**ROPE_INTS, "stride_c_block": 64 * 16 * row, "stride_c_kv": 16 * row, "stride_c_tok": row,
            "stride_vc_tok": 1 if vt else row, "stride_vc_head": 128 * 16 if vt else 128,
            "stride_vc_d": 16 if vt else 1}
    constexprs = {"HALF": 64, "BLOCK_HALF": 64, "BLOCK_HQ": 32, "BLOCK_HK": 8, "STORE": True, "USE_PDL": False,
                  **quant_constexprs(fmt)}
    ptrs = {"q_ptr": "*bf16", "k_ptr": "*bf16", "cos_ptr": "*bf16", "sin_ptr": "*bf16", "v_ptr": "*bf16",
            "slot_ptr": "*i64", "scale_ptr": "*bf16", "cache_ptr": {None: "*bf16", "int8": "*i8"}.get(fmt, "*fp8e4nv")}
    return _compile(rs._rope_kernel, constexprs, ints, ptrs, fmt is not None, {"num_warps": 4})


def sass_of(compiled) -> tuple[str, str]:
    """(SASS, resource usage line) of a compiled kernel, by the tools bundled with Triton."""
    import subprocess
    import tempfile

    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        sass = subprocess.run([str(tools / "nvdisasm"), "-c", "-gi", f.name], capture_output=True, text=True,
                              check=True)
        res = subprocess.run([str(tools / "cuobjdump"), "-res-usage", f.name], capture_output=True, text=True)
    usage = re.search(r"REG:\d+.*", res.stdout)
    return sass.stdout, usage.group(0) if usage else res.stdout.strip()[-200:]


_ADDR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+\S")


def loop_range(sass: str) -> tuple[int, int]:
    """(first, last) address of the tile loop: the longest backward branch's target and itself."""
    label_addr, pending, branches = {}, [], []
    for ln in sass.splitlines():
        if m := re.match(r"\s*\.(L_x_\d+):", ln):
            pending.append(m.group(1))
        elif a := _ADDR.search(ln):
            addr = int(a.group(1), 16)
            for p in pending:
                label_addr[p] = addr
            pending = []
            if b := re.search(r"BRA\s+.*?`?\(?\.(L_x_\d+)", ln):
                branches.append((addr, b.group(1)))
    best = (0, -1)
    for addr, label in branches:
        target = label_addr.get(label, addr + 1)
        if target < addr and addr - target > best[1] - best[0]:
            best = (target, addr)
    return best


def loop_counts(sass: str, lo: int, hi: int) -> collections.Counter:
    """The loop's instructions by opcode."""
    ops = collections.Counter()
    for ln in sass.splitlines():
        a = _ADDR.search(ln)
        if a and lo <= int(a.group(1), 16) <= hi:
            if m := re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", ln):
                ops[m.group(1)] += 1
    return ops


def loop_lines(sass: str, lo: int, hi: int) -> collections.Counter:
    """The loop's instructions by the source line they come from (innermost frame; nvdisasm -gi)."""
    per, cur = collections.Counter(), "?"
    for ln in sass.splitlines():
        if m := re.search(r'//## File "([^"]+)", line (\d+)', ln):
            cur = f"{Path(m.group(1)).name}:{m.group(2)}"
        elif (a := _ADDR.search(ln)) and lo <= int(a.group(1), 16) <= hi:
            per[cur] += 1
    return per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--fmt", type=int, default=1, help="0 int8, 1 fp8 e4m3, 2 fp8 e5m2")
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--dump", type=Path)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--lines", action="store_true", help="also the loop's instructions per source line")
    ap.add_argument("--json", action="store_true", help="one JSON line per variant (usage, ops, lines)")
    ap.add_argument("--prefill", action="store_true", help="prefill_variants' names: the general kernel")
    ap.add_argument("--rope", action="store_true", help=f"the fused RoPE + store into pools {list(ROPE_POOLS)}: "
                    "the whole kernel counted (no loop)")
    args = ap.parse_args()
    if interpreting():
        raise SystemExit("unset TRITON_INTERPRET: the interpreter's kernels cannot be compiled for sm_90")
    if not args.json:
        print(f"triton {triton.__version__}, sm_90")
    for name in args.variants:
        if args.rope:
            c = compile_rope_store(name)
        else:
            c = compile_prefill_variant(name, args.fmt) if args.prefill else compile_variant(name, args.fmt, args.splits)
        sass, usage = sass_of(c)
        lo, hi = (0, 1 << 40) if args.rope else loop_range(sass)
        ops, lines = loop_counts(sass, lo, hi), loop_lines(sass, lo, hi)
        if args.json:
            print(json.dumps({"variant": name, "usage": usage, "ops": ops, "lines": lines,
                              "e4m3_unpacks": sum("E4M3.UNPACK" in ln for ln in sass.splitlines())}))
            continue
        top = ", ".join(f"{k} {v}" for k, v in ops.most_common(args.top))
        what = "kernel" if args.rope else "loop"
        print(f"{name}: {c.metadata.num_warps} warps, {usage}; {what} {sum(ops.values())} instr/warp"
              f"{'' if args.rope else '/tile'}: {top}")
        if args.lines:
            for where, count in lines.most_common(24):
                print(f"    {count:4d}  {where}")
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{name}.ptx").write_text(c.asm["ptx"])
            (args.dump / f"{name}.sass").write_text(sass)


if __name__ == "__main__":
    main()
