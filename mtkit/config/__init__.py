"""Recipes: the section dataclasses (sections), read from YAML or a checkpoint (loader).

`from mtkit.config import X` reaches everything code outside this package uses.
"""

from mtkit.config.loader import (
    apply_overrides,
    changed_fields,
    check_data_files,
    load_recipe,
    recipe_from_dict,
    replace_checked,
)
from mtkit.config.sampling import Sampling
from mtkit.config.sections import (
    Average,
    Corpus,
    DataConfig,
    DecodeConfig,
    Langs,
    ModelConfig,
    Pair,
    Recipe,
    TokenizerConfig,
    TrainConfig,
    between,
    parse_duration,
)

__all__ = [
    "Average", "Corpus", "DataConfig", "DecodeConfig", "Langs", "ModelConfig", "Pair",
    "Recipe", "Sampling", "TokenizerConfig", "TrainConfig", "apply_overrides", "between",
    "changed_fields", "check_data_files", "load_recipe", "parse_duration",
    "recipe_from_dict", "replace_checked",
]
