"""A run's tokenizer on disk: trained from its recipe, given by it (`tokenizer.model`), or
written from a checkpoint's bytes, in the files a run keeps (tokenizer.py reads them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtkit.config import Recipe
from mtkit.data.tokenizer import VOCAB_FILE, Tokenizer, train_sentencepiece
from mtkit.errors import ConfigError, DataError
from mtkit.files.atomic import atomic_write_bytes
from mtkit.files.textio import file_fingerprint


def model_paths(out_dir: Path, joint: bool) -> tuple[Path, Path | None]:
    if joint:
        return out_dir / "spm.model", None
    return out_dir / "spm.src.model", out_dir / "spm.tgt.model"


def train_recipe_tokenizer(recipe: Recipe, out_dir: Path) -> Tokenizer:
    """Train the recipe's tokenizer on its training data into `out_dir`."""
    t, corpora = recipe.tokenizer, recipe.data.train
    options = dict(
        vocab_size=t.vocab_size,
        model_type=t.model_type,
        character_coverage=t.character_coverage,
        input_sentence_size=t.input_sentence_size,
        seed=t.seed,
    )
    srcs, tgts = [c.src for c in corpora], [c.tgt for c in corpora]
    out_dir = Path(out_dir)
    if t.joint:
        train_sentencepiece(srcs + tgts, out_dir / "spm", tags=recipe.data.tags, **options)
    else:
        train_sentencepiece(srcs, out_dir / "spm.src", tags=recipe.data.tags, **options)
        train_sentencepiece(tgts, out_dir / "spm.tgt", **options)
    return load_recipe_tokenizer(out_dir, t.joint)


def given_tokenizer(recipe: Recipe) -> Tokenizer:
    """The SentencePiece model(s) tokenizer.model names, checked against the recipe (its
    `joint` and its tags); ConfigError naming the key otherwise."""
    path, joint = recipe.tokenizer.model, recipe.tokenizer.joint
    if path is None:
        raise ValueError("the recipe has no tokenizer.model")  # a bug: callers check
    if path.is_dir():
        src, tgt = model_paths(path, joint)
    elif joint:
        src, tgt = path, None
    else:
        raise ConfigError(f"tokenizer.model: {path} is one model; with tokenizer.joint: false "
                          "name a directory holding spm.src.model and spm.tgt.model")
    try:
        tokenizer = Tokenizer.from_files(src, tgt)
    except DataError as exc:
        raise ConfigError(f"tokenizer.model: {exc}") from None
    require_tags(tokenizer, recipe.data.tags, f"tokenizer.model: {src}")
    return tokenizer


def require_tags(tokenizer: Tokenizer, tags: tuple[str, ...], where: str) -> None:
    """ConfigError unless a SentencePiece model made elsewhere holds the recipe's tags."""
    missing = [tag for tag in tags if tag not in tokenizer.tags]
    if missing:
        raise ConfigError(f"{where} has no tag {missing[0]} (its tags: "
                          f"{', '.join(tokenizer.tags) or 'none'}); a run can use only the "
                          "tags of a SentencePiece model it did not train")


def write_tokenizer(tokenizer: Tokenizer, out_dir: Path) -> Tokenizer:
    """Write a tokenizer's model(s) into out_dir, byte for byte, as a run keeps them (and
    its explicit vocabulary, if it has one)."""
    src_path, tgt_path = model_paths(Path(out_dir), tokenizer.tgt_bytes is None)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(src_path, tokenizer.src_bytes)
    if tgt_path is not None:
        atomic_write_bytes(tgt_path, tokenizer.tgt_bytes)
    if tokenizer.vocab_bytes is not None:
        atomic_write_bytes(Path(out_dir) / VOCAB_FILE, tokenizer.vocab_bytes)
    return load_recipe_tokenizer(out_dir, tokenizer.joint)


def load_recipe_tokenizer(out_dir: Path, joint: bool) -> Tokenizer:
    """The tokenizer a run keeps in out_dir (`joint` says which SentencePiece files, unless
    an explicit vocabulary lies there: then whichever are there)."""
    vocab = Path(out_dir) / VOCAB_FILE
    if vocab.is_file():
        src, tgt = model_paths(Path(out_dir), False)
        if not tgt.is_file():
            src, tgt = model_paths(Path(out_dir), True)
        return Tokenizer.from_files(src, tgt, vocab)
    src, tgt = model_paths(Path(out_dir), joint)
    return Tokenizer.from_files(src, tgt)


def tokenizer_stamp(recipe: Recipe) -> dict[str, Any]:
    """What the SentencePiece model is made from. Tags are recorded only when there are
    any, so the stamp of untagged data is the same in every version and its runs keep
    their tokenizer."""
    t = recipe.tokenizer
    stamp: dict[str, Any] = {"settings": {name: getattr(t, name) for name in t.model_fields}}
    corpora = recipe.data.train
    stamp["inputs"] = [file_fingerprint(p) for c in corpora for p in (c.src, c.tgt)]
    if recipe.data.tags:
        stamp["tags"] = list(recipe.data.tags)
    return stamp


def stamp_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The recipe keys in which two tokenizer stamps differ (tokenizer_stamp's, or the
    pipeline's for a given or inherited model)."""
    names = {"init_from": "train.init_from", "model": "tokenizer.model",
             "inputs": "data.train", "tags": "data.train tags"}
    changed = []
    for key in dict.fromkeys([*old, *new]):
        if old.get(key) == new.get(key):
            continue
        if key == "settings":
            if key in old and key in new:  # else tokenizer.model or init_from says it
                changed += [f"tokenizer.{name}" for name, value in new[key].items()
                            if old[key].get(name) != value]
        else:
            changed.append(names.get(key, key))
    return changed or ["tokenizer"]
