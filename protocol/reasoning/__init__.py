"""Reasoning parsers: the text a model writes inside `<think>...</think>` goes to
`reasoning_content`, the rest to `content` (parser.py; registered by name for `--reasoning-parser`)."""
