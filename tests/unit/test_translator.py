"""The Translator and TorchEngine in process, on scripted models: the decode settings
reach the search through the engine contract, and input is read in bounded buffers; and
on a tiny Transformer: an engine decodes with the weights its model has.
(`mtkit translate` as a user runs it: tests/system/test_translate.py.)"""

from __future__ import annotations

import math
import os
import threading

import pytest
import torch
from builders import (
    BOS,
    LONG_RECOVERS,
    PAD,
    SPECIALS,
    A,
    B,
    C,
    D,
    ScriptedModel,
    raw_recipe,
    table,
)

from mtkit.config import DecodeConfig, ModelConfig, recipe_from_dict
from mtkit.decode.engine import TorchEngine
from mtkit.decode.stream import read_line_buffers
from mtkit.decode.translate import Translator, model_file
from mtkit.errors import CheckpointError
from mtkit.model.loss import label_smoothed_nll
from mtkit.model.transformer import Transformer


class LetterTokenizer:
    """A stand-in tokenizer for scripted models: the words a b c d are tokens A B C D."""

    ids = {"a": A, "b": B, "c": C, "d": D}
    specials = SPECIALS
    target_start = ()  # a model of one language pair

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        return [[self.ids[word] for word in line.split()] for line in lines]

    encode_tgt = encode_src  # (prefixes)

    def decode_tgt(self, sequences: list[list[int]]) -> list[str]:
        words = {token: word for word, token in self.ids.items()}
        return [" ".join(words[token] for token in seq) for seq in sequences]


def scripted_engine(**decode) -> tuple[TorchEngine, ScriptedModel]:
    model = ScriptedModel(table(LONG_RECOVERS))
    recipe = recipe_from_dict(raw_recipe("a", "b", decode=decode))
    return TorchEngine([model], LetterTokenizer(), recipe, "cpu"), model


# With beam 2 and lenpen 1.0 the rules differ on LONG_RECOVERS: `exact` finds A B C D,
# `early` gives up A after one step and returns the empty hypothesis.
EXACT = ([A, B, C, D], (math.log(0.3) + 3 * math.log(0.99)) / 5)  # 4 tokens + EOS
EARLY = ([], math.log(0.7))  # EOS alone


def test_the_stop_rule_reaches_the_search_through_the_engine():
    """DecodeConfig.stop, handed to the Translator, is the rule beam_search runs: were it
    dropped on the way, both settings would give the same hypothesis."""
    found = {}
    for stop in ("exact", "early"):
        engine, model = scripted_engine()
        settings = DecodeConfig(beam=2, lenpen=1.0, stop=stop)
        translator = Translator(engine, settings)
        [[best]] = translator.search(["a a a"])
        found[stop] = best
        assert translator.translate(["a a a"]) == ["a b c d" if stop == "exact" else ""]
        [[direct]] = engine.search([[A, A, A]], settings)  # the engine contract itself
        assert direct == best
    assert (found["exact"].tokens, found["exact"].score) == (EXACT[0],
                                                               pytest.approx(EXACT[1], abs=1e-4))
    assert (found["early"].tokens, found["early"].score) == (EARLY[0],
                                                               pytest.approx(EARLY[1], abs=1e-4))
    assert found["exact"].score > found["early"].score  # exact found the better hypothesis


@pytest.mark.parametrize("stop, expected", [("exact", "a b c d"), ("early", "")])
def test_the_recipe_decode_section_is_the_default(stop, expected):
    """Without settings, the Translator decodes with the model's recipe, its stop too."""
    engine, model = scripted_engine(beam=2, lenpen=1.0, stop=stop)
    translator = Translator(engine)
    assert translator.settings.stop == stop
    assert translator.translate(["a a a", "", "a a a"]) == [expected, "", expected]
    assert model.rows_per_step, "the scripted model was never asked"


def test_an_engine_decodes_with_the_weights_its_model_has_when_it_is_made():
    """Validation makes an engine per run on the model being trained. The cached search
    reads decoder weights gathered for decode_step (transposed copies on the CPU); after
    a fused AdamW step, which writes the weights without bumping their version counters,
    a new engine must decode as the uncached reference (`decode` on the live weights)
    does, and differently from before the step."""
    torch.manual_seed(0)
    cfg = ModelConfig(enc_layers=1, dec_layers=2, d_model=16, heads=2, ffn_dim=32,
                      dropout=0.0, max_positions=32)
    model = Transformer(cfg, 12, 12, pad_id=PAD)
    recipe = recipe_from_dict(raw_recipe("a", "b"))
    sources = [[5, 6, 7], [8, 9], [4, 10, 11, 5]]
    settings = DecodeConfig(beam=2, nbest=2, lenpen=1.0, max_len_a=1.0, max_len_b=3)

    def cached_and_reference() -> tuple[list, list]:
        cached = TorchEngine([model], LetterTokenizer(), recipe)
        reference = TorchEngine([model], LetterTokenizer(), recipe, use_cache=False)
        return cached.search(sources, settings), reference.search(sources, settings)

    def assert_same(found: list, expected: list) -> None:
        for mine, theirs in zip(found, expected, strict=True):
            assert [h.tokens for h in mine] == [h.tokens for h in theirs]
            assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-4)

    before, reference = cached_and_reference()
    assert_same(before, reference)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    src = torch.tensor([ids + [3] + [PAD] * (4 - len(ids)) for ids in sources])
    tgt = torch.tensor([[BOS, 4, 5, 6], [BOS, 7, 8, 9], [BOS, 10, 11, 4]])
    model.train()
    loss, _, _ = label_smoothed_nll(model(src, tgt), tgt, 0.0, PAD)
    loss.backward()
    optimizer.step()
    after, reference = cached_and_reference()
    assert_same(after, reference)
    assert [h.score for hyps in after for h in hyps] != pytest.approx(
        [h.score for hyps in before for h in hyps], abs=1e-3)


def test_line_buffers_are_bounded_on_a_long_input():
    """Memory stays bounded: however much input waits, a buffer never exceeds max_lines,
    and every line comes out once, in order."""
    read_fd, write_fd = os.pipe()
    total = 20_000

    def feed():
        with os.fdopen(write_fd, "wb") as pipe:
            for i in range(total):
                pipe.write(b"line %d\n" % i)

    writer = threading.Thread(target=feed)
    writer.start()
    sizes, seen = [], 0
    for buffer in read_line_buffers(read_fd, max_lines=500):
        sizes.append(len(buffer))
        assert buffer[0] == b"line %d" % seen
        seen += len(buffer)
    writer.join()
    os.close(read_fd)
    assert seen == total and max(sizes) <= 500


def test_one_string_gives_one_string():
    engine, _ = scripted_engine()
    translator = Translator(engine, DecodeConfig(beam=2, lenpen=1.0, stop="exact"))
    assert translator.translate("a a a") == "a b c d"  # not one translation per character
    assert translator.translate(["a a a"]) == ["a b c d"]


def test_a_run_directory_means_its_model_pt(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"run: the run has no model.pt yet.*"
                                              r"checkpoint_last.pt"):
        model_file(run)
    (run / "model.pt").write_bytes(b"")
    assert model_file(run) == run / "model.pt"
    assert model_file(run / "model.pt") == run / "model.pt"
    with pytest.raises(CheckpointError, match=r"checkpoints: a directory without model.pt"):
        model_file(run / "checkpoints")
