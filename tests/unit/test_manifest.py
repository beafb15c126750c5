"""The binarised data's manifest.json: its file format, byte for byte, and what loading
makes of malformed, foreign and newer files. (A manifest binarize wrote:
tests/integration/test_binarize.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import small_manifest

from mtkit.data.dataset import ParallelData
from mtkit.data.manifest import Manifest, load_manifest
from mtkit.errors import DataError


def test_manifest_round_trip_and_file_format(tmp_path: Path) -> None:
    manifest = small_manifest()
    assert Manifest.from_dict(manifest.to_dict(), "here") == manifest
    manifest.write(tmp_path)
    assert load_manifest(tmp_path) == manifest
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temp file left
    text = (tmp_path / "manifest.json").read_text(encoding="utf-8")
    # the file format: these keys in this order, indent 2, a final newline
    assert text.startswith(
        '{\n  "format": "mtkit-bin",\n  "version": 1,\n  "dtype": "uint16",\n'
        f'  "tokenizer": "{"f" * 64}",\n  "max_len": 255,\n  "max_ratio": 3.0,\n'
        '  "splits": {\n    "train": {\n      "lines": 9,\n      "pairs": 6,\n'
        '      "src_tokens": 90,\n      "tgt_tokens": 99,\n      "filtered": true,\n'
        '      "dropped": {\n        "empty": 1,\n        "too_long": 2,\n        "ratio": 0\n'
        '      },\n      "src": {\n        "path": "/corpus/9.es",\n'
        f'        "fingerprint": "{"ab" * 20}"\n      }},\n'
    )
    assert text.endswith("}\n    }\n  }\n}\n")
    assert text == json.dumps(manifest.to_dict(), indent=2) + "\n"


def test_malformed_foreign_and_newer_manifests(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    good = small_manifest().to_dict()
    assert load_manifest(tmp_path) is None  # no manifest
    for foreign in ("{not json", "[1, 2]", json.dumps({**good, "format": "other"})):
        path.write_text(foreign, encoding="utf-8")
        assert load_manifest(tmp_path) is None

    path.write_text(json.dumps({**good, "version": 2}), encoding="utf-8")
    with pytest.raises(DataError, match=r"binarised by a newer mtkit \(format version 2\)"):
        load_manifest(tmp_path)
    with pytest.raises(DataError, match="binarised by a newer mtkit"):
        ParallelData(tmp_path, "train")

    missing = {k: v for k, v in good.items() if k != "dtype"}
    bad_split = json.loads(json.dumps(good))
    bad_split["splits"]["dev"]["lines"] = "4"
    for raw, detail in ((missing, "no 'dtype'"), (bad_split, "split 'dev': 'lines' must be")):
        path.write_text(json.dumps(raw), encoding="utf-8")
        with pytest.raises(DataError, match=f"manifest.json is malformed \\({detail}"):
            load_manifest(tmp_path)
    with pytest.raises(DataError, match=r"^here: manifest.json does not describe mtkit"):
        Manifest.from_dict([], "here")
