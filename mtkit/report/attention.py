"""Cross-attention pictures: where the decoder looked in the source while it wrote each
output piece, for a sentence translated by the model (`mtkit attention`).

The sentence is translated by the model's own search (its recipe's decode settings, or
those given), and its best translation run once more through the model, teacher-forced
(decode/forced.py), for the attention weights of the chosen decoder layer: row t is the
position that wrote output piece t (the last, EOS), each row a distribution over the
source pieces and the source's EOS. One layer, heads averaged (by default the
layer word alignments read, the model's decode.alignment_layer: the penultimate unless
set), or every layer and head as a grid. Needs
matplotlib (the `[plot]` extra), imported only where a figure is drawn.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from mtkit.decode.engine import TorchEngine
from mtkit.decode.forced import forced_pass
from mtkit.decode.stats import Stats
from mtkit.decode.stream import decode_lines
from mtkit.decode.translate import Translator
from mtkit.errors import ConfigError, DataError
from mtkit.files.atomic import atomic_write, make_parent_dirs
from mtkit.model.transformer import decoder_layer
from mtkit.report.plot import figure_classes

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from numpy import ndarray

MISSING = "mtkit attention needs matplotlib; install the extra: pip install 'mtkit[plot]'"
EOS = "</s>"
DPI = 100
CELL = 0.26  # inches per piece in a one-layer picture: labels of 9-point text stay apart
GRID_CELL = 0.13  # per piece in a panel of the grid, whose labels are on its edges only
MOST_INCHES = 40  # a side of the figure at most, however long the sentence


@dataclass(frozen=True)
class AttentionMap:
    """One translated sentence's cross-attention."""

    source: tuple[str, ...]  # the source's pieces as the encoder read them, then EOS
    output: tuple[str, ...]  # the translation's pieces, then EOS
    # (layers, heads, len(output), len(source)); heads 1 when averaged
    weights: ndarray
    layers: tuple[int, ...]  # the decoder layers drawn, from 0
    layer_count: int  # the model's decoder layers
    averaged: bool  # heads averaged (and an ensemble's models)


@dataclass(frozen=True)
class AttentionJob:
    """`mtkit attention`: sentences from stdin to pictures."""

    models: tuple[Path, ...]
    output: Path  # FILE.png; several sentences: FILE-1.png, FILE-2.png, ...
    lines: int = 1  # the first N lines of the input
    layer: int | None = None  # None: the model's alignment layer
    every_head: bool = False  # every layer and head, a grid
    beam: int | None = None  # None: the model's decode settings
    tag: str | None = None
    device: str = "auto"


def attention_pictures(job: AttentionJob, stdin: BinaryIO | None = None) -> list[Path]:
    """Translate the job's sentences, draw each, write the PNGs; their paths."""
    figure_classes(MISSING)  # the missing extra first, before the model loads
    if job.output.suffix.lower() != ".png":
        raise ConfigError(f"-o {job.output}: mtkit attention writes PNG; give a file name "
                          "ending in .png")
    if job.lines < 1:
        raise ConfigError(f"--lines {job.lines}: expected at least 1")
    make_parent_dirs(job.output)  # before the model loads and translates for nothing
    translator = Translator.load(job.models, device=job.device, tag=job.tag,
                                 option_names={"beam": "--beam"},  # errors name the flag
                                 beam=job.beam)
    chosen_layers(translator, job.layer, job.every_head)  # its errors before stdin is read
    sentences = read_sentences(stdin if stdin is not None else sys.stdin.buffer, job.lines)
    maps = attention_maps(translator, sentences, job.layer, job.every_head)
    paths = picture_paths(job.output, len(maps), numbered=job.lines > 1)
    for path, found in zip(paths, maps, strict=True):
        figure = attention_figure(found)
        atomic_write(path, lambda file, figure=figure: figure.savefig(file, format="png",
                                                                     dpi=DPI))
    return paths


def read_sentences(stream: BinaryIO, count: int) -> list[str]:
    """The first `count` lines of the input (fewer if it has fewer), read as translate
    reads them (invalid UTF-8 replaced), or an error for an input without one, or with an
    empty one among them."""
    raw = []
    for line in stream:
        raw.append(line[:-1] if line.endswith(b"\n") else line)
        if len(raw) == count:
            break
    lines = decode_lines(raw, Stats())
    if not lines:
        raise DataError("stdin: no sentence; give one on stdin (echo 'Hola.' | mtkit "
                        "attention ...)")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise DataError(f"stdin line {number}: empty; there is nothing to draw")
    return lines


def picture_paths(output: Path, count: int, numbered: bool) -> list[Path]:
    """FILE.png for one picture; FILE-1.png ... FILE-N.png for N, `numbered` (--lines
    above 1, however many lines came)."""
    if not numbered:
        return [output]
    return [output.with_name(f"{output.stem}-{i}{output.suffix}") for i in range(1, count + 1)]


def attention_maps(translator: Translator, sentences: Sequence[str], layer: int | None = None,
                   every_head: bool = False) -> list[AttentionMap]:
    """Each sentence translated (best hypothesis) and its cross-attention: of `layer`
    (None: the alignment layer; negative: from the end), heads averaged, or of every layer and
    head (one model only)."""
    layers = chosen_layers(translator, layer, every_head)
    models = translator.engine.models  # (a TorchEngine: chosen_layers checked)
    count = len(models[0].decoder)
    hyps = translator.search(list(sentences))
    sources = [ids[: translator.max_source] for ids in translator.tokenizer.encode_src(
        list(sentences))]  # as the search read them
    targets = [found[0].tokens for found in hyps]
    forced = forced_pass(models, sources, targets, translator.tokenizer.specials,
                         attention_layers=layers, heads=every_head)
    src_pieces, tgt_pieces = (translator.tokenizer.pieces(side) for side in ("src", "tgt"))
    maps = []
    for src, tgt, pair in zip(sources, targets, forced, strict=True):
        weights = pair.attention if every_head else pair.attention.unsqueeze(1)
        maps.append(AttentionMap(
            tuple(src_pieces[i] for i in src) + (EOS,), tuple(tgt_pieces[i] for i in tgt) + (EOS,),
            weights.numpy(), layers, count, averaged=not every_head))
    return maps


def chosen_layers(translator: Translator, layer: int | None, every_head: bool
                  ) -> tuple[int, ...]:
    """The decoder layers to draw, from 0, or the one-line error for a layer the model
    lacks, an engine without attention weights, or every head of an ensemble."""
    engine = translator.engine
    if not isinstance(engine, TorchEngine):
        raise ConfigError("attention is drawn from mtkit's own model: give the model file "
                          "(a CTranslate2 export has no attention weights to read)")
    if every_head and len(engine.models) > 1:
        raise ConfigError("--all draws one model's heads: give one -m, not an ensemble")
    count = len(engine.models[0].decoder)
    if every_head:
        return tuple(range(count))
    if layer is None:  # the layer word alignments read: the model's decode.alignment_layer
        return (translator.settings.alignment_index(count),)
    try:
        return (decoder_layer(engine.models[0], layer),)
    except ValueError as exc:
        raise ConfigError(f"--layer {layer}: {exc}") from None


def attention_figure(found: AttentionMap) -> Figure:
    """One panel for a layer (heads averaged), or a grid of layers (rows) x heads
    (columns), with one colour bar; source pieces along the bottom, output pieces down
    the left."""
    figure_cls, canvas_cls = figure_classes(MISSING)
    layers, heads, rows, cols = found.weights.shape
    cell = CELL if layers * heads == 1 else GRID_CELL
    width = min(heads * (cols * cell + 0.6) + 2.5, MOST_INCHES)
    height = min(layers * (rows * cell + 0.5) + 2.0, MOST_INCHES)
    figure = figure_cls(figsize=(width, height), dpi=DPI, layout="constrained")
    canvas_cls(figure)  # Agg: renders without a display
    axes = figure.subplots(layers, heads, squeeze=False)
    for (r, h), ax in _cells(axes):
        image = ax.imshow(found.weights[r, h], vmin=0.0, vmax=1.0, cmap="viridis",
                          aspect="auto", interpolation="nearest")
        ax.set_xticks(range(cols), found.source if r == layers - 1 else [""] * cols,
                      rotation=90, fontsize=9 if heads == 1 else 6)
        ax.set_yticks(range(rows), found.output if h == 0 else [""] * rows,
                      fontsize=9 if heads == 1 else 6)
        if heads > 1:
            ax.set_title(f"layer {found.layers[r]}, head {h}", fontsize=8)
    if heads == 1 and layers == 1:
        axes[0, 0].set_xlabel("source pieces")
        axes[0, 0].set_ylabel("output pieces")
    figure.colorbar(image, ax=axes, label="attention weight", shrink=0.8)
    figure.suptitle(_title(found))
    return figure


def _cells(axes) -> list[tuple[tuple[int, int], object]]:
    return [((r, h), ax) for r, row in enumerate(axes) for h, ax in enumerate(row)]


def _title(found: AttentionMap) -> str:
    if len(found.layers) == 1 and found.averaged:
        return (f"Cross-attention of decoder layer {found.layers[0]} (layers 0-"
                f"{found.layer_count - 1}), heads averaged")
    return "Cross-attention of every decoder layer (rows) and head (columns)"


def image_panels(figure: Figure) -> int:
    """The panels of a figure that show a map (the colour bar's axes show none)."""
    return sum(1 for ax in figure.axes if ax.images)
