"""What of a recipe `binarize` encodes (its training corpora, with their tags and
alignments, and its dev set, under the filters the model allows), and whether the
binarised data of a run is still what the recipe asks for.
"""

from __future__ import annotations

from pathlib import Path

from mtkit.config import Recipe
from mtkit.data.corpora import training_splits
from mtkit.data.manifest import Manifest
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import ConfigError
from mtkit.files.textio import file_fingerprint, read_lines


def recipe_splits(recipe: Recipe) -> dict[str, tuple[Path, Path]]:
    """The (src, tgt) files of each split binarize makes: the training corpora, `valid`."""
    splits = {name: (c.src, c.tgt) for name, c in training_splits(recipe)}
    if recipe.data.valid is not None:
        splits["valid"] = (recipe.data.valid.src, recipe.data.valid.tgt)
    return splits


def check_test_sets(recipe: Recipe, where: str) -> None:
    """The test sets' files read now, to fail before any stage runs, not after training
    (binarize checks the training and dev files first thing, the same way): every line
    decodes, and each set's src and tgt have as many lines, at least one."""
    for i, pair in enumerate(recipe.data.test):
        key = f"data.test[{i}]"
        src_lines, tgt_lines = (sum(1 for _ in read_lines(path))
                                for path in (pair.src, pair.tgt))
        if src_lines != tgt_lines:
            raise ConfigError(f"{where}: {key}: {pair.src} has {src_lines} lines but "
                              f"{pair.tgt} has {tgt_lines}; a test set needs one reference "
                              "line per source line")
        if src_lines == 0:
            raise ConfigError(f"{where}: {key}: {pair.src} and {pair.tgt} are empty; give a "
                              "test set with at least one line, or leave it out")


def train_max_len(recipe: Recipe) -> int:
    """Longest training side kept: the recipe's filter, within what the model can hold."""
    return min(recipe.data.max_len, recipe.model.max_positions - 1)


def binarize_staleness(recipe: Recipe, tokenizer: Tokenizer, manifest: Manifest | None) -> str:
    """Why the binarised data (its `manifest`) is out of date for the recipe; "" if not."""
    if manifest is None:
        return "no binarised data yet"
    if manifest.tokenizer != tokenizer.fingerprint():
        return "the tokenizer changed"
    if (manifest.max_len, manifest.max_ratio) != (train_max_len(recipe), recipe.data.max_ratio):
        return "data.max_len, data.max_ratio or model.max_positions changed"
    splits = recipe_splits(recipe)
    if set(manifest.splits) != set(splits):
        return "the recipe's splits changed"
    for name, (src, tgt) in splits.items():
        for stored, path in ((manifest.splits[name].src, src), (manifest.splits[name].tgt, tgt)):
            if stored.fingerprint != file_fingerprint(path):
                return f"{path} changed"
    for name, corpus in training_splits(recipe):
        split = manifest.splits[name]
        if split.tag != corpus.tag:
            return f"the tag of {corpus.src} changed"
        stored = None if split.links is None else split.links.fingerprint
        given = None if corpus.alignments is None else file_fingerprint(corpus.alignments)
        if stored != given:
            return f"the alignments of {corpus.src} changed"
    return ""


def recipe_training_prints(recipe: Recipe) -> dict[str, str]:
    """What Manifest.training_fingerprints will record once binarize has encoded the
    recipe's training corpora as they are now, less the tokenizer: read from the files,
    so that a run can be checked before binarize rewrites its data."""
    prints = {}
    for name, corpus in training_splits(recipe):
        prints[f"{name}.src"] = file_fingerprint(corpus.src)
        prints[f"{name}.tgt"] = file_fingerprint(corpus.tgt)
        if corpus.tag is not None:
            prints[f"{name}.tag"] = corpus.tag
        if corpus.alignments is not None:
            prints[f"{name}.links"] = file_fingerprint(corpus.alignments)
    return prints
