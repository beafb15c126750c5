"""Fine-tuning: a run that starts from another run's model (`train.init_from`).

The child takes the parent's weights and SentencePiece model, and nothing else: the
optimiser and the schedule start afresh, the data are the child's. The architecture
cannot change (the weights would not fit), so the recipe's model section must equal the
parent's; the tokenizer section is only compared, since the parent's vocabulary is used
whatever it says. The parent file is only read; the child's bundles name it and its
fingerprint (`checkpoint.Parent`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from mtkit.config import Recipe, changed_fields
from mtkit.data.run_tokenizer import require_tags, write_tokenizer
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import CheckpointError, ConfigError
from mtkit.files.textio import file_fingerprint
from mtkit.model.checkpoint import Bundle, Parent, load_checkpoint

log = logging.getLogger("mtkit")


def load_parent(recipe: Recipe, mmap: bool = False) -> tuple[Recipe, Bundle, Parent]:
    """The bundle train.init_from names, checked against the recipe, and the recipe with
    the sections its file left out taken from the parent (`Recipe.inherited`: model,
    tokenizer); ConfigError naming the key when it is missing, not a model, or of another
    architecture. `mmap`: the weights are not read (a look at the settings)."""
    path = recipe.train.init_from
    if path is None:
        raise ValueError("the recipe has no train.init_from")  # a bug: callers check
    try:
        bundle = load_checkpoint(path, mmap=mmap)
    except CheckpointError as exc:
        raise ConfigError(f"train.init_from: {exc}") from None
    taken = {name: getattr(bundle.recipe, name) for name in recipe.inherited}
    if taken:
        recipe = dataclasses.replace(recipe, inherited=(), **taken)
        log.info("train.init_from: the %s section%s of %s", " and ".join(taken),
                 "s" if len(taken) > 1 else "", path)
        try:  # the checks across sections, put off until the parent's were in
            recipe.check()
        except ValueError as exc:
            raise ConfigError(f"train.init_from: {path} (its {' and '.join(taken)} "
                              f"section{'s' if len(taken) > 1 else ''}): {exc}") from None
    old, new = bundle.recipe.model, recipe.model
    if old != new:
        differ = ", ".join(f"model.{name} {getattr(new, name)} (parent {getattr(old, name)})"
                           for name in changed_fields(old, new))
        raise ConfigError(f"train.init_from: {path} has another architecture: {differ}; "
                          "a fine-tuned model keeps its parent's model section")
    tokenizer = bundle.tokenizer()
    joint = tokenizer.joint
    if joint != recipe.tokenizer.joint:
        raise ConfigError(f"train.init_from: {path} has {'one joint' if joint else 'separate'} "
                          f"SentencePiece model{'' if joint else 's'}: set tokenizer.joint: "
                          f"{str(joint).lower()}")
    if bundle.recipe.tokenizer.kind != recipe.tokenizer.kind:
        raise ConfigError(f"train.init_from: {path} has tokenizer.kind "
                          f"{bundle.recipe.tokenizer.kind}: set it, or leave the tokenizer "
                          "section out")
    require_tags(tokenizer, recipe.data.tags, f"train.init_from: {path}")
    return recipe, bundle, Parent(str(path), file_fingerprint(path))


def write_parent_tokenizer(recipe: Recipe, bundle: Bundle, out_dir: Path) -> Tokenizer:
    """Write the parent's SentencePiece model(s) into out_dir, byte for byte, and warn
    where the recipe's tokenizer section asks for something else."""
    mine, parents = recipe.tokenizer, bundle.recipe.tokenizer
    differ = [f"tokenizer.{name} {getattr(mine, name)} (parent {getattr(parents, name)})"
              for name in changed_fields(parents, mine) if name in mine.model_fields]
    if differ:
        log.warning("train.init_from: the parent's SentencePiece model is used, not the "
                    "recipe's tokenizer section: %s", ", ".join(differ))
    return write_tokenizer(bundle.tokenizer(), out_dir)
