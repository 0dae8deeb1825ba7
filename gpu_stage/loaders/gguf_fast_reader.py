"""FastGGUFReader: gguf's GGUFReader with its metadata arrays parsed in one pass each.

The stock reader builds a metadata array element by element, each element a few numpy views of
the memory map (one for a string's length, one for its bytes): SmolLM2's 49,152-token vocabulary,
its 48,900 merges and its 49,152 token types are ~250,000 views: ~4 s of CPU on the memmap, ~0.5 s
on a plain ndarray view of it (below), at every start of a server or engine on that file; read
here in ~0.15 s. Here an array of strings or of scalars is read in one pass over a
memoryview of the same mapping, each element's part a plain `bytes` copy of its bytes, and the
field is a BytesField, whose `contents()` decodes those: the same values, offsets, types and data
indices as the stock field. Plain `bytes`, because the cyclic garbage collector does not track
them: as many views or objects of a class would start collections that walk every object of the
process (torch's included), which cost more than the parsing. Files in the other byte order, and
arrays of arrays, take the stock path.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderField

# struct formats of the scalar value types, in the host's byte order
_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}
_UNPACK = {vtype: struct.Struct("=" + fmt).unpack for vtype, fmt in _SCALAR_FORMATS.items()}
_LENGTH = struct.Struct("=Q")  # a string's length: uint64 in the file's (here the host's) order


class BytesField(ReaderField):
    """A metadata array whose parts are plain bytes (a string's length and its UTF-8, or one
    scalar's bytes each): `contents()` as the stock field's over its ndarray parts."""

    def contents(self, index_or_slice: int | slice = slice(None)) -> Any:
        sub_type = self.types[-1]
        decode = (lambda b: str(b, encoding="utf-8")) if sub_type == GGUFValueType.STRING else (
            lambda b, unpack=_UNPACK[sub_type]: unpack(b)[0])
        if isinstance(index_or_slice, int):
            return decode(self.parts[self.data[index_or_slice]])
        return [decode(self.parts[i]) for i in self.data[index_or_slice]]


class FastGGUFReader(GGUFReader):
    """GGUFReader on a plain ndarray view of its memory map, its metadata arrays read in one pass.
    Slicing a `np.memmap` costs per-slice bookkeeping, a plain view of the same mapping does not,
    and still reads tensor data lazily from the page cache."""

    def __init__(self, path: Any, mode: Any = "r") -> None:
        super().__init__(path, mode)
        for key, field in self.fields.items():
            if field.types and field.types[0] == GGUFValueType.ARRAY and type(field.parts[-1]) is bytes:
                self.fields[key] = BytesField(*field)

    def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> np.ndarray:
        if type(self.data) is not np.ndarray:
            self.data = self.data.view(np.ndarray)
        return super()._get(offset, dtype, count, override_order)

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list, list[int], list[GGUFValueType]]:
        if raw_type != GGUFValueType.ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        alen = self._get(orig_offs + 4, np.uint64)
        itype = int(raw_itype[0])
        if itype == GGUFValueType.STRING:
            end, parts = self._string_parts(orig_offs + 12, int(alen[0]))
            data_idxs = list(range(3, 2 + len(parts), 2))  # each string's bytes, after its length
        elif itype in _SCALAR_FORMATS:
            end, parts = self._scalar_parts(orig_offs + 12, int(alen[0]), _SCALAR_FORMATS[GGUFValueType(itype)])
            data_idxs = list(range(2, 2 + len(parts)))
        else:  # arrays of arrays
            return super()._get_field_parts(orig_offs, raw_type)
        types = [GGUFValueType.ARRAY] + ([GGUFValueType(itype)] if parts else [])
        return end - orig_offs, [raw_itype, alen, *parts], data_idxs, types

    def _string_parts(self, offs: int, count: int) -> tuple[int, list[bytes]]:
        """(offset after the strings, [length, bytes, length, bytes, ...]) for `count` strings."""
        view = memoryview(self.data)
        unpack = _LENGTH.unpack_from
        parts: list[bytes] = []
        append = parts.append
        for _ in range(count):
            (size,) = unpack(view, offs)
            append(bytes(view[offs:offs + 8]))
            append(bytes(view[offs + 8:offs + 8 + size]))
            offs += 8 + size
        if offs > len(view):
            raise ValueError(f"GGUF metadata string array runs past the end of the file ({offs} > {len(view)})")
        return offs, parts

    def _scalar_parts(self, offs: int, count: int, fmt: str) -> tuple[int, list[bytes]]:
        """(offset after the values, each value's bytes) for `count` scalars."""
        itemsize = struct.calcsize(fmt)
        end = offs + itemsize * count
        if end > len(self.data):
            raise ValueError(f"GGUF metadata array runs past the end of the file ({end} > {len(self.data)})")
        values = bytes(memoryview(self.data)[offs:end])
        return end, [values[i:i + itemsize] for i in range(0, itemsize * count, itemsize)]
