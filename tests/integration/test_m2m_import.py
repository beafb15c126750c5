"""`mtkit import` of M2M100 and NLLB models, exact against `transformers` (the reference):
tiny random models built in the test (tests/hf_m2m.py), both tokenizer formats, and NLLB's
with legacy_behaviour (sources `pieces </s> [src]`, as NllbTokenizer writes them then).

Teacher-forced log-probabilities within 1e-4; greedy equal to generate() with
forced_bos_token_id (the target language); beam 4 equal at length penalty 0; the
training loss of one batch (labels `[tgt] y </s>`, decoder inputs `</s> [tgt] y`) equal to
model(..., labels=...).loss; the tokenizer equal to M2M100Tokenizer, and to fairseq's
offset for NLLB, NllbTokenizer's layout of the language token and eos around a source's
pieces; a CTranslate2 export decoding, scoring and aligning as the bundle does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from builders import DATA
from hf_m2m import build_m2m, load_reference
from hf_marian import edit_json, expect_refused_import
from test_marian_import import CAP, _generated, _Pairs, assert_log_probs_match, padded

from mtkit.config import DecodeConfig
from mtkit.convert.importer import import_model, read_model
from mtkit.data.batching import make_batch
from mtkit.decode.engine import TorchEngine
from mtkit.decode.forced import pad_sources
from mtkit.errors import CheckpointError, DataError
from mtkit.model.checkpoint import load_checkpoint
from mtkit.model.loss import label_smoothed_nll

transformers = pytest.importorskip("transformers")

LINES = (DATA / "dev.es").read_text(encoding="utf-8").splitlines()[:10]
TARGETS = (DATA / "dev.en").read_text(encoding="utf-8").splitlines()[:10]


@pytest.fixture(scope="module", params=["m2m100", "nllb", "legacy"])
def m2m(request, tmp_path_factory):
    """(directory, reference model, imported bundle) for one tokenizer format (legacy: NLLB's
    with legacy_behaviour true)."""
    kind = "m2m100" if request.param == "m2m100" else "nllb"
    out = build_m2m(tmp_path_factory.mktemp("m2m") / request.param, kind,
                    legacy=request.param == "legacy")
    return out, load_reference(out), read_model(out)


def sources(tokenizer) -> torch.Tensor:
    """LINES as mtkit's encoder reads them (padded, with eos and the language token)."""
    return pad_sources(tokenizer.encode_src(LINES), tokenizer.specials)


def nllb_sources(directory: Path, tokenizer) -> tuple[list[list[int]], torch.Tensor]:
    """NllbTokenizer's own encoding of LINES, its tokens as the model's ids: (as mtkit
    takes sources, `[src] pieces`; as NllbTokenizer lays them out, padded). For this tiny
    model its conversion to a `tokenizers` BPE segments otherwise than SentencePiece and
    numbers the added tokens otherwise than fairseq (so than the model), so mtkit's pieces
    are checked against SentencePiece's, and the layout around them against NllbTokenizer's."""
    reference = transformers.NllbTokenizer.from_pretrained(directory)
    index, s = tokenizer.vocab.index("src"), tokenizer.specials
    theirs = [[index.get(t, s.unk) for t in reference.convert_ids_to_tokens(row)]
              for row in reference(LINES).input_ids]
    lang = tokenizer.source_tag
    ids = [[lang, *(i for i in row if i not in (lang, s.eos))] for row in theirs]
    return ids, padded(theirs, s.pad)


def test_the_tokenizer_is_the_references(m2m):
    directory, _, bundle = m2m
    tok = bundle.tokenizer()
    eos = tok.specials.eos
    if (directory / "vocab.json").is_file():
        reference = transformers.M2M100Tokenizer(
            str(directory / "vocab.json"), str(directory / "sentencepiece.bpe.model"),
            src_lang="de", tgt_lang="en", language_codes="wmt21")
        assert tok.langs == ("de", "en")
        assert reference(LINES).input_ids == [ids + [eos] for ids in tok.encode_src(LINES)]
        labels = reference(text_target=TARGETS).input_ids
        assert labels == [ids + [eos] for ids in tok.encode_tgt(TARGETS)]
        assert tok.decode_tgt(labels) == reference.batch_decode([row[1:] for row in labels],
                                                                skip_special_tokens=True)
        other = tok.with_langs("ru", "zh")
        assert other.encode_src(LINES[:1])[0][0] == reference.get_lang_id("ru")
        assert other.encode_tgt(TARGETS[:1])[0][0] == reference.get_lang_id("zh")
    else:  # NLLB: SentencePiece's id + 1, its unknown <unk> 3; the codes after the pieces
        proc = spm.SentencePieceProcessor(model_file=str(directory / "sentencepiece.bpe.model"))
        assert tok.langs == ("spa_Latn", "eng_Latn")
        size = proc.vocab_size()
        assert tok.languages == ("eng_Latn", "fra_Latn", "spa_Latn", "deu_Latn")
        assert tok.pieces("src")[size + 1: size + 6] == [*tok.languages, "<mask>"]
        spa = size + 1 + 2
        for line, ids in zip(LINES, tok.encode_src(LINES)):
            expected = [i + 1 if i else 3 for i in proc.encode(line)]
            assert ids == [spa, *expected]
        known = [[i for i in proc.encode(t) if i] for t in TARGETS]  # <unk> left out
        assert tok.decode_tgt(tok.encode_tgt(TARGETS)) == [proc.decode(ids) for ids in known]
        ids, theirs = nllb_sources(directory, tok)
        assert torch.equal(pad_sources(ids, tok.specials), theirs)
        legacy = directory.name == "legacy"
        assert tok.specials.tag_after_eos == legacy
        assert theirs[0, len(ids[0]) - 1:len(ids[0]) + 1].tolist() == (
            [eos, spa] if legacy else [ids[0][-1], eos])
    assert tok.encode_src(LINES * 7) == tok.encode_src(LINES) * 7  # batched (>= 64 lines)


def test_teacher_forced_log_probs_match(m2m):
    directory, reference, bundle = m2m
    assert_log_probs_match(reference, bundle, sources(bundle.tokenizer()), TARGETS)
    if not (directory / "vocab.json").is_file():  # NLLB: also from NllbTokenizer's ids
        assert_log_probs_match(reference, bundle, nllb_sources(directory, bundle.tokenizer())[1],
                               TARGETS)


@pytest.mark.parametrize("beam", [1, 4])
def test_search_equals_generate(m2m, beam):
    """The target language forced first (mtkit: a forced prefix; generate():
    forced_bos_token_id), then free; </s> may end a hypothesis. NLLB: from the sources
    as NllbTokenizer lays them out."""
    directory, reference, bundle = m2m
    tok = bundle.tokenizer()
    engine = TorchEngine([bundle.model(tok)], tok, bundle.recipe)
    settings = DecodeConfig(beam=beam, lenpen=0.0, max_len_a=0.0, max_len_b=CAP)
    lang = list(tok.target_start)
    ids, src = tok.encode_src(LINES), sources(tok)
    if not (directory / "vocab.json").is_file():
        ids, src = nllb_sources(directory, tok)
    found = engine.search(ids, settings, prefixes=[lang] * len(LINES))
    ours = [hyps[0].tokens for hyps in found]
    assert all(row[:1] == lang for row in ours)
    s = tok.specials
    theirs = _generated(reference, src, s.pad, s.eos, num_beams=beam,
                        length_penalty=0.0, forced_bos_token_id=lang[0],
                        bad_words_ids=[[s.pad]])
    assert ours == theirs
    assert s.eos not in s.never_emitted
    assert any(len(row) <= CAP for row in ours)  # some end on </s>, not only at the cap


def test_translator_chooses_the_pair_per_call(m2m):
    from mtkit.decode.translate import Translator

    _, _, bundle = m2m
    tok = bundle.tokenizer()
    translator = Translator(TorchEngine([bundle.model(tok)], tok, bundle.recipe),
                            DecodeConfig(beam=1, max_len_a=0.0, max_len_b=CAP))
    src, tgt = tok.langs
    other = tok.languages[0] if tok.languages[0] != tgt else tok.languages[1]
    default = translator.translate(LINES[:3])
    assert translator.translate(LINES[:3], src_lang=src, tgt_lang=tgt) == default
    hyps = translator.search(LINES[:3], tgt_lang=other)
    forced = tok.with_langs(None, other).target_start[0]
    assert all(h[0].tokens[0] == forced for h in hyps)
    with pytest.raises(DataError, match=f"tgt_lang {tgt[:-1]}: not a language of this "
                                        f"model \\(closest: {tgt}"):
        translator.translate(LINES[:1], tgt_lang=tgt[:-1])


def test_alignments_count_words_not_language_tokens(m2m):
    """Word links of a multilingual model: in range of the line's and the output's words
    (neither side's language token counted), every output word linked, and a pair chosen
    per call aligns as a translator made for that pair."""
    from mtkit.decode.translate import Translator

    _, _, bundle = m2m
    tok = bundle.tokenizer()
    engine = TorchEngine([bundle.model(tok)], tok, bundle.recipe)
    settings = DecodeConfig(beam=2, max_len_a=0.0, max_len_b=CAP)
    src, tgt = tok.langs
    other = tok.languages[0] if tok.languages[0] != tgt else tok.languages[1]
    per_call = Translator(engine, settings).translate_aligned(LINES[:4], tgt_lang=other)
    made = Translator(engine, settings, src_lang=src, tgt_lang=other).translate_aligned(
        LINES[:4])
    assert per_call == made
    for line, aligned in zip(LINES, made):
        words = len(aligned.text.split())
        assert all(i < len(line.split()) and j < words for i, j in aligned.links)
        assert {j for _, j in aligned.links} == set(range(words))


def test_training_loss_equals_the_references(m2m):
    """Labels `[tgt] y </s>`, decoder inputs `</s> [tgt] y`, the loss ignoring only pad."""
    _, reference, bundle = m2m
    tok = bundle.tokenizer()
    model = bundle.model(tok)
    pairs = _Pairs(tok.encode_src(LINES), tok.encode_tgt(TARGETS))
    batch = make_batch(pairs, list(range(len(LINES))), tok.specials)
    pad = tok.specials.pad
    assert torch.equal(batch.src, sources(tok))  # as the search and forced passes read them
    assert (batch.tgt_in[:, 0] == tok.specials.eos).all()
    assert (batch.tgt_in[:, 1] == tok.target_start[0]).all()
    assert (batch.tgt_out[:, 0] == tok.target_start[0]).all()
    with torch.no_grad():
        _, nll, count = label_smoothed_nll(model(batch.src, batch.tgt_in), batch.tgt_out, 0.0,
                                           pad)
        labels = batch.tgt_out.masked_fill(batch.tgt_out == pad, -100)
        theirs = reference(input_ids=batch.src, attention_mask=batch.src.ne(pad),
                           labels=labels).loss
    assert float(nll) / count == pytest.approx(float(theirs), abs=1e-4)


def test_the_bundle_round_trips(m2m, tmp_path):
    directory, _, bundle = m2m
    out = tmp_path / "model.pt"
    codes = bundle.tokenizer().languages
    import_model(directory, out, src_lang=codes[1], tgt_lang=codes[0])
    loaded = load_checkpoint(out)
    assert loaded.imported.format == "m2m_100"
    assert (loaded.recipe.data.langs.src, loaded.recipe.data.langs.tgt) == (codes[1], codes[0])
    assert loaded.tokenizer().langs == (codes[1], codes[0])
    assert loaded.tokenizer().specials == bundle.tokenizer().specials  # tag_after_eos too
    assert loaded.recipe.model.position_layout == "fairseq"


def test_the_ctranslate2_export_decodes_scores_and_aligns_alike(m2m, tmp_path):
    """The export of each tokenizer format (legacy: sources given whole, the language
    token after </s>): greedy with the target language forced first equal, the scores and
    the alignment layer's attention close (float32)."""
    pytest.importorskip("ctranslate2")
    from mtkit.decode import ct2

    directory, _, _ = m2m
    import_model(directory, tmp_path / "model.pt")
    ct2.export(tmp_path / "model.pt", tmp_path / "ct2", "float32")
    ours = TorchEngine.load([tmp_path / "model.pt"])
    theirs = ct2.CTranslate2Engine(tmp_path / "ct2", "cpu", threads=1)
    tok = ours.tokenizer
    assert theirs.tokenizer.specials == tok.specials
    src, lang = tok.encode_src(LINES), list(tok.target_start)
    settings = DecodeConfig(beam=1, max_len_a=0.0, max_len_b=CAP)
    found = [[hyps[0].tokens for hyps in engine.search(src, settings, prefixes=[lang] * len(src))]
             for engine in (ours, theirs)]
    assert found[0] == found[1]
    targets = [row[1:] or [lang[0]] for row in found[0]]  # the language token: no word of it
    for a, b in zip(ours.score(src, targets), theirs.score(src, targets), strict=True):
        assert a == pytest.approx(b, abs=1e-3)
    layer = theirs.alignment_layer
    for a, b in zip(ours.cross_attention(src, targets, layer),
                    theirs.cross_attention(src, targets, layer), strict=True):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=0)


# --------------------------------------------------------------------------- bad input


def _truncate(copy: Path) -> None:
    path = copy / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])


BAD = [
    (edit_json("config.json", lambda v: v.update(_name_or_path="facebook/nllb-moe-54b")),
     "nllb-moe-54b"),
    (_truncate, "truncated or damaged safetensors file"),
    (lambda c: (c / "tokenizer_config.json").write_text("{}"), "lists no language tokens"),
]


@pytest.mark.parametrize(("edit", "message"), BAD, ids=["moe", "truncated", "no-languages"])
def test_bad_input_is_one_line_and_writes_nothing(m2m, tmp_path, edit, message):
    directory, _, _ = m2m
    expect_refused_import(directory, tmp_path, edit, message)


def test_an_unknown_default_language_names_the_closest(m2m, tmp_path):
    directory, _, bundle = m2m
    code = bundle.tokenizer().languages[2]
    with pytest.raises(CheckpointError, match=f"--tgt-lang {code}x: not a language of this "
                                              f"model \\(closest: {code}"):
        import_model(directory, tmp_path / "m.pt", tgt_lang=code + "x")


def test_an_incomplete_sharded_or_fp16_checkpoint_is_one_line(m2m, tmp_path):
    from safetensors.torch import load_file, save_file

    directory, _, _ = m2m
    sharded, half = tmp_path / "sharded", tmp_path / "fp16"
    for copy in (sharded, half):
        shutil.copytree(directory, copy)
        (copy / "model.safetensors").unlink()
    load_reference(directory).save_pretrained(sharded, max_shard_size="20KB")
    shards = sorted(sharded.glob("model-*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    with pytest.raises(CheckpointError, match=f"the shard {shards[-1].name} the index names "
                                              "is missing"):
        read_model(sharded)
    load_reference(directory).half().save_pretrained(half)
    tensors = load_file(half / "model.safetensors")
    del tensors["model.decoder.layer_norm.weight"]
    save_file(tensors, half / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="the weights lack model.decoder.layer_norm.weight"):
        read_model(half)
