"""Model bundles on disk: atomic save, safe load, streaming average.

A checkpoint is self-contained: the weights, the resolved recipe, the SentencePiece
model(s) as bytes, the fingerprints of the training data, and (for resumable
checkpoints) the full training state. `mtkit translate -m FILE` needs nothing else.

Files are loaded with `torch.load(weights_only=True)`, which refuses anything that
could run code, and written atomically: a crash mid-write never leaves a half file
under the real name.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from . import __version__
from .errors import CheckpointError

FORMAT = "mtkit-checkpoint"
FORMAT_VERSION = 1


def make_bundle(
    model_state: dict[str, torch.Tensor],
    recipe: dict[str, Any],
    spm_src: bytes,
    spm_tgt: bytes | None,
    data_fingerprints: dict[str, str],
    train_state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    bundle = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "mtkit_version": __version__,
        "recipe": recipe,
        "model": model_state,
        "spm_src": spm_src,
        "spm_tgt": spm_tgt,
        "data_fingerprints": data_fingerprints,
    }
    if train_state is not None:
        bundle["train_state"] = train_state
    return bundle


def atomic_write(path: Path, write: Any) -> None:
    """Call write(file) on a temporary file next to `path`, fsync it, then rename it over.

    On any error (disk full, read-only directory) the temporary file is removed and the
    previous file under `path` is left as it was.
    """
    path = Path(path)
    tmp_name = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp_name, path)
        tmp_name = None
        _fsync_dir(path.parent)
    except OSError as exc:
        raise CheckpointError(
            f"{path}: cannot write ({exc.strerror or exc}); the previous file, if any, is intact"
        ) from None
    finally:
        if tmp_name is not None and os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(path: Path, bundle: dict[str, Any]) -> None:
    atomic_write(path, lambda file: torch.save(bundle, file))


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    """Load and check a bundle; every failure is one CheckpointError line."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: model file not found")
    with open(path, "rb") as file:
        magic = file.read(4)
    if magic != b"PK\x03\x04":  # torch.save writes zip archives
        raise CheckpointError(f"{path}: not an mtkit checkpoint (not a PyTorch zip file)")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint (incomplete zip archive)")
    try:
        bundle = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = next((line for line in lines if "Unsupported" in line), lines[0] if lines else "")
        first = first[:120]
        raise CheckpointError(
            f"{path}: refused: the file holds pickled objects that could run code ({first}); "
            "mtkit loads only plain tensors and values"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a damaged file fails in many ways inside torch
        raise CheckpointError(
            f"{path}: truncated or corrupt checkpoint ({type(exc).__name__})"
        ) from None
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an mtkit checkpoint (no mtkit format marker)")
    version = bundle.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: written by a newer mtkit (format {version}, this mtkit {__version__} "
            f"reads up to {FORMAT_VERSION}); upgrade mtkit"
        )
    return bundle


def without_train_state(bundle: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in bundle.items() if k != "train_state"}


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """Element-wise mean of the weights; keeps the first bundle's tokenizer and recipe.

    Streams: one checkpoint besides the running sum is in memory at a time.
    """
    if not paths:
        raise CheckpointError("average: no checkpoints given")
    first = without_train_state(load_checkpoint(paths[0]))
    total = {k: v.double() if v.is_floating_point() else v for k, v in first["model"].items()}
    for path in paths[1:]:
        other = load_checkpoint(path)
        _check_compatible(paths[0], first, path, other)
        for key, value in other["model"].items():
            if value.is_floating_point():
                total[key] += value.double()
    averaged = {}
    for key, value in total.items():
        dtype = first["model"][key].dtype
        averaged[key] = (value / len(paths)).to(dtype) if value.is_floating_point() else value
    first["model"] = averaged
    first["averaged_from"] = [str(p) for p in paths]
    return first


def _check_compatible(path_a: Path, a: dict, path_b: Path, b: dict) -> None:
    if a["recipe"]["model"] != b["recipe"]["model"]:
        raise CheckpointError(
            f"average: {path_b} has a different model architecture than {path_a}; "
            "average only checkpoints of one training run"
        )
    if a["spm_src"] != b["spm_src"] or a["spm_tgt"] != b["spm_tgt"]:
        raise CheckpointError(
            f"average: {path_b} uses a different vocabulary than {path_a}; "
            "average only checkpoints of one training run"
        )
    shapes_a = {k: tuple(v.shape) for k, v in a["model"].items()}
    shapes_b = {k: tuple(v.shape) for k, v in b["model"].items()}
    if shapes_a != shapes_b:
        raise CheckpointError(f"average: {path_b} has different weight shapes than {path_a}")
