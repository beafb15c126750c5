"""A CTranslate2 export decodes each batch with the thread setting chosen for its size,
and the same translations whichever it is (the rule itself: tests/unit/test_engine_threads.py)."""

from __future__ import annotations

import pytest

from mtkit.config import DecodeConfig
from mtkit.decode.translate import Translator

ctranslate2 = pytest.importorskip("ctranslate2")


def test_batch_size_picks_the_translator(reverse_model, tmp_path):
    from mtkit.decode import ct2

    model, test_src = reverse_model
    ct2.export(model, tmp_path / "ct2", "float32")
    engine = ct2.CTranslate2Engine(tmp_path / "ct2", "cpu")
    cores = engine.cores
    lines = test_src.read_text().splitlines()[: ct2.LARGE_BATCH]
    assert len(lines) == ct2.LARGE_BATCH
    settings = DecodeConfig(beam=2)
    alone = [Translator(engine, settings).translate([line])[0] for line in lines]
    assert set(engine._translators) == {(cores, 1)}  # loaded at once, for small batches
    together = Translator(engine, settings).translate(lines)
    assert set(engine._translators) == {(cores, 1), (1, cores)}
    assert together == alone

    fixed = ct2.CTranslate2Engine(tmp_path / "ct2", "cpu", threads=1)
    assert Translator(fixed, settings).translate(lines) == together
    assert set(fixed._translators) == {(1, 1)}
