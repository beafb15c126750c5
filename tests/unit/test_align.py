"""Word alignments (decode/align.py) and how the Translator prints them: pieces map to
the whitespace words of what they decode to, every output word gets a link, every link is
in range, tags and EOS are never linked; the layer is checked against the decoder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from builders import raw_recipe

from mtkit.config import DecodeConfig, ModelConfig, recipe_from_dict
from mtkit.data.tokenizer import Tokenizer, train_sentencepiece
from mtkit.data.words import output_units, piece_words, source_units
from mtkit.decode.align import Aligned, best_links, pharaoh
from mtkit.decode.engine import TorchEngine
from mtkit.decode.stream import output_lines
from mtkit.decode.translate import Translator
from mtkit.errors import ConfigError
from mtkit.model.transformer import Transformer

TINY = {"enc_layers": 1, "dec_layers": 2, "d_model": 16, "heads": 2, "ffn_dim": 32,
        "dropout": 0.0, "max_positions": 64}
# a word of unknown characters, runs of spaces, punctuation glued to words, digits
ODD_LINES = ["Dios 你好 cielos", "«Hola»  mundo ", "y 1999 , dijo:", "a"]
# lines whose whitespace words SentencePiece's normaliser changes: NFKC makes ´ a space
# and an accent, control characters are dropped (one a word of its own, one splitting two
# words for str.split), U+0085 is a line break to str.split and a letter to NFKC; a word
# of accents is one word, not nine
NORMALISED_LINES = ["Esther´s casa dijo´ hoy", "y´´´´´´´´", "a \x01 b c", "a\x1fb c", "x\x85y z"]


@pytest.fixture(scope="module")
def tagged_tokenizer(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    out = tmp_path_factory.mktemp("spm-tags") / "spm"
    model = train_sentencepiece([data_dir / "train.es", data_dir / "train.en"], out,
                                vocab_size=300, tags=("BT",))
    return Tokenizer.from_files(model)


def verses(data_dir: Path, count: int = 12) -> list[str]:
    """The first words of `count` verses (within the tiny model's positions)."""
    lines = (data_dir / "test.es").read_text(encoding="utf-8").splitlines()[:count]
    return [" ".join(line.split()[:10]) for line in lines]


def word_units(units: list[int | None]) -> set[int]:
    return {u for u in units if u is not None}


def test_pieces_belong_to_the_word_their_visible_characters_join():
    # prefixes of "Hel" "lo" "▁" "w" "orld" and a piece that decodes to nothing
    texts = ["Hel", "Hello", "Hello ", "Hello w", "Hello world", "Hello world"]
    assert piece_words(texts) == [0, 0, None, 1, 1, None]
    # byte pieces: a character shown as U+FFFD until its last byte comes
    assert piece_words(["a", "a \ufffd", "a é", "a éb"]) == [0, 1, 1, 1]
    assert piece_words(["", " ", " x"]) == [None, None, 0]


def test_every_word_of_real_lines_has_a_piece(tokenizer, tagged_tokenizer, data_dir):
    lines = verses(data_dir) + ODD_LINES + NORMALISED_LINES
    for tok in (tokenizer, tagged_tokenizer.tagged("BT")):
        for line, ids in zip(lines, tok.encode_src(lines)):
            units = source_units(tok, line, ids, "word")
            assert len(units) == len(ids)
            assert word_units(units) == set(range(len(line.split()))), (line, units)
            sub = source_units(tok, line, ids, "subword")
            body = len(ids) - (tok.source_tag is not None)  # the tag is no piece of the line
            assert word_units(sub) == set(range(body))
        for ids in tok.encode_tgt(lines):
            (text,) = tok.decode_tgt([ids])
            units = output_units(tok, ids, "word")
            assert word_units(units) == set(range(len(text.split())))
            words = [u for u in units if u is not None]
            assert words == sorted(words)


def test_the_tag_is_never_a_unit(tagged_tokenizer):
    tok = tagged_tokenizer.tagged("BT")
    (ids,) = tok.encode_src(["hola mundo"])
    assert ids[0] == tok.source_tag
    for unit in ("word", "subword"):
        units = source_units(tok, "hola mundo", ids, unit)
        assert units[0] is None and [u for u in units if u is not None][0] == 0
    assert source_units(tok, "hola mundo", ids, "subword")[1] == 0


def test_each_output_piece_links_to_its_strongest_source_piece_with_a_unit():
    attention = torch.tensor([[0.1, 0.6, 0.3],   # output piece 0: source piece 1 (no unit)
                              [0.7, 0.1, 0.2],   # 1: source piece 0
                              [0.2, 0.2, 0.6]])  # 2: adds only whitespace
    links = best_links(attention, [0, None, 1], [0, 1, None])
    assert links == ((0, 1), (1, 0))
    assert pharaoh(links) == "0-1 1-0" and Aligned("x y", links).pharaoh == "0-1 1-0"
    assert best_links(attention, [None, None, None], [0, 1, 2]) == ()


def test_the_layer_counts_from_the_end_and_falls_to_the_only_one():
    assert [DecodeConfig(alignment_layer=n).alignment_index(6) for n in (-2, -1, 0, 5)] == \
        [4, 5, 0, 5]
    assert DecodeConfig().alignment_index(1) == 0  # the default suits a one-layer decoder
    for layer, depth in ((6, 6), (-7, 6), (1, 1), (-3, 2)):
        assert DecodeConfig(alignment_layer=layer).alignment_index(depth) is None
    with pytest.raises(ConfigError, match=r"decode.alignment_layer 3: the model's decoder "
                                          r"has 2 layers; give 0..1, or -1..-2"):
        recipe_from_dict(raw_recipe(model=TINY, decode={"alignment_layer": 3}))


def tiny_translator(tok: Tokenizer, **decode) -> Translator:
    recipe = recipe_from_dict(raw_recipe(model=TINY, decode={"beam": 2, "max_len_b": 6,
                                                             "max_len_a": 0.5, **decode}))
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**TINY), tok.src_vocab_size, tok.tgt_vocab_size,
                        pad_id=tok.specials.pad)
    return Translator(TorchEngine([model], tok, recipe), recipe.decode)


@pytest.mark.parametrize("unit", ["word", "subword"])
def test_every_output_unit_is_linked_and_every_link_is_in_range(tagged_tokenizer, data_dir,
                                                                unit):
    lines = ["", *verses(data_dir, 6), *ODD_LINES, *NORMALISED_LINES, "   "]
    for tok in (tagged_tokenizer, tagged_tokenizer.tagged("BT")):
        translator = tiny_translator(tok, nbest=2)
        translator.tokenizer = tok
        found = translator.search(lines)
        links = translator.align(lines, found, unit)
        sources = [ids[1:] if tok.source_tag is not None else ids
                   for ids in tok.encode_src(lines)]
        for line, src, hyps, line_links in zip(lines, sources, found, links):
            assert len(line_links) == len(hyps)
            for hyp, pairs in zip(hyps, line_links):
                (text,) = tok.decode_tgt([hyp.tokens])
                source_count = len(line.split()) if unit == "word" else len(src)
                output_count = len(text.split()) if unit == "word" else len(hyp.tokens)
                if not line.strip():
                    assert pairs == ()
                    continue
                assert {j for _, j in pairs} == set(range(output_count))
                assert all(0 <= i < source_count for i, _ in pairs)


def test_translate_aligned_is_translate_with_links(tokenizer, data_dir):
    translator = tiny_translator(tokenizer)
    lines = verses(data_dir, 4)
    aligned = translator.translate_aligned(lines)
    assert [a.text for a in aligned] == translator.translate(lines)
    assert translator.translate_aligned(lines[0]) == aligned[0]
    with pytest.raises(ConfigError, match="alignment unit letters"):
        translator.translate_aligned(lines, unit="letters")


def test_links_are_the_last_column_of_every_line(tokenizer, data_dir):
    lines = ["", verses(data_dir, 1)[0], "  "]
    for nbest, scores, columns in ((1, False, 2), (1, True, 3), (2, False, 4)):
        translator = tiny_translator(tokenizer, nbest=nbest)
        found = translator.search(lines)
        links = translator.align(lines, found)
        out = output_lines(translator, found, 0, scores, links)
        assert len(out) == sum(len(hyps) for hyps in found)
        rows = [row.split("\t") for row in out]
        assert {len(row) for row in rows} == {columns}, rows
        assert [row[-1] for row in rows] == [pharaoh(each) for per in links for each in per]
        assert rows[0][-1] == "" and rows[-1][-1] == ""  # empty lines: an empty column
        plain = output_lines(translator, found, 0, scores)
        assert [row.rsplit("\t", 1)[0] for row in out] == plain
