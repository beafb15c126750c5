"""The directory binarize writes: what a split is made from, the splits of the old
directory that can be kept as they are, and the swap of the new directory in for the old.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
from pathlib import Path

import numpy as np

from mtkit.data.links import SIDE as LINKS
from mtkit.data.manifest import MANIFEST_NAME, Manifest, SourceFile, SplitInfo, load_manifest
from mtkit.errors import DataError
from mtkit.files.atomic import old_dir, recover_dir
from mtkit.files.textio import file_fingerprint


@dataclasses.dataclass(frozen=True)
class SplitInput:
    """What one split is made from: its files (src, tgt, alignments or None), as
    fingerprinted before encoding, and its tag."""

    name: str
    paths: tuple[Path, Path, Path | None]
    files: tuple[SourceFile, SourceFile, SourceFile | None]
    tag: str | None

    @classmethod
    def of(cls, name: str, paths: tuple[Path, Path, Path | None], tag: str | None
           ) -> SplitInput:
        return cls(name, paths, (_source(paths[0]), _source(paths[1]),
                                 None if paths[2] is None else _source(paths[2])), tag)


def _source(path: Path) -> SourceFile:
    return SourceFile(os.path.abspath(path), file_fingerprint(path))


def reusable_split(old: Manifest | None, old_dir: Path, dtype: np.dtype, tokenizer: str,
                   filters: tuple[int, float], split: SplitInput, filtered: bool
                   ) -> tuple[str, SplitInfo] | None:
    """A split of the old directory made from the same files in the same way, if any:
    (its name, its info)."""
    if old is None or (old.dtype, old.tokenizer) != (dtype.name, tokenizer):
        return None
    if filtered and (old.max_len, old.max_ratio) != filters:
        return None
    fingerprints = tuple(None if f is None else f.fingerprint for f in split.files)
    for name, info in old.splits.items():
        if ((info.src.fingerprint, info.tgt.fingerprint,
             None if info.links is None else info.links.fingerprint) == fingerprints
                and (info.tag, info.filtered) == (split.tag, filtered)
                and all((old_dir / f"{name}{suffix}").is_file()
                        for suffix in _split_files(info))):
            return name, info
    return None


def _split_files(info: SplitInfo) -> tuple[str, ...]:
    """The suffixes of a split's files."""
    links = () if info.links is None else (f".{LINKS}.bin", f".{LINKS}.idx")
    return (".src.bin", ".src.idx", ".tgt.bin", ".tgt.idx", ".lines", *links)


def link_split(old_dir: Path, old: tuple[str, SplitInfo], new_dir: Path, name: str) -> None:
    """The old split's files into new_dir under `name`: hard links (the files are never
    written again once made), or copies where the filesystem has no links."""
    for suffix in _split_files(old[1]):
        source, target = old_dir / f"{old[0]}{suffix}", new_dir / f"{name}{suffix}"
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)


def old_manifest(out_dir: Path) -> Manifest | None:
    try:
        return load_manifest(out_dir) if out_dir.is_dir() else None
    except DataError:  # unreadable or of a newer mtkit: nothing to reuse, all is rebuilt
        return None


# --------------------------------------------------------------------------- the output directory
#
# OUT is swapped in by atomic.replace_dir; the new data is built in OUT.partial-PID, so
# that concurrent runs and a dead run's leftovers are told apart by the PID.


def prepare_out_dir(out_dir: Path) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(out_dir)
    if out_dir.exists() and not _is_ours(out_dir):
        raise DataError(
            f"{out_dir}: exists and does not hold binarised data; "
            "choose another output directory or remove it"
        )
    old = old_dir(out_dir)
    if old.exists():  # OUT is complete, so OUT.old is a leftover of an interrupted cleanup
        shutil.rmtree(old)
    for stale in out_dir.parent.glob(f"{glob.escape(out_dir.name)}.partial-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not _pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _is_ours(path: Path) -> bool:
    """Only an empty directory or one we wrote may be replaced (and its old copy deleted)."""
    return path.is_dir() and ((path / MANIFEST_NAME).is_file() or not any(path.iterdir()))


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
