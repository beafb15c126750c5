"""Attention pictures (report/attention.py) of the reverse-task model: a map per sentence
whose rows are distributions over the source, a panel per layer and head with --all, a
PNG of the size the figure asks for, and the one-line errors (no matplotlib, a layer the
model lacks, --all with an ensemble). `mtkit attention` itself:
tests/system/test_attention_cli.py."""

from __future__ import annotations

import dataclasses
import io
import sys

import numpy as np
import pytest

from mtkit.decode.engine import TorchEngine
from mtkit.decode.translate import Translator
from mtkit.errors import ConfigError, DataError
from mtkit.report import attention
from mtkit.report.plot import plot_available

drawing = pytest.mark.skipif(not plot_available(), reason="matplotlib is not installed")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def translator(reverse_model) -> Translator:
    return Translator(TorchEngine.load([reverse_model[0]]))


def test_a_map_per_sentence_rows_over_the_source(translator):
    lines = ["a b c d", "e f g"]
    found = attention.attention_maps(translator, lines)
    assert len(found) == 2
    layers = len(translator.engine.models[0].decoder)
    for line, amap, text in zip(lines, found, translator.translate(lines)):
        assert amap.layers == (max(layers - 2, 0),) and amap.averaged  # the penultimate
        assert amap.source[-1] == amap.output[-1] == attention.EOS
        assert "".join(amap.source[:-1]).replace("▁", " ").strip() == line
        assert "".join(amap.output[:-1]).replace("▁", " ").strip() == text
        assert amap.weights.shape == (1, 1, len(amap.output), len(amap.source))
        assert np.allclose(amap.weights.sum(axis=-1), 1.0, atol=1e-5)


@drawing
def test_one_panel_for_a_layer_and_layers_x_heads_for_all(translator):
    model = translator.engine.models[0]
    heads = translator.engine.recipe.model.heads
    one = attention.attention_maps(translator, ["a b c"], layer=-1)[0]
    assert one.layers == (len(model.decoder) - 1,)
    assert attention.image_panels(attention.attention_figure(one)) == 1
    grid = attention.attention_maps(translator, ["a b c"], every_head=True)[0]
    assert grid.weights.shape[:2] == (len(model.decoder), heads)
    figure = attention.attention_figure(grid)
    assert attention.image_panels(figure) == len(model.decoder) * heads
    assert len(figure.axes) == len(model.decoder) * heads + 1  # and the colour bar


@drawing
def test_the_png_of_each_sentence(reverse_model, tmp_path):
    from matplotlib import image

    job = attention.AttentionJob(models=(reverse_model[0],), output=tmp_path / "a.png",
                                 lines=2, device="cpu")
    paths = attention.attention_pictures(job, io.BytesIO(b"a b c d\ne f\ng h\n"))
    assert paths == [tmp_path / "a-1.png", tmp_path / "a-2.png"]  # the first 2 lines
    assert sorted(tmp_path.iterdir()) == paths  # no temporary file left
    for path in paths:
        assert path.read_bytes().startswith(PNG_SIGNATURE)
        height, width = image.imread(path).shape[:2]
        assert 300 <= width <= 1500 and 250 <= height <= 1500, (width, height)
    one = attention.AttentionJob(models=(reverse_model[0],), output=tmp_path / "b.png")
    assert attention.attention_pictures(one, io.BytesIO(b"a b\n")) == [tmp_path / "b.png"]
    # --lines 3 of an input of one line: numbered all the same, as --lines says
    three = dataclasses.replace(one, lines=3)
    assert attention.attention_pictures(three, io.BytesIO(b"a \xff b")) == [tmp_path / "b-1.png"]


def test_the_one_line_errors(reverse_model, translator, tmp_path, monkeypatch):
    layers = len(translator.engine.models[0].decoder)
    with pytest.raises(ConfigError, match=rf"--layer {layers}: .*has {layers}"):
        attention.attention_maps(translator, ["a b"], layer=layers)
    ensemble = Translator(TorchEngine.load([reverse_model[0]] * 2))
    with pytest.raises(ConfigError, match="one -m, not an ensemble"):
        attention.attention_maps(ensemble, ["a b"], every_head=True)
    attention.attention_maps(ensemble, ["a b"])  # heads averaged: an ensemble averages too
    with pytest.raises(DataError, match="stdin line 2: empty"):
        attention.read_sentences(io.BytesIO(b"a b\n\n"), 3)
    with pytest.raises(DataError, match="no sentence"):
        attention.read_sentences(io.BytesIO(b""), 1)
    job = attention.AttentionJob(models=(reverse_model[0],), output=tmp_path / "a.pdf")
    with pytest.raises(ConfigError, match=r"\.png"):
        attention.attention_pictures(job, io.BytesIO(b"a\n"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    job = attention.AttentionJob(models=(reverse_model[0],), output=tmp_path / "a.png")
    with pytest.raises(ConfigError) as error:
        attention.attention_pictures(job, io.BytesIO(b"a\n"))
    assert str(error.value) == attention.MISSING
    assert "pip install 'mtkit[plot]'" in attention.MISSING
