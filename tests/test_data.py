from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mtkit.data import (
    BatchSampler,
    ParallelData,
    _Encoder,
    binarize,
    count_lines,
    file_fingerprint,
    load_manifest,
    make_batch,
    read_lines,
    token_batches,
)
from mtkit.errors import DataError
from mtkit.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer


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


# --------------------------------------------------------------------------- text files


def test_read_lines_strips_only_the_terminator(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_bytes(b"\xef\xbb\xbf one \r\nsplit\xe2\x80\xa8not\n\n  last  ")
    expected = [" one ", "split\u2028not", "", "  last  "]  # BOM gone, U+2028 kept inside
    assert list(read_lines(path)) == expected
    assert count_lines(path) == 4
    gz = tmp_path / "x.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert list(read_lines(gz)) == expected and count_lines(gz) == 4
    (tmp_path / "empty.txt").write_bytes(b"")
    assert count_lines(tmp_path / "empty.txt") == 0


def test_read_lines_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nok\nma\xf1ana\n")
    with pytest.raises(DataError, match=r"bad\.txt:3: invalid UTF-8 .*fix or re-encode the file"):
        list(read_lines(bad))
    with pytest.raises(DataError, match=r"missing\.txt: not found"):
        list(read_lines(tmp_path / "missing.txt"))
    truncated = tmp_path / "t.gz"
    truncated.write_bytes(gzip.compress(b"hello\n" * 1000)[:40])
    with pytest.raises(DataError, match=r"t\.gz: cannot read"):
        list(read_lines(truncated))


def test_file_fingerprint(tmp_path: Path, data_dir: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copy(data_dir / "dev.en", copy)
    assert file_fingerprint(copy) == file_fingerprint(data_dir / "dev.en")
    assert file_fingerprint(copy) != file_fingerprint(data_dir / "dev.es")


# --------------------------------------------------------------------------- binarize


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
    assert manifest == json.loads((binarized / "manifest.json").read_text())
    assert (manifest["format"], manifest["version"], manifest["dtype"]) == (
        "mtkit-bin",
        1,
        "uint16",
    )
    assert manifest["tokenizer"] == tokenizer.fingerprint()
    train = manifest["splits"]["train"]
    assert train["lines"] == train["pairs"] == 300
    assert train["dropped"] == {"empty": 0, "too_long": 0, "ratio": 0}
    assert train["src_tokens"] == (binarized / "train.src.bin").stat().st_size // 2
    assert train["src"]["path"] == str(splits["train"][0].resolve())
    assert train["tgt"]["fingerprint"] == file_fingerprint(splits["train"][1])
    assert not manifest["splits"]["dev"]["filtered"]
    names = {p.name for p in binarized.iterdir()}
    assert names == {"manifest.json"} | {
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
    train = manifest["splits"]["train"]
    assert train["dropped"] == {"empty": 2, "too_long": 1, "ratio": 1}
    assert train["pairs"] == 2 and train["lines"] == 6
    kept = ParallelData(tmp_path / "out", "train")
    assert [kept.tgt(i).tolist() for i in range(2)] == tokenizer.encode_tgt(
        [pairs[0][1], pairs[5][1]]
    )
    dev = ParallelData(tmp_path / "out", "dev")  # dev keeps every line, even empty ones
    assert len(dev) == 6 and len(dev.src(1)) == 0 and len(dev.tgt(2)) == 0
    out, err = capsys.readouterr()
    assert out == ""  # stdout belongs to the CLI's results
    assert "train: 6 lines, 2 pairs kept; dropped 2 empty, 1 longer than 40 tokens, 1 " in err
    assert "dev: 6 lines, 6 pairs kept" in err


def test_workers_do_not_read_ahead(tokenizer: Tokenizer) -> None:
    pulled = 0

    def chunks():
        nonlocal pulled
        for _ in range(100):
            pulled += 1
            yield ["y fue la luz"], ["and there was light"]

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
    assert load_manifest(out)["splits"].keys() == {"dev"}
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
    assert load_manifest(out)["splits"].keys() == {"dev"}


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


# --------------------------------------------------------------------------- batching


@pytest.fixture(scope="module")
def lengths() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    src = rng.integers(0, 60, size=500)
    tgt = rng.integers(1, 60, size=500)
    src[7] = 400  # longer than the whole budget: a batch of its own
    return src, tgt


def _epoch(sampler: BatchSampler, epoch: int) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_batches_respect_the_budget_and_cover_every_pair(lengths) -> None:
    src, tgt = lengths
    sampler = BatchSampler(src, tgt, max_tokens=300, seed=3)
    batches = _epoch(sampler, 0)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for batch in batches:
        width = max(max(src[i], tgt[i]) + 1 for i in batch)
        assert len(batch) * width <= 300 or batch == [7]
    assert [7] in batches


def test_epochs_differ_but_are_reproducible(lengths) -> None:
    src, tgt = lengths
    sampler = BatchSampler(src, tgt, max_tokens=300, seed=3)
    first, second = _epoch(sampler, 0), _epoch(sampler, 1)
    assert first != second
    assert _epoch(BatchSampler(src, tgt, max_tokens=300, seed=3), 1) == second
    assert _epoch(BatchSampler(src, tgt, max_tokens=300, seed=4), 1) != second


def test_restoring_a_position_continues_the_same_sequence(lengths) -> None:
    src, tgt = lengths
    sampler = BatchSampler(src, tgt, max_tokens=300, seed=3)
    sampler.set_epoch(2)
    iterator = iter(sampler)
    seen = [next(iterator) for _ in range(5)]
    state = sampler.state_dict()
    assert state == {"epoch": 2, "position": 5}
    rest = list(iterator)
    assert sampler.state_dict() == {"epoch": 3, "position": 0}  # a finished epoch moves on
    next_epoch = list(sampler)

    restored = BatchSampler(src, tgt, max_tokens=300, seed=3)
    restored.load_state_dict(state)
    restored.set_epoch(2)  # a training loop calls this on resume; it must keep the position
    assert list(restored) == rest
    restored.set_epoch(3)
    assert list(restored) == next_epoch
    assert seen + rest == _epoch(BatchSampler(src, tgt, 300, seed=3), 2)


def test_sharding(lengths) -> None:
    src, tgt = lengths
    full = _epoch(BatchSampler(src, tgt, max_tokens=300, seed=3), 0)
    shards = [
        _epoch(BatchSampler(src, tgt, max_tokens=300, seed=3, rank=r, world_size=2), 0)
        for r in (0, 1)
    ]
    assert len(shards[0]) == len(shards[1]) == len(full) // 2
    assert not {i for b in shards[0] for i in b} & {i for b in shards[1] for i in b}
    usable = full[: 2 * (len(full) // 2)]  # truncated so both ranks get as many batches
    assert sorted(shards[0] + shards[1]) == sorted(usable)
    assert shards[0] == usable[0::2] and shards[1] == usable[1::2]


def test_unshuffled_batches_are_sorted_and_fixed(lengths) -> None:
    src, tgt = lengths
    sampler = BatchSampler(src, tgt, max_tokens=300, seed=3, shuffle=False)
    first, again = list(sampler), list(sampler)  # reusable, e.g. for every validation
    assert first == again == _epoch(BatchSampler(src, tgt, 300, seed=9, shuffle=False), 5)
    widths = [max(max(src[i], tgt[i]) for i in b) for b in first]
    assert widths == sorted(widths)


def test_token_batches() -> None:
    lengths = [5, 50, 0, 12, 12, 7, 200, 3]
    batches = token_batches(lengths, max_tokens=60)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [6]  # longest first; too long for the budget, so alone
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 60 or len(batch) == 1
    order = [i for b in batches for i in b]
    assert [lengths[i] for i in order] == sorted(lengths, reverse=True)


def test_make_batch(tokenizer: Tokenizer, tmp_path: Path) -> None:
    src, tgt = tmp_path / "s", tmp_path / "t"
    src.write_text("y fue la luz\n\nen el principio crió Dios\n", encoding="utf-8")
    tgt.write_text("and there was light\nempty source\n\n", encoding="utf-8")
    binarize(tokenizer, {"dev": (src, tgt)}, tmp_path / "out", workers=1)
    data = ParallelData(tmp_path / "out", "dev")
    batch = make_batch(data, [0, 1, 2])
    s_len, t_len = data.src_lens.tolist(), data.tgt_lens.tolist()
    assert batch.src.shape == (3, max(s_len) + 1) and batch.src.dtype == torch.long
    assert batch.tgt_in.shape == batch.tgt_out.shape == (3, max(t_len) + 1)
    assert batch.ntokens == sum(t_len) + 3 == int((batch.tgt_out != PAD_ID).sum())
    for row in range(3):
        ids, n = data.src(row).tolist(), s_len[row]
        assert batch.src[row].tolist() == ids + [EOS_ID] + [PAD_ID] * (batch.src.shape[1] - n - 1)
        ids, m = data.tgt(row).tolist(), t_len[row]
        pad = [PAD_ID] * (batch.tgt_out.shape[1] - m - 1)
        assert batch.tgt_in[row].tolist() == [BOS_ID] + ids + pad
        assert batch.tgt_out[row].tolist() == ids + [EOS_ID] + pad
    assert batch.src[1].tolist()[:1] == [EOS_ID]  # empty source line: EOS only
    assert len(batch.to("cpu")) == 3
