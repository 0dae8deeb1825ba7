"""The OpenAI wire format, both ways: the protocol room.

requests/: each request kind declared once (its fields, each with its rule and its JSON Schema),
from which the validation, the OpenAPI document and the tokenize routes' schemas are derived.
responses/: the engine's RequestOutputs as bytes: stream chunks, SSE events, whole bodies, usage,
logprobs, echo and error events. errors.py: the error shape every refusal has. The engine never
sees bytes; the routes ask this room for them.
"""
