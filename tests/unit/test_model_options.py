"""The model options an imported Marian model needs, and its explicit vocabulary."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from mtkit.config import ModelConfig
from mtkit.data.vocab import Languages, SpecialIds, Vocabulary
from mtkit.errors import CheckpointError, DataError
from mtkit.model.layers import sinusoidal_positions
from mtkit.model.transformer import Transformer

TINY = ModelConfig(enc_layers=1, dec_layers=1, d_model=8, heads=2, ffn_dim=16, dropout=0.0,
                   max_positions=32)


def test_halves_hold_the_interleaved_values_sines_first():
    inter, halves = sinusoidal_positions(20, 8), sinusoidal_positions(20, 8, "halves")
    torch.testing.assert_close(halves[:, :4], inter[:, 0::2], rtol=0, atol=0)
    torch.testing.assert_close(halves[:, 4:], inter[:, 1::2], rtol=0, atol=0)
    assert halves[3, 0] == pytest.approx(math.sin(3.0))


def test_fairseq_positions_start_after_the_pad_row():
    """fairseq's table (M2M100, NLLB): frequency i is exp(-i ln 10000 / (d/2 - 1)), sines
    then cosines, position t at row pad + 1 + t (the rows up to pad unused)."""
    dim, pad = 8, 1
    table = sinusoidal_positions(20, dim, "fairseq", first_row=pad + 1)
    for t in (0, 5, 19):
        for i in range(dim // 2):
            angle = (pad + 1 + t) * math.exp(-i * math.log(10000) / (dim // 2 - 1))
            assert table[t, i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[t, dim // 2 + i] == pytest.approx(math.cos(angle), abs=1e-6)
    model = Transformer(replace(TINY, position_layout="fairseq"), 11, 11, pad_id=pad)
    torch.testing.assert_close(model.pos_table, sinusoidal_positions(32, 8, "fairseq", 2))


def test_swish_bias_and_scale_act_as_named():
    torch.manual_seed(0)
    cfg = replace(TINY, activation="swish", output_bias=True, scale_embeddings=False)
    model = Transformer(cfg, 11, 11).eval()
    ffn = model.encoder[0].ffn
    x = torch.randn(3, 8)
    expected = F.silu(x @ ffn.w_in.weight.T + ffn.w_in.bias) @ ffn.w_out.weight.T + ffn.w_out.bias
    torch.testing.assert_close(ffn(x), expected)
    assert model.embed_scale == 1.0 and not model.out_proj.bias.any()  # a new bias starts at 0
    src, tgt = torch.tensor([[3, 4, 5]]), torch.tensor([[2, 6]])
    with torch.no_grad():
        before = model(src, tgt)
        model.out_proj.bias.fill_(0.5)
        torch.testing.assert_close(model(src, tgt), before + 0.5)


def test_old_defaults_build_the_same_model():
    torch.manual_seed(0)
    old = Transformer(TINY, 11, 11).state_dict()
    torch.manual_seed(0)
    same = Transformer(replace(TINY, position_layout="interleaved"), 11, 11).state_dict()
    assert old.keys() == same.keys() and all(torch.equal(old[k], same[k]) for k in old)


def test_a_decoder_starting_from_pad_keeps_the_pad_row():
    """Marian's decoder starts from the pad row (zero): training leaves it alone, although
    the tied output projection would give it a gradient."""
    torch.manual_seed(0)
    pad = 10
    model = Transformer(replace(TINY, output_bias=True), 11, 11, pad_id=pad, start_id=pad)
    with torch.no_grad():
        model.tgt_embed.weight[pad].zero_()
    logits = model(torch.tensor([[3, 4, 0]]), torch.tensor([[pad, 5, 6]]))
    F.cross_entropy(logits.view(-1, 11), torch.tensor([5, 6, 0])).backward()
    assert not model.tgt_embed.weight.grad[pad].any()
    assert model.tgt_embed.weight.grad[5].any()


SPECIALS = SpecialIds(pad=6, unk=1, start=6, eos=0, banned=(5,))


def test_never_emitted_holds_pad_and_the_banned():
    assert SPECIALS.never_emitted == (5, 6)
    assert SpecialIds(pad=0, unk=1, start=2, eos=3).never_emitted == (0, 2)


def test_vocabulary_round_trips_and_refuses_damage():
    vocab = Vocabulary(("</s>", "<unk>", "▁a", ">>fra<<", "b", "c", "<pad>"), None, SPECIALS)
    again = Vocabulary.from_bytes(vocab.to_bytes(), "here")
    assert again == vocab and again.joint and again.tags == ("fra",)
    assert again.tag_id("fra") == again.tag_id(">>fra<<") == 3
    with pytest.raises(CheckpointError, match="here: the vocabulary is damaged"):
        Vocabulary.from_bytes(b"{", "here")
    outside = Vocabulary(("</s>", "<unk>"), None, SPECIALS).to_bytes()
    with pytest.raises(CheckpointError, match="special ids lie outside"):
        Vocabulary.from_bytes(outside, "here")


def test_languages_round_trip_and_name_the_closest_codes():
    """M2M100/NLLB: the start is </s>, which the search may emit (it ends a hypothesis);
    the language tokens travel with the vocabulary and are never printed."""
    specials = SpecialIds(pad=1, unk=3, start=2, eos=2)
    assert specials.never_emitted == (1,)
    pieces = ("<s>", "<pad>", "</s>", "<unk>", "▁a", "b", "eng_Latn", "spa_Latn", "<mask>")
    languages = Languages(("eng_Latn", "spa_Latn"), (6, 7), ("spa_Latn", "eng_Latn"))
    vocab = Vocabulary(pieces, None, specials, languages)
    again = Vocabulary.from_bytes(vocab.to_bytes(), "here")
    assert again == vocab and again.languages == languages
    assert languages.id_of("eng_Latn", "tgt") == 6
    with pytest.raises(DataError, match=r"^--tgt-lang eng_Lat: not a language of this model "
                                        r"\(closest: eng_Latn"):
        languages.id_of("eng_Lat", "--tgt-lang")
    with pytest.raises(DataError, match=r"xx: not a language of this model \(it has 2; "):
        languages.id_of("xx", "src_lang")
    outside = Vocabulary(pieces, None, specials, Languages(("x",), (9,), ("x", "x")))
    with pytest.raises(CheckpointError, match="special ids lie outside"):
        Vocabulary.from_bytes(outside.to_bytes(), "here")
