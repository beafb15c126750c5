"""The manifest of binarised data (`manifest.json`): what was encoded, how, and from what.

In code it is a tree of frozen dataclasses; the plain dict exists only at the file
boundary (to_dict / from_dict). A directory holds complete binarised data exactly when
its manifest.json is there: binarize writes it last.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtkit.errors import DataError
from mtkit.files.atomic import atomic_write_json, recover_dir

FORMAT_NAME = "mtkit-bin"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
DROP_REASONS = ("empty", "too_long", "ratio")
DTYPES = ("uint16", "int32")  # token id storage: uint16 while every id fits
TRAIN_PART = re.compile(r"train-[1-9]\d*")  # one of several training corpora


class _Malformed(Exception):
    """A field is missing or has the wrong type; from_dict turns it into a DataError."""


@dataclass(frozen=True)
class SourceFile:
    """A text file a split was encoded from."""

    path: str  # absolute, as it was when binarised
    fingerprint: str  # textio.file_fingerprint of its bytes

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "fingerprint": self.fingerprint}

    @classmethod
    def _from_dict(cls, raw: Any, key: str) -> SourceFile:
        raw = _field(raw, key, dict)
        return cls(path=_field(raw, "path", str), fingerprint=_field(raw, "fingerprint", str))


@dataclass(frozen=True)
class SplitInfo:
    """One binarised split: counts, what filtering dropped, and its two source files."""

    lines: int  # pairs read
    pairs: int  # pairs kept (= lines unless filtered)
    src_tokens: int
    tgt_tokens: int
    filtered: bool
    dropped: dict[str, int]  # reason (DROP_REASONS) -> pairs dropped for it
    src: SourceFile
    tgt: SourceFile
    tag: str | None = None  # the tag before each source line; no key in the file if none
    links: SourceFile | None = None  # the alignments file its piece links came from, if any

    def describe(self, max_len: int, max_ratio: float) -> str:
        """One line for the log: what was kept and, if filtered, what was dropped why."""
        text = f"{self.lines} lines, {self.pairs} pairs kept"
        if self.tag is not None:
            text += f", tagged <{self.tag}>"
        if self.links is not None:
            text += ", word links kept"
        if self.filtered:
            d = self.dropped
            text += (
                f"; dropped {d['empty']} empty, {d['too_long']} longer than {max_len} tokens, "
                f"{d['ratio']} with length ratio above {max_ratio:g}"
            )
        return text + f"; {self.src_tokens} + {self.tgt_tokens} tokens"

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "pairs": self.pairs,
            "src_tokens": self.src_tokens,
            "tgt_tokens": self.tgt_tokens,
            "filtered": self.filtered,
            "dropped": dict(self.dropped),
            "src": self.src.to_dict(),
            "tgt": self.tgt.to_dict(),
            **({} if self.tag is None else {"tag": self.tag}),
            **({} if self.links is None else {"links": self.links.to_dict()}),
        }

    @classmethod
    def _from_dict(cls, raw: dict[str, Any]) -> SplitInfo:
        dropped = _field(raw, "dropped", dict)
        if set(dropped) != set(DROP_REASONS) or not all(_is_int(n) for n in dropped.values()):
            raise _Malformed(f"'dropped' must count {', '.join(DROP_REASONS)}")
        return cls(
            lines=_field(raw, "lines", int),
            pairs=_field(raw, "pairs", int),
            src_tokens=_field(raw, "src_tokens", int),
            tgt_tokens=_field(raw, "tgt_tokens", int),
            filtered=_field(raw, "filtered", bool),
            dropped=dict(dropped),
            src=SourceFile._from_dict(raw, "src"),
            tgt=SourceFile._from_dict(raw, "tgt"),
            tag=_field(raw, "tag", str) if "tag" in raw else None,
            links=SourceFile._from_dict(raw, "links") if "links" in raw else None,
        )


@dataclass(frozen=True)
class Manifest:
    """Everything binarize recorded about a directory of binarised data."""

    dtype: str  # numpy dtype name of the stored token ids, one of DTYPES
    tokenizer: str  # Tokenizer.fingerprint() of the tokenizer that encoded it
    max_len: int  # the filters applied to the filtered splits
    max_ratio: float
    splits: dict[str, SplitInfo]  # in the order they were binarised

    def training_splits(self) -> list[str]:
        """The training corpora: split 'train', or 'train-1', 'train-2', ... for several."""
        names = [n for n in self.splits if n == "train" or TRAIN_PART.fullmatch(n)]
        if not names:
            have = ", ".join(self.splits)
            raise DataError(f"the binarised data has no 'train' split (has: {have})")
        return names

    def training_fingerprints(self) -> dict[str, str]:
        """What identifies the training data in checkpoints: tokenizer, train files, the
        tags of tagged splits and the alignments of aligned ones (a split without adds no
        key, so its runs' keys never change and they resume)."""
        prints = {"tokenizer": self.tokenizer}
        for name in self.training_splits():
            split = self.splits[name]
            prints[f"{name}.src"] = split.src.fingerprint
            prints[f"{name}.tgt"] = split.tgt.fingerprint
            if split.tag is not None:
                prints[f"{name}.tag"] = split.tag
            if split.links is not None:
                prints[f"{name}.links"] = split.links.fingerprint
        return prints

    def to_dict(self) -> dict[str, Any]:
        """The manifest.json content; the key order is the file's."""
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "dtype": self.dtype,
            "tokenizer": self.tokenizer,
            "max_len": self.max_len,
            "max_ratio": self.max_ratio,
            "splits": {name: split.to_dict() for name, split in self.splits.items()},
        }

    @classmethod
    def from_dict(cls, raw: Any, where: str | Path) -> Manifest:
        """Parse manifest.json content; `where` (the data directory) starts every error."""
        if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
            raise DataError(f"{where}: {MANIFEST_NAME} does not describe mtkit binarised data")
        version = raw.get("version", 0)
        if _is_int(version) and version > FORMAT_VERSION:
            raise DataError(
                f"{where}: binarised by a newer mtkit (format version {version}); "
                "upgrade mtkit or binarise again"
            )
        try:
            if not _is_int(version):
                raise _Malformed("'version' must be an integer")
            dtype = _field(raw, "dtype", str)
            if dtype not in DTYPES:
                raise _Malformed(f"unknown dtype {dtype!r}")
            return cls(
                dtype=dtype,
                tokenizer=_field(raw, "tokenizer", str),
                max_len=_field(raw, "max_len", int),
                max_ratio=_field(raw, "max_ratio", float),
                splits=_splits_from_dict(_field(raw, "splits", dict)),
            )
        except _Malformed as exc:
            raise DataError(
                f"{where}: {MANIFEST_NAME} is malformed ({exc}); binarise again"
            ) from None

    def write(self, out_dir: Path) -> None:
        """Write `out_dir`/manifest.json atomically (the directory must exist)."""
        atomic_write_json(Path(out_dir) / MANIFEST_NAME, self.to_dict())


def load_manifest(out_dir: Path) -> Manifest | None:
    """The manifest of complete binarised data in `out_dir`, or None if there is none.

    No manifest, unreadable or not JSON, or not ours: None (so binarising again replaces
    it). Ours but from a newer mtkit, or with fields missing or mistyped: a DataError.
    """
    out_dir = Path(out_dir)
    recover_dir(out_dir)
    try:
        raw = json.loads((out_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        return None
    return Manifest.from_dict(raw, out_dir)


def _splits_from_dict(raw: dict[str, Any]) -> dict[str, SplitInfo]:
    splits = {}
    for name in raw:
        try:
            splits[name] = SplitInfo._from_dict(_field(raw, name, dict))
        except _Malformed as exc:
            raise _Malformed(f"split {name!r}: {exc}") from None
    return splits


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field(raw: dict[str, Any], key: str, kind: type) -> Any:
    """raw[key], checked to be a `kind` (an int is a float too, a bool is not an int)."""
    if key not in raw:
        raise _Malformed(f"no {key!r}")
    value = raw[key]
    if kind is int:
        ok = _is_int(value)
    elif kind is float:
        ok = _is_int(value) or isinstance(value, float)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise _Malformed(f"{key!r} must be {_KIND_NAMES[kind]}")
    return value


_KIND_NAMES = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    dict: "an object",
}
