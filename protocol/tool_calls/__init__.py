"""Tool calling: the request's `tools` / `tool_choice` (definitions.py), the schema that forces a
`required` or named call (forced_schema.py), and the parsers that turn what a model writes into
OpenAI `tool_calls` (one small class per format, registered by name in registry.py)."""
