# examples/embed_engine.py: ttft's Engine inside your own asyncio program, no HTTP.
import asyncio

from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams


async def main() -> None:
    # dummy:tiny has random weights and loads in a second: put a .gguf file or a model directory here.
    async with Engine(EngineConfig(model="dummy:tiny")) as engine:
        params = SamplingParams(max_tokens=16, temperature=0)
        async for out in engine.generate("The capital of France is", params):
            print(out.text, end="", flush=True)  # one output per step, as it comes
    print()


if __name__ == "__main__":
    asyncio.run(main())
