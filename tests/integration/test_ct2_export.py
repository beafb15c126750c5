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
