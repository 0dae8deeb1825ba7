"""The decode kernel under Nsight Compute: a few launches of one variant per (format, batch x context)
at the Llama-3-8B shape, for `ncu` to profile (issue 23: why the 8-bit kernel at 64 streams runs at
~2.2 TB/s where the bf16 one reaches ~4.2).

    ncu --clock-control none --kernel-name regex:_decode_kernel --set full -o OUT/rep \\
        python3 lab/kv8_decode_ncu.py --cases 64x2048,1x2048 --formats bf16,fp8_e4m3 [--variant NAME]

Each case builds its pool as lab/kv8_decode_ab.py does (random K/V, scattered blocks), launches the
kernel once to compile it, then `--launches` more times on different layers (ncu flushes the caches
between its replays anyway). Also writes each compiled kernel's PTX and cubin to --dump (SASS:
`cuobjdump -sass FILE.cubin`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab.kv8_decode_ab import Case, case_splits, launch_config, variant_configs  # noqa: E402


def dump_kernels(into: Path, tag: str) -> None:
    from gpu_stage.kernels import decode_attention as da

    into.mkdir(parents=True, exist_ok=True)
    for cache in da._decode_kernel.device_caches.values():
        for i, kernel in enumerate(cache[0].values()):
            for key in ("ptx", "cubin", "ttgir"):
                if key in kernel.asm:
                    data = kernel.asm[key]
                    path = into / f"{tag}-{i}.{key}"
                    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="64x2048,1x2048")
    ap.add_argument("--formats", default="bf16,fp8_e4m3")
    ap.add_argument("--variant", default="served", help="a QUANT_VARIANTS name, or served")
    ap.add_argument("--launches", type=int, default=2)
    ap.add_argument("--dump", default="")
    args = ap.parse_args()

    import torch

    from gpu_stage.kernels import decode_attention as da

    names = [] if args.variant == "served" else [args.variant]
    cfgs = variant_configs(names, [])
    for spec in args.cases.split(","):
        batch, ctx = (int(x) for x in spec.split("x"))
        for fmt in args.formats.split(","):
            cfg = cfgs["bf16"] if fmt == "bf16" else cfgs[args.variant]
            case = Case(fmt, batch, ctx, seed=batch + ctx)
            splits = case_splits(batch, ctx, cfg, fmt)
            ws = da.DecodeWorkspace(batch, case.q.shape[1], case.q.shape[2], splits, "cuda")
            launch = launch_config(cfg)
            for i in range(1 + args.launches):
                layer = case.cache.layer(i % case.num_layers)
                da.decode_attention(case.q, layer, case.seq_lens, case.tables, ws,
                                    config=None if launch is None else dict(launch))
            torch.cuda.synchronize()
            print(f"{fmt} {batch}x{ctx}: {1 + args.launches} launches, {splits} split(s)", flush=True)
            del case
            torch.cuda.empty_cache()
    if args.dump:
        dump_kernels(Path(args.dump), args.variant)


if __name__ == "__main__":
    main()
