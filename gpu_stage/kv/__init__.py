"""The paged KV pool: its tensor (cache), its formats (format: plain or 8-bit), the 8-bit layout
with its scales (layout) and the torch quantize/dequantize reference (quant)."""
