"""Token counts for ShareGPT lengths: the dummy byte tokenizer, a model directory, the server's /tokenize."""
from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from bench.client import BenchClient
from bench.token_count import local_counter, server_counter
from ingress.bpe_tokenizer import BpeTokenizer


async def test_dummy_counts_bytes_plus_bos():
    count = local_counter("dummy")
    assert await count("Hi") == 3 and await count("é🙂") == 1 + 2 + 4


async def test_a_model_directory_counts_as_ttft_serve_tokenizes(tmp_path):
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 20, trainer)
    backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "add_bos_token": True}))
    text = "the lazy fox jumps"
    expected = len(BpeTokenizer.from_dir(tmp_path).encode(text))
    assert expected < len(text)  # merges: fewer tokens than bytes
    assert await local_counter(str(tmp_path))(text) == expected
    assert await local_counter(str(tmp_path / "tokenizer.json"))(text) == expected
    with pytest.raises(ValueError, match="not 'dummy', a model directory"):
        local_counter(str(tmp_path / "nowhere"))


async def test_the_servers_tokenize_route(fake_server):
    async with BenchClient(fake_server.base_url) as client:
        count = server_counter(client, await client.resolve_model())
        assert await count("Hi there") == 9  # the fake counts as the dummy tokenizer does
    async with BenchClient(f"{fake_server.base_url}/elsewhere") as client:  # a 404 there
        with pytest.raises(RuntimeError, match="cannot count tokens at /tokenize .*404.*pass --tokenizer"):
            await server_counter(client, "m")("x")
    async with BenchClient("http://127.0.0.1:9") as client:  # nothing listens there
        with pytest.raises(OSError):
            await server_counter(client, "m")("x")
