"""Word alignments on the reverse-task model (tests/conftest.py reverse_model), whose
true alignment is known: output word j of an n-word line comes from source word n-1-j;
the same model trained with guided alignment on those links; and the two engines agree
on the links of the same hypotheses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from builders import metrics_records, prepare, reverse_links, reverse_recipe, reverse_task

from mtkit.config import DecodeConfig, recipe_from_dict
from mtkit.decode.engine import TorchEngine
from mtkit.decode.translate import Translator
from mtkit.errors import ConfigError

GREEDY = DecodeConfig(beam=1, max_len_a=1.5, max_len_b=5)


def reversal_accuracy(translator: Translator, lines: list[str]) -> float:
    """The share of links that are the reversal's, over the lines translated correctly
    (the reversal is their true alignment; a wrong output has none to compare with)."""
    found = translator.search(lines)
    links = translator.align(lines, found)
    right = total = correct = 0
    for line, text, (pairs,) in zip(lines, translator.texts([h[0] for h in found]), links):
        n = len(line.split())
        if text.split() != line.split()[::-1]:
            continue
        correct += 1
        right += sum(i == n - 1 - j for i, j in pairs)
        total += len(pairs)
    assert correct > 0.7 * len(lines)  # the model has learnt the task
    return right / total


def test_links_follow_the_reversal(reverse_model):
    """Below the 95% hoped for: this tiny model's attention gives 86% of word links right
    in the last layer of its two-layer decoder, 66% in the first (the penultimate, the
    default), which attends to the words already copied more than to the one being
    copied (docs/guides/alignments.md). The floors leave room for other machines."""
    model, test_src = reverse_model
    lines = test_src.read_text().splitlines()
    engine = TorchEngine.load([model])
    last, first = (reversal_accuracy(Translator(engine, replace(GREEDY, alignment_layer=n)),
                                     lines) for n in (-1, -2))
    assert last >= 0.8 and first >= 0.55 and last > first + 0.1, (last, first)


@pytest.fixture(scope="module")
def guided_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run directory, test source) of reverse_model's recipe, its corpus given the
    reversal's links: guided alignment on the default alignment layer (the first of two)."""
    from mtkit.train.trainer import train

    root = tmp_path_factory.mktemp("guided")
    files = reverse_task(root / "data")
    raw = reverse_recipe(files, max_steps=250)
    raw["data"]["train"]["alignments"] = str(reverse_links(files["train"][0],
                                                           root / "data" / "train.links"))
    # a tiny model's few updates need a heavy weight: 0.05 gives 84% of links right, 1.0
    # 99% (the task itself is learnt in 250 updates either way)
    raw["train"]["alignment_weight"] = 1.0
    recipe = recipe_from_dict(raw, name="guided")
    run = root / "run"
    tokenizer, fingerprints = prepare(recipe, run)
    train(recipe, run, tokenizer, run / "data", fingerprints, "cpu")
    return run, files["test"][0]


def test_guided_alignment_gives_the_reversal(guided_model):
    """Trained on the reversal's links, the default layer's attention aligns (the issue's
    95%), where the same recipe without them gets 66% (the test above); the guided loss
    is logged and falls."""
    run, test_src = guided_model
    lines = test_src.read_text().splitlines()
    translator = Translator(TorchEngine.load([run / "checkpoints" / "checkpoint_last.pt"]),
                            GREEDY)
    assert reversal_accuracy(translator, lines) >= 0.95
    aligned = [r["align_loss"] for r in metrics_records(run, "train")]
    assert len(aligned) >= 2 and aligned[-1] < aligned[0] / 2, aligned


def test_ctranslate2_links_are_torchs(reverse_model, tmp_path):
    """The export aligns with the layer and heads mtkit's engine uses: on the same
    hypotheses (mtkit's own, n-best included) every link is the same, word and subword
    (a float32 export: attention equal to about 1e-6)."""
    pytest.importorskip("ctranslate2")
    from mtkit.decode import ct2

    model, test_src = reverse_model
    out = tmp_path / "ct2"
    ct2.export(model, out, "float32")
    lines = test_src.read_text().splitlines()[:40] + ["", "a b"]
    ours = Translator(TorchEngine.load([model]), DecodeConfig(beam=3, nbest=3))
    theirs = Translator(ct2.CTranslate2Engine(out, "cpu", threads=1), ours.settings)
    found = ours.search(lines)
    for unit in ("word", "subword"):
        assert theirs.align(lines, found, unit) == ours.align(lines, found, unit)
    other = Translator(theirs.engine, DecodeConfig(alignment_layer=-1))
    with pytest.raises(ConfigError, match="aligns with decoder layer 0, fixed when it was "
                                          "exported"):
        other.align(lines, found)
    ct2.export(model, tmp_path / "last", "float32", alignment_layer=-1)
    last = ct2.CTranslate2Engine(tmp_path / "last", "cpu", threads=1)
    assert (last.alignment_layer, last.recipe.decode.alignment_layer) == (1, -1)
    ours.settings = replace(ours.settings, alignment_layer=-1)
    assert Translator(last, ours.settings).align(lines, found) == ours.align(lines, found)
    with pytest.raises(ConfigError, match="--alignment-layer 2: the model's decoder has 2"):
        ct2.export(model, tmp_path / "bad", "float32", alignment_layer=2)
