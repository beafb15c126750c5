"""Reading a Hugging Face model's weight files: safetensors (one file, or shards with an
index) or a PyTorch `pytorch_model.bin`, as plain fp32 tensors by name.

Safetensors is read here rather than through the `safetensors` package: the format is an
8-byte little-endian header length, a JSON header (name -> dtype, shape, byte offsets) and
the raw little-endian arrays, a few lines to read exactly, and mtkit then needs no extra
dependency to import a model. `.bin` files are read with torch.load(weights_only=True),
which refuses pickled objects that could run code.
"""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path
from typing import BinaryIO

import torch

from mtkit.errors import CheckpointError

SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
SINGLE, INDEX, PICKLE = "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"


def weight_files(model_dir: Path) -> list[Path]:
    """The files that hold the model's weights, in the order found; CheckpointError if none."""
    if (model_dir / SINGLE).is_file():
        return [model_dir / SINGLE]
    if (model_dir / INDEX).is_file():
        try:
            index = json.loads((model_dir / INDEX).read_text(encoding="utf-8"))
            shards = sorted(set(index["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError):
            raise CheckpointError(f"{model_dir / INDEX}: not a safetensors index") from None
        missing = [s for s in shards if not (model_dir / s).is_file()]
        if missing:
            raise CheckpointError(f"{model_dir}: the shard {missing[0]} the index names is "
                                  "missing")
        return [model_dir / s for s in shards]
    if (model_dir / PICKLE).is_file():
        return [model_dir / PICKLE]
    raise CheckpointError(f"{model_dir}: no weights ({SINGLE}, {INDEX} with its shards, or "
                          f"{PICKLE})")


def read_weights(files: list[Path]) -> dict[str, torch.Tensor]:
    """Every tensor of the files by name; floating-point ones as fp32 (fp16/bf16 widened)."""
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        part = read_safetensors(path) if path.suffix == ".safetensors" else _read_pickle(path)
        tensors.update(part)
    return {name: t.float() if t.is_floating_point() else t for name, t in tensors.items()}


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of one file, each read into memory of its own: the file is never held
    whole, so a model needs its own size in memory, not twice that."""
    try:
        with path.open("rb") as file:
            return _read_tensors(file, path, path.stat().st_size)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _read_tensors(file: BinaryIO, path: Path, total: int) -> dict[str, torch.Tensor]:
    damaged = CheckpointError(f"{path}: truncated or damaged safetensors file")
    head = file.read(8)
    if len(head) < 8:
        raise damaged
    (size,) = struct.unpack("<Q", head)
    if 8 + size > total:
        raise damaged
    try:
        header = json.loads(file.read(size).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise damaged from None
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_DTYPES[entry["dtype"]]
            begin, end = (8 + size + int(o) for o in entry["data_offsets"])
            shape = [int(n) for n in entry["shape"]]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: {name}: unsupported or damaged entry "
                                  f"({entry.get('dtype') if isinstance(entry, dict) else entry})"
                                  ) from None
        if end > total or begin > end:
            raise damaged
        data = bytearray(end - begin)  # writable memory the tensor owns
        file.seek(begin)
        if file.readinto(data) != len(data):
            raise damaged
        flat = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
        if flat.numel() != _count(shape):
            raise damaged
        out[name] = flat.view(shape)
    return out


def _count(shape: list[int]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def _read_pickle(path: Path) -> dict[str, torch.Tensor]:
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(f"{path}: refused: the file holds pickled objects that could run "
                              "code; mtkit loads only plain tensors") from None
    except Exception as exc:  # noqa: BLE001 - a damaged file fails in many ways inside torch
        raise CheckpointError(f"{path}: truncated or damaged ({type(exc).__name__})") from None
    if not isinstance(raw, dict) or not all(isinstance(t, torch.Tensor) for t in raw.values()):
        raise CheckpointError(f"{path}: not a state dict of tensors")
    return raw
