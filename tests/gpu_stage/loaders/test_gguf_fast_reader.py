"""FastGGUFReader reads every metadata field as gguf's own GGUFReader does (names, offsets, types,
data indices, part sizes, contents whole and by index), for every value type; a truncated array
is a clear error."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from gpu_stage.loaders.gguf_fast_reader import FastGGUFReader

SCALAR_ARRAYS = {
    GGUFValueType.UINT8: [0, 7, 255], GGUFValueType.INT8: [-128, 0, 127], GGUFValueType.UINT16: [1, 65535],
    GGUFValueType.INT16: [-32768, 5], GGUFValueType.UINT32: [3, 2**32 - 1], GGUFValueType.INT32: [-1, 2, 3, 4],
    GGUFValueType.FLOAT32: [0.5, -1.25, 3.0e38], GGUFValueType.BOOL: [True, False, True],
    GGUFValueType.UINT64: [2**64 - 1, 0], GGUFValueType.INT64: [-(2**63), 9], GGUFValueType.FLOAT64: [1e-300, 2.5],
}
STRINGS = ["hello", "", "Ġthe", "日本語", "a b", "\n"]


def write(path, *, strings=STRINGS) -> None:
    w = GGUFWriter(str(path), "llama")
    w.add_string("general.name", "fast")
    w.add_uint32("llama.block_count", 2)
    w.add_array("tokenizer.ggml.tokens", strings)
    w.add_array("tokenizer.ggml.merges", ["a b", "ab c"])
    for vtype, values in SCALAR_ARRAYS.items():
        w.add_key_value(f"array.{vtype.name.lower()}", values, GGUFValueType.ARRAY, sub_type=vtype)
    w.add_array("nested", [[1, 2], [3]])  # an array of arrays: the stock path
    w.add_tensor("token_embd.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def size(part) -> int:
    """A part's byte count: a plain bytes part (BytesField) or an ndarray (the stock parts)."""
    return len(part) if type(part) is bytes else int(part.nbytes)


def test_every_field_reads_as_the_stock_reader_reads_it(tmp_path):
    write(tmp_path / "m.gguf")
    stock, fast = GGUFReader(tmp_path / "m.gguf"), FastGGUFReader(tmp_path / "m.gguf")
    assert list(fast.fields) == list(stock.fields)
    for key, want in stock.fields.items():
        got = fast.fields[key]
        assert (got.offset, got.name, got.types, got.data) == (want.offset, want.name, want.types, want.data), key
        assert [size(p) for p in got.parts] == [int(p.nbytes) for p in want.parts], key
        assert got.contents() == want.contents(), key
        for i in range(len(want.data) if want.types[0] == GGUFValueType.ARRAY else 0):
            assert got.contents(i) == want.contents(i), (key, i)
    assert fast.fields["tokenizer.ggml.tokens"].contents() == STRINGS
    assert fast.fields["array.float32"].contents() == [0.5, -1.25, np.float32(3.0e38).item()]
    assert fast.fields["tokenizer.ggml.tokens"].contents(slice(1, 4)) == STRINGS[1:4]
    assert fast.data_offset == stock.data_offset
    assert [t.name for t in fast.tensors] == ["token_embd.weight"]
    assert np.array_equal(fast.tensors[0].data, stock.tensors[0].data)


def test_a_string_array_cut_short_is_a_clear_error(tmp_path):
    path = tmp_path / "cut.gguf"
    write(path, strings=["x" * 4096])
    data = path.read_bytes()
    path.write_bytes(data[:data.index(b"x" * 4096) + 100])  # the vocabulary's one string ends past the file
    with pytest.raises(ValueError, match="past the end of the file"):
        FastGGUFReader(path)
