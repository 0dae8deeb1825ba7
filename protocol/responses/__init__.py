"""Response framing: RequestOutputs to OpenAI chunks, SSE events and whole bodies."""
