"""Options and helpers that several commands share."""

from __future__ import annotations

from pathlib import Path

import typer

from mtkit.errors import ConfigError

RecipeArg = typer.Argument(None, help="The recipe YAML file.", show_default=False)
RunDirOpt = typer.Option(None, "--run-dir", help="Run directory [default: runs/RECIPE_STEM].")
SetOpt = typer.Option(
    None, "--set", help="Override a recipe key, e.g. --set train.lr=0.001 (repeatable)."
)
DeviceOpt = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto.")
ThreadsOpt = typer.Option(0, "--threads", help="CPU threads for torch (0 = default).")

# translate and serve
BeamOpt = typer.Option(None, "--beam", help="Beam size (1 = greedy).")
LenpenOpt = typer.Option(None, "--lenpen", help="Length penalty exponent.")
MaxTokensOpt = typer.Option(4096, "--max-tokens", help="Source tokens per batch.")
QuantizeOpt = typer.Option(
    "none", "--quantize", help="int8: dynamic int8 linear layers (CPU), or none."
)
EngineOpt = typer.Option(
    "auto", "--engine", help="torch, ctranslate2, or auto (ctranslate2 for an export dir)."
)


def load_recipe(recipe: Path | None, overrides: list[str] | None):
    from mtkit.config import load_recipe

    if recipe is None:
        raise ConfigError("a recipe file is required (or the flags that replace it; see --help)")
    return load_recipe(recipe, overrides or [])


def run_dir_of(recipe_path: Path, run_dir: Path | None) -> Path:
    return run_dir if run_dir is not None else Path("runs") / recipe_path.stem
