"""Options and helpers that several commands share.

One long option means one thing and has one short flag in every command: `-m/--model`,
`-i/--input`, `-o/--output` (`score` keeps sacrebleu's long names and short flags of its
own, `-r`, `-s`, `-lc`). tests/unit/test_cli_options.py reads every command's options and
holds the commands to it. Metavars are words (MODEL, FILE, N); decode settings that come
from the model say so as their default.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import typer

from mtkit.errors import ConfigError

T = TypeVar("T")
FROM_MODEL = "from the model"  # the default shown for a decode setting the recipe holds

RecipeArg = typer.Argument(None, metavar="[RECIPE]", help="The recipe YAML file.",
                           show_default=False)
RunDirOpt = typer.Option(None, "--run-dir", metavar="DIR", show_default="runs/RECIPE_STEM",
                         help="Run directory.")
SetOpt = typer.Option(
    None, "--set", metavar="KEY=VALUE",
    help="Override a recipe key, e.g. --set train.lr=0.001 (repeatable).",
)
DeviceOpt = typer.Option("auto", "--device", metavar="DEVICE",
                         help="cpu, cuda, cuda:N or auto.")
# --threads: 0 lets the engine choose; far above any machine's cores, torch's thread pool
# crashes the process (a segfault at 100000), so a typo is refused as a usage error
MAX_THREADS = 1024
ThreadsOpt = typer.Option(0, "--threads", metavar="N", min=0, max=MAX_THREADS,
                          help="CPU threads for torch (0 = default).")
ModelsOpt = typer.Option(
    ..., "-m", "--model", metavar="MODEL", help="Model file or run directory (its "
    "model.pt); repeat: an ensemble; or a directory `mtkit export` wrote."
)

# translate and serve: the decode settings (defaults: the recipe stored in the model)
BeamOpt = typer.Option(None, "--beam", metavar="N", show_default=FROM_MODEL,
                       help="Beam size (1 = greedy).")
LenpenOpt = typer.Option(None, "--lenpen", metavar="X", show_default=FROM_MODEL,
                         help="Length penalty: score / length^X.")
StopOpt = typer.Option(
    None, "--stop", metavar="RULE", show_default=FROM_MODEL,
    help="When beam search ends a sentence: early (no live hypothesis would beat the "
    "n-best by ending next), exact (none could, at any length) or top (none has a higher "
    "log-probability; CTranslate2's rule, in effect).",
)
NbestOpt = typer.Option(None, "--nbest", metavar="N", show_default=FROM_MODEL,
                        help="Hypotheses per input line (translate: TSV when > 1).")
MaxLenAOpt = typer.Option(None, "--max-len-a", metavar="A", show_default=FROM_MODEL,
                          help="Output length cap A * source length + B.")
MaxLenBOpt = typer.Option(None, "--max-len-b", metavar="B", show_default=FROM_MODEL,
                          help="See --max-len-a.")
SamplingOpt = typer.Option(
    None, "--sampling", metavar="RULE", show_default=FROM_MODEL,
    help="Draw each translation at random instead of beam search: full, topk:K (from the "
    "K likeliest tokens) or topp:P (the smallest set of likeliest tokens with mass >= P); "
    "none: beam search. --nbest N draws N per line.",
)
TemperatureOpt = typer.Option(
    None, "--temperature", metavar="T", show_default=FROM_MODEL,
    help="Sampling: divide the log-probabilities by T before the topk/topp cut (T > 0).",
)
SeedOpt = typer.Option(
    None, "--seed", metavar="N", show_default=FROM_MODEL,
    help="Sampling: the random seed; the same seed repeats the same samples.",
)
PrefixOpt = typer.Option(
    None, "--prefix", metavar="FILE", help="One target prefix per input line (an empty "
    "line: none): each translation starts with it and goes on from there.")
AlignmentsOpt = typer.Option(
    False, "--alignments", help="Append TAB + word alignments: Pharaoh links i-j "
    "(source word i, output word j, from 0), every output word linked.")
AlignmentUnitOpt = typer.Option(
    None, "--alignment-unit", metavar="UNIT", show_default="word",
    help="--alignments between whitespace words (word) or the model's pieces (subword).")
AlignmentLayerOpt = typer.Option(
    None, "--alignment-layer", metavar="N", show_default=FROM_MODEL,
    help="Word alignments: the decoder layer whose cross-attention links the words, from 0 "
    "or negative from the end (-2: the penultimate, or the only layer of one).",
)
# translate: documents (mtkit.document; docs/guides/documents.md)
SplitOpt = typer.Option(
    None, "--split/--no-split", show_default=FROM_MODEL, help="Split each line into "
    "sentences (sentencex, the model's source language), translate them, and join their "
    "translations into one line.")
NoProtectOpt = typer.Option(
    False, "--no-protect", help="Translate placeholders (%s, {0}, URLs, ...) as any text; "
    "by default they are kept out of the model and put back as they were.")
ProtectOpt = typer.Option(
    None, "--protect", metavar="RULE", show_default=FROM_MODEL, help="Protect also this "
    "rule's placeholders: number, accelerator, or all (repeatable; the default rules are "
    "always on).")
ProtectRegexOpt = typer.Option(
    None, "--protect-regex", metavar="REGEX", show_default=FROM_MODEL, help="Protect also "
    "what this regular expression matches (Python syntax; repeatable).")
FormatOpt = typer.Option(
    "text", "--format", metavar="FORMAT", help="text, or html: each line is an HTML "
    "fragment whose text is translated and whose tags, attributes and code are kept "
    "(docs/guides/documents.md).")
WholeFileOpt = typer.Option(
    False, "--whole-file", help="With --format html: the whole input is one document "
    "(a page over many lines), written back whole.")
InputOpt = typer.Option(None, "-i", "--input", metavar="FILE", show_default="stdin",
                        help="Read this file (-: stdin).")
OutputOpt = typer.Option(None, "-o", "--output", metavar="FILE", show_default="stdout",
                         help="Write this file (-: stdout).")
SrcLangOpt = typer.Option(
    None, "--src-lang", metavar="CODE", show_default="the model's",
    help="A multilingual model's (M2M100, NLLB) source language, e.g. es or spa_Latn.",
)
TgtLangOpt = typer.Option(
    None, "--tgt-lang", metavar="CODE", show_default="the model's",
    help="A multilingual model's target language: its token starts every translation.",
)
TagOpt = typer.Option(
    None, "--tag", metavar="NAME",
    help="Start each line with this corpus tag, as training did for the corpus with "
    "`tag: NAME` (e.g. BT).",
)
MaxTokensOpt = typer.Option(4096, "--max-tokens", metavar="N", min=1,
                            help="Source tokens per batch.")
QuantizeOpt = typer.Option(
    "none", "--quantize", metavar="MODE", help="int8: dynamic int8 linear layers (CPU), or none."
)
EngineOpt = typer.Option(
    "auto", "--engine", metavar="ENGINE",
    help="torch, ctranslate2, or auto (ctranslate2 for an export dir).",
)


def load_recipe(recipe: Path | None, overrides: list[str] | None):
    from mtkit.config import load_recipe

    if recipe is None:
        raise ConfigError("a recipe file is required (or the flags that replace it; see --help)")
    return load_recipe(recipe, overrides or [])


def run_dir_of(recipe_path: Path, run_dir: Path | None) -> Path:
    """--run-dir, or runs/RECIPE_STEM; a one-line error when it names something that is
    not a directory."""
    path = run_dir if run_dir is not None else Path("runs") / recipe_path.stem
    if path.exists() and not path.is_dir():
        flag = "--run-dir " if run_dir is not None else "run directory "
        raise ConfigError(f"{flag}{path}: is a file, expected a directory; give another "
                          "--run-dir")
    return path


def std_stream(path: Path | None) -> Path | None:
    """-i - / -o -: stdin or stdout, as most Unix tools read it (None means the stream)."""
    return None if path is not None and str(path) == "-" else path


def one_of(new: str, new_value: T | None, old: str, old_value: T | None) -> T | None:
    """The value of an option or of its hidden old spelling, never both."""
    if new_value is not None and old_value is not None:
        raise ConfigError(f"{old} is the old spelling of {new}; give only {new}")
    return new_value if new_value is not None else old_value
