# examples/sidecar_client.py: the OpenAI SDK talking to a ttft sidecar through its Unix socket.
import sys

import httpx
from openai import OpenAI

socket_path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ttft.sock"
client = OpenAI(base_url="http://ttft/v1", api_key="unused",  # or --api-key's key
                http_client=httpx.Client(transport=httpx.HTTPTransport(uds=socket_path)))
model = client.models.list().data[0].id
reply = client.chat.completions.create(model=model, max_tokens=16,
                                       messages=[{"role": "user", "content": "What is the capital of France?"}])
print(reply.choices[0].message.content)
