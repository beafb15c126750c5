"""`mtkit import` of Marian models, exact against `transformers` (the reference): tiny random
models built in the test (tests/hf_marian.py), shared and separate vocabularies.

Teacher-forced log-probabilities within 1e-4; greedy equal to generate() (mtkit's cap of N
tokens <-> max_new_tokens N + 1: Marian forces EOS inside the limit); beam 4 equal at
length penalty 0, where both stopping rules agree; the training loss of one batch equal to
model(..., labels=...).loss; the tokenizer equal to MarianTokenizer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from builders import DATA
from hf_marian import build_marian, edit_json, expect_refused_import, load_reference

from mtkit.config import DecodeConfig
from mtkit.convert.importer import import_model
from mtkit.convert.marian import read_marian
from mtkit.data.batching import make_batch
from mtkit.decode.engine import TorchEngine
from mtkit.decode.translate import Translator
from mtkit.model.checkpoint import load_checkpoint
from mtkit.model.loss import label_smoothed_nll

transformers = pytest.importorskip("transformers")

CAP = 12  # mtkit's cap in tokens; generate()'s max_new_tokens is CAP + 1
LINES = (DATA / "dev.es").read_text(encoding="utf-8").splitlines()[:10]
TARGETS = (DATA / "dev.en").read_text(encoding="utf-8").splitlines()[:10]


@pytest.fixture(scope="module", params=["shared", "separate"])
def marian(request, tmp_path_factory):
    """(directory, reference model, imported bundle) for one kind of vocabulary."""
    out = build_marian(tmp_path_factory.mktemp("marian") / request.param,
                       shared=request.param == "shared")
    return out, load_reference(out), read_marian(out)


def padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), pad)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def sources(tokenizer) -> torch.Tensor:
    eos = tokenizer.specials.eos
    return padded([ids + [eos] for ids in tokenizer.encode_src(LINES)], tokenizer.specials.pad)


def test_the_tokenizer_is_marian_tokenizers(marian):
    directory, _, bundle = marian
    tok = bundle.tokenizer()
    shared = tok.joint
    reference = transformers.MarianTokenizer(
        str(directory / "source.spm"), str(directory / "target.spm"), str(directory / "vocab.json"),
        target_vocab_file=None if shared else str(directory / "target_vocab.json"),
        separate_vocabs=not shared)
    eos = tok.specials.eos
    assert reference(LINES).input_ids == [ids + [eos] for ids in tok.encode_src(LINES)]
    labels = reference(text_target=TARGETS).input_ids
    assert labels == [ids + [eos] for ids in tok.encode_tgt(TARGETS)]
    assert tok.encode_src(LINES * 7) == tok.encode_src(LINES) * 7  # batched (>= 64 lines)
    if shared:  # a target-language token leads the line, as MarianTokenizer keeps it
        assert tok.tags == ("fra", "deu")
        tagged = tok.tagged("deu").encode_src(LINES[:1])[0]
        assert reference([">>deu<< " + LINES[0]]).input_ids[0] == tagged + [eos]
    assert tok.decode_tgt(labels) == reference.batch_decode(
        labels, skip_special_tokens=True, use_source_tokenizer=False)


def test_teacher_forced_log_probs_match(marian):
    _, reference, bundle = marian
    assert_log_probs_match(reference, bundle, sources(bundle.tokenizer()), TARGETS)


def assert_log_probs_match(reference, bundle, src: torch.Tensor, targets: list[str]) -> None:
    """Our teacher-forced log-probabilities of `targets` after the sources `src` (padded
    ids) equal the reference's (shared with the M2M100/NLLB tests)."""
    tok = bundle.tokenizer()
    model = bundle.model(tok)
    pad = tok.specials.pad
    tgt = tok.encode_tgt(targets)
    tgt_in = padded([[tok.specials.start, *ids] for ids in tgt], pad)
    with torch.no_grad():
        ours = model(src, tgt_in).log_softmax(-1)
        theirs = reference(input_ids=src, attention_mask=src.ne(pad),
                           decoder_input_ids=tgt_in).logits.log_softmax(-1)
    real = torch.zeros(tgt_in.shape, dtype=torch.bool)
    for i, ids in enumerate(tgt):
        real[i, : len(ids) + 1] = True
    assert real.sum() > 100
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-4, rtol=0)


def _generated(reference, src: torch.Tensor, pad: int, eos: int, **options) -> list[list[int]]:
    out = reference.generate(input_ids=src, attention_mask=src.ne(pad), do_sample=False,
                             max_new_tokens=CAP + 1, **options)
    rows = []
    for row in out[:, 1:].tolist():  # after the start token
        rows.append(row[: row.index(eos)] if eos in row else row)
    return rows


@pytest.mark.parametrize("beam", [1, 4])
def test_search_equals_generate(marian, beam):
    _, reference, bundle = marian
    tok = bundle.tokenizer()
    engine = TorchEngine([bundle.model(tok)], tok, bundle.recipe)
    settings = DecodeConfig(beam=beam, lenpen=0.0, max_len_a=0.0, max_len_b=CAP)
    ours = [hyps[0].tokens for hyps in engine.search(tok.encode_src(LINES), settings)]
    s = tok.specials
    theirs = _generated(reference, sources(tok), s.pad, s.eos, num_beams=beam,
                        length_penalty=0.0)
    assert ours == theirs
    assert any(len(row) < CAP for row in ours)  # some end on EOS, not only at the cap


class _Pairs:
    def __init__(self, src: list[list[int]], tgt: list[list[int]]) -> None:
        self.src_ids, self.tgt_ids = src, tgt

    def src(self, i: int):
        import numpy as np

        return np.array(self.src_ids[i], dtype=np.int64)

    def tgt(self, i: int):
        import numpy as np

        return np.array(self.tgt_ids[i], dtype=np.int64)


def test_training_loss_equals_the_references(marian):
    """Labels `y </s>`, decoder inputs `<pad> y`, the loss ignoring only the pad id."""
    _, reference, bundle = marian
    tok = bundle.tokenizer()
    model = bundle.model(tok)
    pairs = _Pairs(tok.encode_src(LINES), tok.encode_tgt(TARGETS))
    batch = make_batch(pairs, list(range(len(LINES))), tok.specials)
    pad = tok.specials.pad
    assert (batch.tgt_in[:, 0] == pad).all()
    with torch.no_grad():
        _, nll, count = label_smoothed_nll(model(batch.src, batch.tgt_in), batch.tgt_out, 0.0,
                                           pad)
        labels = batch.tgt_out.masked_fill(batch.tgt_out == pad, -100)
        theirs = reference(input_ids=batch.src, attention_mask=batch.src.ne(pad),
                           labels=labels).loss
    assert count == int((batch.tgt_out != pad).sum())
    assert float(nll) / count == pytest.approx(float(theirs), abs=1e-4)


# --------------------------------------------------------------------------- the files


def test_weight_files_of_every_kind_give_one_model(marian, tmp_path):
    """Sharded safetensors with an index, pytorch_model.bin, fp16: the same model."""
    directory, reference, bundle = marian
    copies = {}
    for kind in ("sharded", "bin", "fp16"):
        copy = tmp_path / kind
        shutil.copytree(directory, copy)
        (copy / "model.safetensors").unlink()
        model = load_reference(directory)
        if kind == "fp16":
            model = model.half()
        model.save_pretrained(copy, max_shard_size="20KB" if kind == "sharded" else "1GB")
        if kind == "bin":
            torch.save(model.state_dict(), copy / "pytorch_model.bin")
            for name in ("model.safetensors", "model.safetensors.index.json"):
                (copy / name).unlink(missing_ok=True)
        copies[kind] = read_marian(copy)
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    for kind in ("sharded", "bin"):
        for key, value in bundle.weights.items():
            assert torch.equal(copies[kind].weights[key], value), (kind, key)
    for key, value in bundle.weights.items():
        half = copies["fp16"].weights[key]
        assert half.dtype == torch.float32
        torch.testing.assert_close(half, value.half().float(), atol=0, rtol=0)


def _drop_tensor(name: str):
    def edit(copy: Path) -> None:
        from safetensors.torch import load_file, save_file

        tensors = load_file(copy / "model.safetensors")
        del tensors[name]
        save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    return edit


def _foreign_vocab(copy: Path) -> None:
    vocab = json.loads((copy / "vocab.json").read_text())
    renamed = {(f"x{i}" if 2 <= i < len(vocab) - 1 else p): i for p, i in vocab.items()}
    (copy / "vocab.json").write_text(json.dumps(renamed))


BAD = [
    (lambda c: (c / "config.json").unlink(), "no config.json; not a Hugging Face model"),
    (edit_json("config.json", lambda v: v.update(model_type="bart")),
     "model_type 'bart' is not supported; mtkit imports marian"),
    (_drop_tensor("model.decoder.layers.1.fc2.weight"),
     "the weights lack model.decoder.layers.1.fc2.weight"),
    (edit_json("config.json", lambda v: v.update(encoder_ffn_dim=40, decoder_ffn_dim=40)),
     r"model.encoder.layers.0.fc1.weight has shape \(32, 16\); config.json asks for \(40, 16\)"),
    (_foreign_vocab, "the vocabulary does not match source.spm: it holds 0 of its"),
    (edit_json("config.json", lambda v: v.update(d_model="sixteen")),
     r"config.json: d_model 'sixteen' is not a whole number$"),
    (edit_json("config.json", lambda v: v.pop("encoder_layers")),
     r"config.json: encoder_layers is missing$"),
    (edit_json("config.json", lambda v: v.update(encoder_layers=1)),
     r"config.json gives the encoder 1 layer\(s\), but the weights hold "
     r"model.encoder.layers.1\."),
]


@pytest.mark.parametrize(("edit", "message"), BAD, ids=["no-config", "not-marian",
                                                        "missing-tensor", "wrong-shape",
                                                        "foreign-vocab", "not-a-number",
                                                        "missing-number", "extra-layer"])
def test_bad_input_is_one_line_and_writes_nothing(marian, tmp_path, edit, message):
    directory, _, bundle = marian
    if "vocab" in message and not bundle.tokenizer().joint:
        pytest.skip("one vocabulary is enough")
    expect_refused_import(directory, tmp_path, edit, message)


def test_the_bundle_round_trips(marian, tmp_path):
    directory, _, bundle = marian
    out = tmp_path / "model.pt"
    import_model(directory, out)
    loaded = load_checkpoint(out)
    assert loaded.imported == bundle.imported and loaded.imported.format == "marian"
    assert loaded.vocab == bundle.vocab and loaded.recipe == bundle.recipe
    assert loaded.recipe.decode.beam == 4 and loaded.recipe.data.langs.tgt == "en"
    assert loaded.tokenizer().specials.never_emitted == (loaded.tokenizer().specials.pad,)


def test_ctranslate2_export_decodes_alike(marian, tmp_path):
    """Exported as CTranslate2's own Marian converter does (a zero start embedding, the pad
    entry removed, swish, the logits bias as the projection's bias): the same greedy
    output, and the same beam output at length penalty 0."""
    pytest.importorskip("ctranslate2")
    from mtkit.decode import ct2

    directory, _, bundle = marian
    model = tmp_path / "model.pt"
    import_model(directory, model)
    out = tmp_path / "ct2"
    ct2.export(model, out, "float32")
    theirs_engine = ct2.CTranslate2Engine(out, "cpu", threads=1)
    assert len(theirs_engine.tokenizer.pieces("tgt")) == len(bundle.tokenizer().pieces("tgt"))
    tok = bundle.tokenizer()
    ours_engine = TorchEngine([bundle.model(tok)], tok, bundle.recipe)
    for beam in (1, 4):
        settings = DecodeConfig(beam=beam, lenpen=0.0, max_len_a=0.0, max_len_b=CAP)
        ours = ours_engine.search(tok.encode_src(LINES), settings)
        theirs = theirs_engine.search(tok.encode_src(LINES), settings)
        assert [h[0].tokens for h in ours] == [h[0].tokens for h in theirs], beam
    # word alignments: CTranslate2's steps from the zero start embedding are mtkit's
    found = Translator(ours_engine, settings).search(LINES)
    links = Translator(ours_engine, settings).align(LINES, found)
    assert Translator(theirs_engine, settings).align(LINES, found) == links
    for (hyp,), (pairs,) in zip(found, links):
        words = len(tok.decode_tgt([hyp.tokens])[0].split())
        assert {j for _, j in pairs} == set(range(words))
