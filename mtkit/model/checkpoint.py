"""Model bundles on disk: the `Bundle` dataclass, safe load, atomic save, streaming average.

A checkpoint is self-contained: the weights, the resolved recipe, the SentencePiece
model(s) as bytes, the fingerprints of the training data, and (for resumable
checkpoints) the full training state. `mtkit translate -m FILE` needs nothing else.

In memory a bundle is a `Bundle`, its recipe a parsed `Recipe` (parsed once, here); the
plain dict that torch.save writes exists only in `to_dict` / `from_dict`. Files are loaded
with `torch.load(weights_only=True)`, which refuses anything that could run code, and
written atomically (atomic.py): a crash mid-write never leaves a half file.

Compatibility: every file mtkit writes is format 1 (FORMAT_VERSION), with the keys of
`to_dict`; those only written when they hold something (train_state, trained, ema,
averaged_from, parent, vocab, imported) are read as absent otherwise, and a Progress field
a file lacks takes its default; nothing else is optional. A later format gets one function here that
turns a format-1 dict into its own shape before `from_dict` reads it, so that the readers
never branch on a file's age.
"""

from __future__ import annotations

import dataclasses
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mtkit.config import Recipe, recipe_from_dict
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import CheckpointError
from mtkit.files.atomic import atomic_write
from mtkit.model.transformer import Transformer
from mtkit.progress import progress_bar
from mtkit.version import __version__

FORMAT = "mtkit-checkpoint"
FORMAT_VERSION = 1


@dataclass
class Progress:
    """Everything besides weights and optimiser that a resumed run needs."""

    step: int = 0
    epoch: int = 1
    elapsed: float = 0.0  # training wall clock, summed over all resumed runs
    best_score: float | None = None
    best_step: int = 0
    validations_without_improvement: int = 0
    top: list[tuple[float, int]] = field(default_factory=list)  # (score, step), best first
    sampler: dict[str, int] = field(default_factory=dict)
    finished: str = ""  # why training stopped; empty while it can go on
    tgt_tokens: int = 0  # target tokens trained on (non-pad, EOS included), all updates
    # the job that last trained (set when training starts): processes, and max_tokens x
    # update_freq x processes; a resumed run is checked against them
    world_size: int = 0
    tokens_per_update: int = 0
    precision: str = ""  # train.precision as it ran (auto resolved); "": not recorded
    horizon: int = 0  # the update train.schedule ends at; 0: none, or not estimated yet
    # a max_time budget's horizon is revised as training goes (train/schedule.py): the
    # last check of it (update, training clock), which the speed is measured from, and the
    # seconds an update weighted toward recent checks (0: none yet); where the current
    # decay segment starts (update, rate; update 0: none, the schedule's own shape); and
    # each estimate and revision as (update, new horizon)
    checked_step: int = 0
    checked_elapsed: float = 0.0
    seconds_per_update: float = 0.0
    decay_from_step: int = 0
    decay_from_lr: float = 0.0
    revisions: list[tuple[int, int]] = field(default_factory=list)
    # the training sums since the last train log line (train/meter.py), so that a run
    # resumed between two lines logs the next as the uninterrupted run does
    log_window: dict[str, Any] = field(default_factory=dict)

    def record_validation(self, score: float) -> bool:
        """Count a validation (higher score = better) for best-model and patience; True
        when it is the best so far."""
        improved = self.best_score is None or score > self.best_score
        if improved:
            self.best_score, self.best_step = score, self.step
            self.validations_without_improvement = 0
        else:
            self.validations_without_improvement += 1
        return improved

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Progress:
        progress = cls(**raw)
        progress.top = [(float(score), int(step)) for score, step in progress.top]
        progress.revisions = [(int(step), int(horizon)) for step, horizon in progress.revisions]
        return progress


@dataclass(frozen=True)
class Trained:
    """How much training a model had: saved in every bundle, resumable or not."""

    updates: int
    epoch: int  # the epoch training was in (epochs count from 1)
    seconds: float  # training wall clock, summed over resumed runs
    tgt_tokens: int
    precision: str = ""  # of the last training job (fp32, bf16); "": not recorded

    @classmethod
    def from_progress(cls, progress: Progress) -> Trained:
        return cls(progress.step, progress.epoch, progress.elapsed, progress.tgt_tokens,
                   progress.precision)

    @property
    def tgt_tokens_per_s(self) -> float:
        return self.tgt_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class TrainState:
    """What a resumable checkpoint adds to a model bundle."""

    optimizer: dict[str, Any]  # torch's optimizer state_dict, in torch's own format
    progress: Progress
    rng: dict[str, Any]  # generator states: python, torch (and cuda)
    ema: dict[str, torch.Tensor] | None = None  # train.ema's averaged parameters


@dataclass(frozen=True)
class Parent:
    """The model a run started from (train.init_from): its lineage."""

    path: str
    fingerprint: str  # of the parent file's bytes (textio.file_fingerprint)


@dataclass(frozen=True)
class Imported:
    """Where an imported model came from (`mtkit import`)."""

    path: str  # the directory it was read from
    format: str  # what it was: "marian" (a Hugging Face MarianMTModel directory)
    name: str  # the model's own name (config.json's _name_or_path), or the directory's
    fingerprint: str  # of its weight file(s) (textio.file_fingerprint, combined)


@dataclass
class Bundle:
    weights: dict[str, torch.Tensor]  # the model's state_dict
    recipe: Recipe
    spm_src: bytes
    spm_tgt: bytes | None  # None: one joint model (spm_src) serves both sides
    data_fingerprints: dict[str, str]  # tokenizer and training files (manifest.py)
    train_state: TrainState | None = None
    trained: Trained | None = None  # None: not recorded (a bundle not made by training)
    averaged_from: list[str] = field(default_factory=list)
    parent: Parent | None = None  # the model train.init_from started this one from
    vocab: bytes | None = None  # an imported model's explicit vocabulary (data/vocab.py)
    imported: Imported | None = None  # where `mtkit import` read it from
    mtkit_version: str = __version__

    def tokenizer(self) -> Tokenizer:
        return Tokenizer.from_bytes(self.spm_src, self.spm_tgt, self.vocab)

    def model(self, tokenizer: Tokenizer | None = None, where: str = "model") -> Transformer:
        """The Transformer this bundle describes, with its weights, in eval mode (CPU)."""
        tokenizer = tokenizer or self.tokenizer()
        specials = tokenizer.specials
        model = Transformer(self.recipe.model, tokenizer.src_vocab_size,
                            tokenizer.tgt_vocab_size, specials.pad, specials.start)
        try:
            model.load_state_dict(self.weights)
        except RuntimeError:
            raise CheckpointError(f"{where}: weights do not match the model it describes") from None
        return model.eval()

    def same_vocabulary(self, other: Bundle) -> bool:
        return (self.spm_src, self.spm_tgt, self.vocab) == (
            other.spm_src, other.spm_tgt, other.vocab)

    def without_train_state(self) -> Bundle:
        return dataclasses.replace(self, train_state=None)

    # ----------------------------------------------------------------- the file boundary

    def to_dict(self) -> dict[str, Any]:
        raw: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "mtkit_version": self.mtkit_version,
            "recipe": self.recipe.to_dict(),
            "model": self.weights,
            "spm_src": self.spm_src,
            "spm_tgt": self.spm_tgt,
            "data_fingerprints": self.data_fingerprints,
        }
        if self.train_state is not None:
            state = self.train_state
            raw["train_state"] = {"optimizer": state.optimizer,
                                  "progress": dataclasses.asdict(state.progress),
                                  "rng": state.rng}
            if state.ema is not None:
                raw["train_state"]["ema"] = state.ema
        if self.trained is not None:
            raw["trained"] = dataclasses.asdict(self.trained)
        if self.averaged_from:
            raw["averaged_from"] = list(self.averaged_from)
        if self.parent is not None:
            raw["parent"] = dataclasses.asdict(self.parent)
        if self.vocab is not None:
            raw["vocab"] = self.vocab
        if self.imported is not None:
            raw["imported"] = dataclasses.asdict(self.imported)
        return raw

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str) -> Bundle:
        try:
            state = raw.get("train_state")
            return cls(
                weights=raw["model"],
                recipe=recipe_from_dict(raw["recipe"], where=where),
                spm_src=raw["spm_src"],
                spm_tgt=raw["spm_tgt"],
                data_fingerprints=dict(raw["data_fingerprints"]),
                train_state=None if state is None else TrainState(
                    state["optimizer"], Progress.from_dict(state["progress"]), state["rng"],
                    state.get("ema")),
                trained=Trained(**raw["trained"]) if "trained" in raw else None,
                averaged_from=list(raw.get("averaged_from", [])),
                parent=Parent(**raw["parent"]) if "parent" in raw else None,
                vocab=raw.get("vocab"),
                imported=Imported(**raw["imported"]) if "imported" in raw else None,
                mtkit_version=str(raw["mtkit_version"]),
            )
        except (KeyError, TypeError):
            raise CheckpointError(f"{where}: incomplete mtkit checkpoint; train it again") from None


def save_checkpoint(path: Path, bundle: Bundle) -> None:
    raw = bundle.to_dict()
    atomic_write(Path(path), lambda file: torch.save(raw, file))


def _not_a_model_file(path: Path) -> str:
    """Why `path`, which is not a regular file, cannot be loaded: what it is instead."""
    if (path / "mtkit.json").is_file():  # ct2.MARKER (ct2 imports this module)
        return (f"{path}: is a CTranslate2 export directory, expected an mtkit model file "
                "(give the model it was exported from, or translate it with --engine auto)")
    if (path / "config.json").is_file():
        return (f"{path}: is a Hugging Face model directory, expected an mtkit model file; "
                f"mtkit import {path} -o MODEL.pt makes one")
    if path.is_dir():
        return f"{path}: is a directory, expected a model file"
    if path.exists():
        return f"{path}: is not a regular file, expected a model file"
    return f"{path}: model file not found"


def load_checkpoint(path: str | Path, map_location: str = "cpu", mmap: bool = False) -> Bundle:
    """Load and check a bundle; every failure is one CheckpointError line. `mmap`: the
    tensors are read from the file only where they are used (for a look at the settings
    and fingerprints of a large checkpoint)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(_not_a_model_file(path))
    with open(path, "rb") as file:
        magic = file.read(4)
    if magic != b"PK\x03\x04":  # torch.save writes zip archives
        raise CheckpointError(f"{path}: not an mtkit checkpoint (not a PyTorch zip file)")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint (incomplete zip archive)")
    try:
        raw = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = next((line for line in lines if "Unsupported" in line), lines[0] if lines else "")
        raise CheckpointError(
            f"{path}: refused: the file holds pickled objects that could run code "
            f"({first[:120]}); mtkit loads only plain tensors and values"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a damaged file fails in many ways inside torch
        raise CheckpointError(
            f"{path}: truncated or corrupt checkpoint ({type(exc).__name__})"
        ) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an mtkit checkpoint (no mtkit format marker)")
    version = raw.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: written by a newer mtkit (format {version}, this mtkit {__version__} "
            f"reads up to {FORMAT_VERSION}); upgrade mtkit"
        )
    return Bundle.from_dict(raw, where=str(path))


def average_checkpoints(paths: list[Path]) -> Bundle:
    """Element-wise mean of the weights; keeps the first bundle's tokenizer and recipe.

    Streams: one checkpoint besides the running sum is in memory at a time.
    """
    if not paths:
        raise CheckpointError("average: no checkpoints given")
    first = load_checkpoint(paths[0]).without_train_state()
    # Tied weights (one tensor under several keys) are summed once and stay tied, so the
    # average is no larger on disk than the checkpoints are.
    shared = _tied_keys(first.weights)  # key -> the first key holding the same tensor
    total = {k: v.double() if v.is_floating_point() else v
             for k, v in first.weights.items() if shared[k] == k}
    trained = first.trained
    bar = progress_bar(len(paths), "checkpoint", initial=1, enabled=len(paths) > 2)
    for path in paths[1:]:
        other = load_checkpoint(path)
        _check_compatible(paths[0], first, path, other)
        for key, value in other.weights.items():
            if value.is_floating_point() and shared[key] == key:
                total[key] += value.double()
        if other.trained is not None and (trained is None or
                                          other.trained.updates > trained.updates):
            trained = other.trained  # the average is as trained as its newest member
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    averaged = {}
    for key, value in total.items():
        dtype = first.weights[key].dtype
        averaged[key] = (value / len(paths)).to(dtype) if value.is_floating_point() else value
    averaged = {key: averaged[shared[key]] for key in first.weights}  # the file's key order
    return dataclasses.replace(first, weights=averaged, trained=trained,
                               averaged_from=[str(p) for p in paths])


def _tied_keys(weights: dict[str, torch.Tensor]) -> dict[str, str]:
    """Each key -> the first key whose tensor is the same view of the same memory."""
    first_key: dict[tuple, str] = {}
    shared = {}
    for key, value in weights.items():
        view = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape),
                value.stride())
        shared[key] = first_key.setdefault(view, key)
    return shared


def _check_compatible(path_a: Path, a: Bundle, path_b: Path, b: Bundle) -> None:
    advice = "average only checkpoints of one training run"
    if a.recipe.model != b.recipe.model:
        raise CheckpointError(
            f"average: {path_b} has a different model architecture than {path_a}; {advice}"
        )
    if not a.same_vocabulary(b):
        raise CheckpointError(f"average: {path_b} uses a different vocabulary than {path_a}; "
                              f"{advice}")
    shapes_a = {k: tuple(v.shape) for k, v in a.weights.items()}
    shapes_b = {k: tuple(v.shape) for k, v in b.weights.items()}
    if shapes_a != shapes_b:
        raise CheckpointError(f"average: {path_b} has different weight shapes than {path_a}")
