"""binarize: text to token arrays, in this process or a pool of workers, gzip input,
filters counted by reason, errors that leave nothing half-written, recovery after a crash
or a SIGKILL, and the manifest it writes (the manifest format alone:
tests/unit/test_manifest.py)."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from builders import prepare, reverse_links, reverse_recipe, reverse_task, small_manifest

from mtkit.config import recipe_from_dict
from mtkit.data.binarize import _Encoder, binarize
from mtkit.data.dataset import ParallelData
from mtkit.data.manifest import Manifest, load_manifest
from mtkit.data.recipe_splits import recipe_training_prints
from mtkit.data.tokenizer import UNK_ID, Tokenizer
from mtkit.errors import ConfigError, DataError
from mtkit.files.textio import file_fingerprint


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir()) if out.parent.exists() else []


@pytest.fixture(scope="module")
def binarized(tokenizer: Tokenizer, splits, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bin") / "data"
    binarize(tokenizer, splits, out, workers=1)
    return out


def test_round_trip(binarized: Path, tokenizer: Tokenizer, splits) -> None:
    for split, (src, tgt) in splits.items():
        data = ParallelData(binarized, split)
        src_lines, tgt_lines = _lines(src), _lines(tgt)
        assert len(data) == len(src_lines)  # nothing filtered at the default limits
        src_ids = [data.src(i).tolist() for i in range(len(data))]
        tgt_ids = [data.tgt(i).tolist() for i in range(len(data))]
        assert src_ids == tokenizer.encode_src(src_lines)
        assert tgt_ids == tokenizer.encode_tgt(tgt_lines)
        assert data.src_lens.tolist() == [len(s) for s in src_ids]
        # decoding the stored ids gives exactly what SentencePiece makes of the text
        known = [[i for i in seq if i != UNK_ID] for seq in tgt_ids]
        assert tokenizer.decode_tgt(tgt_ids) == tokenizer._tgt.decode(known)


def test_manifest(binarized: Path, tokenizer: Tokenizer, splits) -> None:
    manifest = load_manifest(binarized)
    raw = json.loads((binarized / "manifest.json").read_text())
    assert manifest.to_dict() == raw
    assert (raw["format"], raw["version"], manifest.dtype) == ("mtkit-bin", 1, "uint16")
    assert manifest.tokenizer == tokenizer.fingerprint()
    train = manifest.splits["train"]
    assert train.lines == train.pairs == 300
    assert train.dropped == {"empty": 0, "too_long": 0, "ratio": 0}
    assert train.src_tokens == (binarized / "train.src.bin").stat().st_size // 2
    assert train.src.path == str(splits["train"][0].resolve())
    assert train.tgt.fingerprint == file_fingerprint(splits["train"][1])
    assert not manifest.splits["dev"].filtered
    names = {p.name for p in binarized.iterdir()}
    assert names == {"manifest.json"} | {f"{s}.lines" for s in splits} | {
        f"{s}.{side}.{ext}" for s in splits for side in ("src", "tgt") for ext in ("bin", "idx")
    }
    assert _siblings(binarized) == ["data"]  # no temp or .old dirs left


def test_workers_and_gzip_give_identical_output(
    binarized: Path, tokenizer: Tokenizer, splits, tmp_path: Path
) -> None:
    gz_splits = {}
    for split, pair in splits.items():
        gz_pair = []
        for path in pair:
            gz = tmp_path / f"{path.name}.gz"
            gz.write_bytes(gzip.compress(path.read_bytes()))
            gz_pair.append(gz)
        gz_splits[split] = tuple(gz_pair)
    binarize(tokenizer, gz_splits, tmp_path / "out", workers=2)
    expected = _snapshot(binarized)
    actual = _snapshot(tmp_path / "out")
    assert expected.pop("manifest.json") != actual.pop("manifest.json")  # other paths
    assert actual == expected


def test_filters_are_counted_by_reason(
    tokenizer: Tokenizer, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    long = "y dijo Dios " * 20
    pairs = [
        ("en el principio", "in the beginning"),
        ("", "empty source"),
        ("empty target", ""),
        (long, long),  # too long
        ("luz", long[:120]),  # ratio
        ("y fue la luz", "and there was light"),
    ]
    src, tgt = tmp_path / "t.es", tmp_path / "t.en"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    manifest = binarize(
        tokenizer, {"train": (src, tgt), "dev": (src, tgt)}, tmp_path / "out", workers=1, max_len=40
    )
    train = manifest.splits["train"]
    assert train.dropped == {"empty": 2, "too_long": 1, "ratio": 1}
    assert train.pairs == 2 and train.lines == 6
    kept = ParallelData(tmp_path / "out", "train")
    assert [kept.tgt(i).tolist() for i in range(2)] == tokenizer.encode_tgt(
        [pairs[0][1], pairs[5][1]]
    )
    dev = ParallelData(tmp_path / "out", "dev")  # dev keeps every line, even empty ones
    assert len(dev) == 6 and len(dev.src(1)) == 0 and len(dev.tgt(2)) == 0
    out, err = capsys.readouterr()
    assert out == ""  # stdout belongs to the CLI's results
    assert ("train (t.es): 6 lines, 2 pairs kept; dropped 2 empty, 1 longer than 40 tokens, 1 "
            "with length ratio above 3; 19 + 14 tokens") in err
    assert "dev (t.es): 6 lines, 6 pairs kept" in err


def test_workers_do_not_read_ahead(tokenizer: Tokenizer) -> None:
    pulled = 0

    def chunks():
        nonlocal pulled
        for _ in range(100):
            pulled += 1
            yield ["y fue la luz"], ["and there was light"], None, pulled

    encoder = _Encoder(tokenizer, workers=2)
    try:
        results = encoder.map(chunks())
        next(results)
        assert pulled <= 5  # a bounded queue, not the whole corpus in flight
        assert len(list(results)) == 99
    finally:
        encoder.close()


# --------------------------------------------------------------------------- errors


def _expect_failure(tokenizer: Tokenizer, splits, out: Path, match: str, **kwargs) -> None:
    """The error is a one-liner and leaves nothing behind: no output, or the previous intact."""
    before = _snapshot(out) if out.exists() else None
    with pytest.raises(DataError, match=match) as info:
        binarize(tokenizer, splits, out, workers=1, **kwargs)
    assert "\n" not in str(info.value)
    if before is None:
        assert not out.exists()
    else:
        assert _snapshot(out) == before
    assert _siblings(out) == ([out.name] if before is not None else [])


@pytest.mark.parametrize("previous", [False, True])
def test_errors_leave_nothing_half_written(
    tokenizer: Tokenizer, splits, tmp_path: Path, data_dir: Path, previous: bool
) -> None:
    out = tmp_path / "work" / "data"
    if previous:
        binarize(tokenizer, {"dev": splits["dev"]}, out, workers=1)
    train_src, train_tgt = splits["train"]

    short = tmp_path / "short.en"
    short.write_text("".join(line + "\n" for line in _lines(train_tgt)[:299]), encoding="utf-8")
    mismatch = {"train": (train_src, short)}
    message = (
        r"^train: .*train\.es has 300 lines but .*short\.en has 299; "
        "parallel files must have the same number of lines$"
    )
    _expect_failure(tokenizer, mismatch, out, message)

    bad = tmp_path / "bad.en"
    bad.write_bytes(train_tgt.read_bytes().replace(b"God", b"G\xf6d", 1))
    utf8 = {"dev": splits["dev"], "train": (train_src, bad)}  # fails in the second split
    line = next(i for i, text in enumerate(_lines(train_tgt), 1) if "God" in text)
    _expect_failure(tokenizer, utf8, out, rf"bad\.en:{line}: invalid UTF-8")

    missing = {"train": (train_src, tmp_path / "nope.en")}
    _expect_failure(tokenizer, missing, out, r"nope\.en: not found")

    message = (
        r"^train: no sentence pair left after filtering \(300 lines, 0 pairs kept; "
        r"dropped 0 empty, 300 longer than 2 tokens.*raise data\.max_len"
    )
    _expect_failure(tokenizer, {"train": splits["train"]}, out, message, max_len=2)

    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    _expect_failure(tokenizer, {"test": (empty, empty)}, out, "test: .* are empty")


def test_refuses_to_replace_a_foreign_directory(tokenizer: Tokenizer, splits, tmp_path: Path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(DataError, match="exists and does not hold binarised data"):
        binarize(tokenizer, {"dev": splits["dev"]}, out, workers=1)
    assert (out / "thesis.tex").exists()


def test_recovery_after_a_crash_mid_swap(tokenizer: Tokenizer, splits, tmp_path: Path) -> None:
    out = tmp_path / "data"
    binarize(tokenizer, {"dev": splits["dev"]}, out, workers=1)
    expected = _snapshot(out)
    # SIGKILL between the two renames: OUT.old holds the previous output, and a stale
    # partial dir of the dead process is lying around
    os.replace(out, tmp_path / "data.old")
    stale = tmp_path / "data.partial-999999999"
    stale.mkdir()
    (stale / "dev.src.bin").write_bytes(b"half")
    assert load_manifest(out).splits.keys() == {"dev"}
    assert _snapshot(out) == expected and not (tmp_path / "data.old").exists()

    # nothing complete: only a partial dir
    os.replace(out, tmp_path / "elsewhere")
    assert load_manifest(out) is None
    with pytest.raises(DataError, match="no binarised data"):
        ParallelData(out, "dev")

    binarize(tokenizer, {"test": splits["test"]}, out, workers=1)  # removes the stale dir
    assert _siblings(out) == ["data", "elsewhere"]
    # a crash after both renames leaves a complete OUT and a leftover OUT.old
    shutil.copytree(out, tmp_path / "data.old")
    binarize(tokenizer, {"dev": splits["dev"]}, out, workers=1)
    assert _siblings(out) == ["data", "elsewhere"]
    assert load_manifest(out).splits.keys() == {"dev"}


def _binarize_forever(tokenizer: Tokenizer, splits, out: Path) -> None:
    while True:
        binarize(tokenizer, splits, out, workers=1)


@pytest.mark.skipif(sys.platform != "linux", reason="uses fork")
def test_sigkill_at_any_moment_leaves_a_complete_output(
    tokenizer: Tokenizer, splits, tmp_path: Path
) -> None:
    out = tmp_path / "data"
    small = {"dev": splits["dev"], "test": splits["test"]}
    binarize(tokenizer, small, out, workers=1)
    expected = _snapshot(out)
    for delay in (0.01, 0.03, 0.05, 0.08, 0.13, 0.21):
        child = multiprocessing.get_context("fork").Process(
            target=_binarize_forever, args=(tokenizer, small, out)
        )
        child.start()
        time.sleep(delay)
        child.kill()  # SIGKILL: no cleanup runs
        child.join()
        assert load_manifest(out) is not None
        assert _snapshot(out) == expected
        assert len(ParallelData(out, "test")) == 60
    binarize(tokenizer, small, out, workers=1)  # and the next run cleans up after the dead
    assert _siblings(out) == ["data"]


def test_parallel_data_errors(binarized: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no split 'valid' .*\(has: train, dev, test\)"):
        ParallelData(binarized, "valid")
    copy = tmp_path / "copy"
    shutil.copytree(binarized, copy)
    with open(copy / "dev.tgt.bin", "r+b") as f:
        f.truncate(10)
    with pytest.raises(DataError, match=r"dev\.tgt is corrupt; binarise again"):
        ParallelData(copy, "dev")


def test_bad_split_names_are_config_errors(tokenizer: Tokenizer, splits, tmp_path: Path) -> None:
    out = tmp_path / "data"
    with pytest.raises(ConfigError, match="^binarize needs at least one split$"):
        binarize(tokenizer, {}, out, workers=1)
    with pytest.raises(ConfigError, match=r"^split name 'a/b': use letters, digits, '_' or '-'$"):
        binarize(tokenizer, {"a/b": splits["dev"]}, out, workers=1)
    assert not out.exists()


# --------------------------------------------------------------------------- the manifest it writes


def test_binarised_manifest_is_rewritten_byte_for_byte(binarized: Path, tmp_path: Path) -> None:
    manifest = load_manifest(binarized)
    manifest.write(tmp_path)
    assert (tmp_path / "manifest.json").read_bytes() == (binarized / "manifest.json").read_bytes()


def test_training_fingerprints(binarized: Path, tokenizer: Tokenizer, splits) -> None:
    assert load_manifest(binarized).training_fingerprints() == {
        "tokenizer": tokenizer.fingerprint(),
        "train.src": file_fingerprint(splits["train"][0]),
        "train.tgt": file_fingerprint(splits["train"][1]),
    }
    dev = small_manifest().splits["dev"]
    without_train = Manifest("uint16", "f" * 64, 255, 3.0, {"dev": dev})
    with pytest.raises(DataError, match=r"no 'train' split \(has: dev\)"):
        without_train.training_fingerprints()


def test_recipe_training_prints_are_what_binarize_records(tmp_path: Path) -> None:
    """A run is checked against its checkpoints before binarize runs (pipeline.py), from
    the recipe's files: that must be what the manifest will say, tags and links too."""
    files = reverse_task(tmp_path / "text", n_train=60, n_test=5)
    raw = reverse_recipe(files)
    first = raw["data"]["train"]
    second = {**first, "tag": "BT",
              "alignments": str(reverse_links(files["train"][0], tmp_path / "links"))}
    raw["data"]["train"] = [first, second]
    recipe = recipe_from_dict(raw, name="prints")
    tokenizer, fingerprints = prepare(recipe, tmp_path / "run")
    assert set(fingerprints) > {"train-1.src", "train-2.tag", "train-2.links"}
    assert {**recipe_training_prints(recipe), "tokenizer": tokenizer.fingerprint()} == \
        fingerprints
