"""Scoring given translations (Translator.score, decode/scoring.py) on the reverse-task
model, which ends its outputs with EOS: the score of the model's own output is the
search's log-probability (greedy, beam, a forced prefix, an ensemble), in mtkit's engine
and CTranslate2's alike. `mtkit score-pairs` and `/v1/score`: tests/system/test_score_pairs.py.

Tolerance 1e-4 within mtkit (the search adds step by step through its cache, the forced
pass runs the target at once: fp32 sums in two orders), 1e-3 against CTranslate2 (another
library's kernels), per sentence.
"""

from __future__ import annotations

import copy

import pytest
import torch

from mtkit.config import DecodeConfig
from mtkit.decode.engine import TorchEngine
from mtkit.decode.translate import Translator
from mtkit.errors import ConfigError, DataError

GREEDY = DecodeConfig(beam=1, max_len_a=2.0, max_len_b=10)
BEAM = DecodeConfig(beam=4, nbest=4, lenpen=1.0, max_len_a=2.0, max_len_b=10)


def lines_of(path, count: int = 30) -> list[str]:
    return path.read_text().splitlines()[:count]


def assert_scores_are_the_searchs(translator: Translator, lines: list[str],
                                  prefixes: list[str] | None = None) -> None:
    """Every hypothesis that ended with EOS (all of them here: the caps are generous),
    scored as text, gets its logprob back; the text must spell its tokens again."""
    found = translator.search(lines, prefixes=prefixes)
    sources, targets, expected = [], [], []
    for line, hyps in zip(lines, found, strict=True):
        for hyp, text in zip(hyps, translator.texts(hyps), strict=True):
            assert translator.tokenizer.encode_tgt([text])[0] == hyp.tokens
            sources.append(line)
            targets.append(text)
            expected.append(hyp.logprob)
    scores = translator.score(sources, targets)
    for score, target, logprob in zip(scores, targets, expected, strict=True):
        assert score.tokens == len(translator.tokenizer.encode_tgt([target])[0]) + 1
        assert score.total == pytest.approx(logprob, abs=1e-4)
        assert score.per_token == pytest.approx(score.total / score.tokens)


@pytest.mark.parametrize("settings", [GREEDY, BEAM], ids=["greedy", "beam"])
def test_the_score_of_the_models_own_output_is_the_searchs(reverse_model, settings):
    model, test_src = reverse_model
    translator = Translator(TorchEngine.load([model]), settings)
    assert_scores_are_the_searchs(translator, lines_of(test_src))


def test_the_score_of_a_prefixed_translation_is_the_searchs(reverse_model):
    """The search's logprob of a forced prefix's translation covers prefix and
    continuation: so does the score of its output."""
    model, test_src = reverse_model
    lines = lines_of(test_src)
    translator = Translator(TorchEngine.load([model]), BEAM)
    # the true start (the reversed line), a start the model would not choose, none
    prefixes = [line.split()[-1] if i % 3 == 0 else "a b" if i % 3 == 1 else ""
                for i, line in enumerate(lines)]
    assert_scores_are_the_searchs(translator, lines, prefixes)


def test_an_ensemble_scores_as_its_search_averages(reverse_model):
    model, test_src = reverse_model
    engine = TorchEngine.load([model])
    other = copy.deepcopy(engine.models[0])
    with torch.no_grad():
        torch.manual_seed(0)
        for weight in other.parameters():
            weight.add_(0.05 * torch.randn_like(weight))
    ensemble = TorchEngine([engine.models[0], other], engine.tokenizer, engine.recipe)
    lines = lines_of(test_src, 20)
    for settings in (GREEDY, BEAM):
        assert_scores_are_the_searchs(Translator(ensemble, settings), lines)
    alone = Translator(engine).score(lines[:1], lines[:1])[0].total
    assert Translator(ensemble).score(lines[:1], lines[:1])[0].total != alone


def test_mtkit_and_ctranslate2_score_alike(reverse_model, tmp_path):
    pytest.importorskip("ctranslate2")
    from mtkit.decode import ct2

    model, test_src = reverse_model
    out = tmp_path / "ct2"
    ct2.export(model, out, "float32")
    lines = lines_of(test_src)
    targets = [" ".join(reversed(line.split())) if i % 2 else line
               for i, line in enumerate(lines)]  # right and wrong translations
    lines, targets = [*lines, "", "a b", ""], [*targets, "", "", "b a"]  # and empty sides
    ours = Translator(TorchEngine.load([model])).score(lines, targets)
    theirs = Translator(ct2.CTranslate2Engine(out, "cpu", threads=1)).score(lines, targets)
    for mine, their in zip(ours, theirs, strict=True):
        assert mine.tokens == their.tokens
        assert mine.token_logprobs == pytest.approx(their.token_logprobs, abs=1e-3)


def test_empty_lines_are_pairs_and_too_long_ones_are_refused(reverse_model):
    model, _ = reverse_model
    translator = Translator(TorchEngine.load([model]), max_tokens=64)
    one = translator.score("a b c", "c b a")
    empty_target, empty_source, both = translator.score(["a b", "", ""], ["", "b a", ""])
    assert empty_target.tokens == both.tokens == 1  # EOS alone
    assert empty_source.tokens == 3
    assert one.total < 0 and empty_target.total < 0
    # a batch bounded to fewer tokens than the pairs: the same scores, in input order
    many = translator.score(["a b c", "a b", "a b c"] * 20, ["c b a", "", "c b a"] * 20)
    assert [s.total for s in many[:3]] == pytest.approx([one.total, empty_target.total,
                                                          one.total], abs=1e-5)
    longest = translator.max_source
    with pytest.raises(DataError, match=r"tgt\.txt line 3: \d+ tokens, the model takes at most"):
        translator.score(["a", "b", "c"], ["a", "b", "a b c " * longest], names=("s", "tgt.txt"))
    with pytest.raises(DataError, match=r"source line 12:"):
        translator.score(["a b c " * longest], ["a"], first_line=11)
    # skipped: the long pair scores -inf, the others as they score alone
    skipped = translator.score(["a b c", "a b c " * longest, "a b", ""],
                               ["c b a", "a", "", "a b c " * longest], skip_long=True)
    assert skipped[1].total == skipped[3].total == float("-inf")
    assert [skipped[0].total, skipped[2].total] == pytest.approx(
        [one.total, empty_target.total], abs=1e-5)
    assert skipped[1].line() == "-inf\t-inf"
    with pytest.raises(ConfigError, match="as many targets as sources"):
        translator.score(["a", "b"], ["a"])
