"""Commands that build a model: spm-train, binarize, train, average, import."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer

from mtkit.cli.options import (
    DeviceOpt,
    RecipeArg,
    RunDirOpt,
    SetOpt,
    ThreadsOpt,
    load_recipe,
    one_of,
    run_dir_of,
)
from mtkit.errors import ConfigError

log = logging.getLogger("mtkit")


def spm_train(
    recipe: Path | None = RecipeArg,
    run_dir: Path | None = RunDirOpt,
    overrides: list[str] | None = SetOpt,
    inputs: list[Path] | None = typer.Option(
        None, "-i", "--input", metavar="FILE", help="Text file (repeatable)."
    ),
    model_prefix: Path | None = typer.Option(
        None, "--model-prefix", metavar="PREFIX", help="Writes PREFIX.model."
    ),
    vocab_size: int = typer.Option(8000, "--vocab-size", metavar="N", help="Vocabulary size."),
    model_type: str = typer.Option("unigram", "--model-type", metavar="TYPE",
                                   help="unigram or bpe."),
    character_coverage: float = typer.Option(
        0.9995, "--character-coverage", metavar="X", help="Share of characters covered."
    ),
    input_sentence_size: int = typer.Option(
        1_000_000, "--input-sentence-size", metavar="N", help="Lines sampled (0 = all)."
    ),
) -> None:
    """Train the SentencePiece tokenizer (from a recipe or from flags)."""
    from mtkit.config import TokenizerConfig, replace_checked
    from mtkit.data.tokenizer import train_sentencepiece
    from mtkit.pipeline import run_pipeline

    if recipe is not None:  # the pipeline's stage: its stamp, lock and checks against the run
        run_pipeline(load_recipe(recipe, overrides), run_dir_of(recipe, run_dir),
                     until="tokenizer", device="cpu")
        return
    if not inputs or model_prefix is None:
        raise ConfigError("spm-train: give a recipe, or --input FILE and --model-prefix PREFIX")
    # the flags are the recipe's tokenizer keys: checked the same way, errors naming the flag
    flags = {"vocab_size": "--vocab-size", "model_type": "--model-type",
             "character_coverage": "--character-coverage",
             "input_sentence_size": "--input-sentence-size"}
    settings = replace_checked(
        TokenizerConfig(),
        {"vocab_size": vocab_size, "model_type": model_type,
         "character_coverage": character_coverage, "input_sentence_size": input_sentence_size},
        flags,
    )
    path = train_sentencepiece(
        list(inputs),
        model_prefix,
        settings.vocab_size,
        settings.model_type,
        settings.character_coverage,
        settings.input_sentence_size,
        names=flags,
    )
    log.info("tokenizer written to %s", path)


def binarize(
    recipe: Path | None = RecipeArg,
    run_dir: Path | None = RunDirOpt,
    overrides: list[str] | None = SetOpt,
    tokenizer: Path | None = typer.Option(None, "--tokenizer", metavar="FILE",
                                          help="SentencePiece model."),
    tgt_tokenizer: Path | None = typer.Option(
        None, "--tgt-tokenizer", metavar="FILE",
        help="Target-side model when vocabularies are separate.",
    ),
    src: Path | None = typer.Option(None, "--src", metavar="FILE", help="Source text file."),
    tgt: Path | None = typer.Option(None, "--tgt", metavar="FILE", help="Target text file."),
    split: str = typer.Option("train", "--split", metavar="NAME",
                              help="Split name for --src/--tgt."),
    alignments: Path | None = typer.Option(
        None, "--alignments", metavar="FILE",
        help="Word links (i-j) of each pair, kept for guided-alignment training."),
    output: Path | None = typer.Option(None, "-o", "--output", metavar="DIR",
                                       help="Output directory."),
    old_out: Path | None = typer.Option(None, "--out", hidden=True),  # the old spelling
    workers: int = typer.Option(0, "--workers", metavar="N", min=0,
                                help="Encoding processes (0 = all cores)."),
    max_len: int = typer.Option(256, "--max-len", metavar="N",
                                help="Drop training pairs longer than this."),
    max_ratio: float = typer.Option(3.0, "--max-ratio", metavar="X",
                                    help="Drop pairs with a larger ratio."),
) -> None:
    """Encode parallel text into memory-mapped token arrays."""
    from mtkit.config import DataConfig, replace_checked
    from mtkit.data.binarize import binarize as binarize_files
    from mtkit.data.tokenizer import Tokenizer
    from mtkit.pipeline import run_pipeline

    if recipe is not None:  # the pipeline's stages up to it, as mtkit train --until binarize
        run_pipeline(load_recipe(recipe, overrides), run_dir_of(recipe, run_dir),
                     until="binarize", device="cpu", workers=workers)
        return
    out = one_of("--output", output, "--out", old_out)
    if tokenizer is None or src is None or tgt is None or out is None:
        raise ConfigError("binarize: give a recipe, or --tokenizer, --src, --tgt and --output")
    # the filters are the recipe's data.max_len and data.max_ratio: checked the same way
    filters = replace_checked(DataConfig(train=()), {"max_len": max_len, "max_ratio": max_ratio},
                              {"max_len": "--max-len", "max_ratio": "--max-ratio"})
    tok = Tokenizer.from_files(tokenizer, tgt_tokenizer)
    binarize_files(tok, {split: (src, tgt)}, out, workers, filters.max_len, filters.max_ratio,
                   alignments=None if alignments is None else {split: alignments})
    log.info("binarised data written to %s", out)


def train(
    recipe: Path | None = RecipeArg,
    run_dir: Path | None = RunDirOpt,
    overrides: list[str] | None = SetOpt,
    restart: bool = typer.Option(False, "--restart", help="Discard the run's training state."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved recipe and exit."),
    until: str | None = typer.Option(
        None, "--until", metavar="STAGE",
        help="Stop after this stage: tokenizer, binarize, train, average, eval."
    ),
    device: str = DeviceOpt,
    threads: int = ThreadsOpt,
    nproc: int = typer.Option(
        0, "--nproc", metavar="N", min=0, help="Train with N processes on this machine: the "
        "same as torchrun --standalone --nproc_per_node N -m mtkit train ..."
    ),
) -> None:
    """Run the recipe pipeline: tokenizer, binarise, train, average, evaluate."""
    from mtkit.data.recipe_splits import check_test_sets
    from mtkit.launch import TrainJob, run_train_job

    loaded = load_recipe(recipe, overrides)
    check_test_sets(loaded, str(recipe))  # scored only at the end: read before any stage
    if dry_run:
        if loaded.train.init_from is not None:  # its sections, as the run will have them
            from mtkit.train.finetune import load_parent
            loaded = load_parent(loaded, mmap=True)[0]
        sys.stdout.write(loaded.to_yaml())
        return
    run_train_job(TrainJob(loaded, run_dir_of(recipe, run_dir), until=until, restart=restart,
                           device=device, threads=threads, nproc=nproc,
                           argv=tuple(sys.argv[1:])))


def average(
    checkpoints: list[Path] | None = typer.Argument(
        None, metavar="[CHECKPOINT]...", help="Checkpoints to average.", show_default=False
    ),
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE",
                                help="Where to write the average."),
    last: int | None = typer.Option(None, "--last", metavar="K", min=1, show_default=False,
                                    help="Average the last K step checkpoints of RUN_DIR."),
    best: bool = typer.Option(
        False, "--best", help="Average the best-K checkpoints RUN_DIR kept (train.average)."
    ),
) -> None:
    """Average the weights of several checkpoints into one model."""
    from mtkit.model.checkpoint import average_checkpoints, save_checkpoint
    from mtkit.train.run import RunPaths

    paths = list(checkpoints or [])
    by_last = last is not None  # (click refuses --last below 1)
    if by_last and best:
        raise ConfigError("average: give --last K or --best, not both")
    if by_last or best:
        flag = "--last" if by_last else "--best"
        if len(paths) != 1 or not paths[0].is_dir():
            given = " ".join(map(str, paths)) or "nothing"
            raise ConfigError(f"average {flag} takes exactly one run directory, got {given}")
        run = RunPaths(paths[0])
        paths = run.step_checkpoints()[-last:] if by_last else run.top_checkpoints()
        if not paths:
            kind = ("step checkpoints" if by_last
                    else "best_N.pt checkpoints (train.average: best-K)")
            raise ConfigError(f"average: no {kind} in {run.checkpoints}")
        if by_last and len(paths) < last:  # train.keep_last kept fewer
            log.warning("average --last %d: %s has %d step checkpoints; averaging those %d",
                        last, run.run_dir, len(paths), len(paths))
    if not paths:
        raise ConfigError("average: give checkpoint files, --last K RUN_DIR or --best RUN_DIR")
    save_checkpoint(output, average_checkpoints(paths))
    log.info("averaged %d checkpoints into %s", len(paths), output)


def import_model(
    directory: Path = typer.Argument(..., metavar="DIR", show_default=False,
                                     help="A Hugging Face Marian (OPUS-MT), M2M100 or NLLB "
                                     "model directory."),
    output: Path = typer.Option(..., "-o", "--output", metavar="MODEL",
                                help="The mtkit model file to write."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file."),
    src_lang: str = typer.Option(None, "--src-lang", metavar="CODE", show_default=False,
                                 help="M2M100/NLLB: the source language translated by "
                                 "default (es, spa_Latn)."),
    tgt_lang: str = typer.Option(None, "--tgt-lang", metavar="CODE", show_default=False,
                                 help="M2M100/NLLB: the target language by default."),
) -> None:
    """Import a pretrained model: a Hugging Face Marian (OPUS-MT), M2M100 or NLLB directory
    as an mtkit model, to translate with, fine-tune (train.init_from), export or serve."""
    from mtkit.convert.importer import import_model as run_import

    bundle = run_import(directory, output, force, src_lang, tgt_lang)
    model = bundle.recipe.model
    log.info("imported %s (%s, %d+%d layers, d_model %d) to %s", directory,
             bundle.imported.name if bundle.imported else "?", model.enc_layers,
             model.dec_layers, model.d_model, output)
