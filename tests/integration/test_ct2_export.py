"""CTranslate2 export: the exported float32 model decodes like mtkit's own, token for token,
through the same Translator (the reverse-task model: tests/conftest.py reverse_model).
`mtkit export` and translating an export through the CLI: tests/system/test_ct2_cli.py."""

from __future__ import annotations

import pytest

from mtkit.config import DecodeConfig
from mtkit.decode.engine import TorchEngine
from mtkit.decode.translate import Translator

ctranslate2 = pytest.importorskip("ctranslate2")


def test_exported_float32_greedy_equals_mtkit(reverse_model, tmp_path):
    from mtkit.decode import ct2

    model, test_src = reverse_model
    out = tmp_path / "ct2"
    ct2.export(model, out, "float32")
    assert ct2.is_exported_model(out)
    lines = test_src.read_text().splitlines()
    settings = DecodeConfig(beam=1, max_len_a=1.5, max_len_b=5)

    ours = Translator(TorchEngine.load([model]), settings).search(lines)
    theirs = Translator(ct2.CTranslate2Engine(out, "cpu", threads=1), settings).search(lines)
    assert [h[0].tokens for h in ours] == [h[0].tokens for h in theirs]


def test_prefix_decoding_agrees_with_mtkit(reverse_model, tmp_path):
    """Forced prefixes (the start of mtkit's own output, prefixes the model would not
    choose, none) decode to the same tokens in both engines, greedy and beam, with scores
    within 1e-3 (float32 sums in two orders; the prefix's log-probability included in
    both). Without a length penalty: with one, the engines' stop rules differ (see
    ct2.CTranslate2Engine.stop_rules), prefix or not. The best hypothesis: CTranslate2
    bars EOS right after a prefix from the beams below the first, so an n-best list may
    differ in a hypothesis that is the prefix alone."""
    from mtkit.decode import ct2

    model, test_src = reverse_model
    out = tmp_path / "ct2"
    ct2.export(model, out, "float32")
    lines = test_src.read_text().splitlines()[:40]
    ours_engine = TorchEngine.load([model])
    theirs_engine = ct2.CTranslate2Engine(out, "cpu", threads=1)
    greedy = DecodeConfig(beam=1, max_len_a=1.5, max_len_b=5)
    own = Translator(ours_engine, greedy).translate(lines)
    prefixes = [" ".join(text.split()[: i % 3]) if i % 4 else line.split()[-1] * 2
                for i, (text, line) in enumerate(zip(own, lines))]
    forced = ours_engine.tokenizer.encode_tgt(prefixes)
    for settings in (greedy, DecodeConfig(beam=4, lenpen=0.0, max_len_a=1.5, max_len_b=5,
                                          stop="top")):
        ours = Translator(ours_engine, settings).search(lines, prefixes=prefixes)
        theirs = Translator(theirs_engine, settings).search(lines, prefixes=prefixes)
        for mine, their, ids in zip(ours, theirs, forced, strict=True):
            assert mine[0].tokens[: len(ids)] == ids
            assert [h.tokens for h in mine] == [h.tokens for h in their]
            assert [h.score for h in mine] == pytest.approx([h.score for h in their], abs=1e-3)


def test_exported_model_samples(reverse_model, tmp_path):
    """CTranslate2's sampling: the same seed repeats a batch's samples, topk:1 is greedy,
    --nbest N gives N, pad and the start token never come out."""
    from mtkit.config import Sampling
    from mtkit.decode import ct2

    model, test_src = reverse_model
    out = tmp_path / "ct2"
    ct2.export(model, out, "float32")
    engine = ct2.CTranslate2Engine(out, "cpu", threads=1)
    lines = test_src.read_text().splitlines()[:20]

    def sample(rule: str, **changes) -> list:
        settings = DecodeConfig(sampling=Sampling.parse(rule), max_len_a=1.5, max_len_b=5,
                                **changes)
        return Translator(engine, settings).search(lines)

    first = sample("full", temperature=3.0, seed=7, nbest=3)
    assert sample("full", temperature=3.0, seed=7, nbest=3) == first
    assert sample("full", temperature=3.0, seed=8, nbest=3) != first
    assert all(len(hyps) == 3 for hyps in first)
    never = set(engine.tokenizer.specials.never_emitted)
    assert not never & {t for hyps in first for h in hyps for t in h.tokens}
    greedy = Translator(engine, DecodeConfig(beam=1, max_len_a=1.5, max_len_b=5)).search(lines)
    assert [h[0].tokens for h in sample("topk:1", nbest=2)] == [h[0].tokens for h in greedy]
