# examples/mount_app.py: ttft's OpenAI-compatible app mounted at /llm in your own Starlette app,
# its model loaded when your app starts and stopped when it stops.
import contextlib

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from pipeline import Engine, EngineConfig
from pipeline.app import create_app
from pipeline.lifespan import ttft_lifespan

engine = Engine(EngineConfig(model="dummy:tiny"))


async def home(request):
    return JSONResponse({"app": "yours", "llm": "/llm/v1/chat/completions"})


@contextlib.asynccontextmanager
async def lifespan(app):
    async with ttft_lifespan(engine):  # without it the model loads on the first request to /llm
        yield


app = Starlette(routes=[Route("/", home), Mount("/llm", app=create_app(engine))], lifespan=lifespan)
