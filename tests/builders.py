"""Builders shared by the test tiers (unit, integration, system): small real inputs (the
reverse toy task, raw and tiny recipes), readers of what a training run leaves on disk,
and scripted stand-ins for the search's model.

Import as `from builders import ...`: pyproject puts tests/ on sys.path. Importing this
module imports no more of mtkit than a unit test needs.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml

from mtkit.data.tokenizer import SpecialIds

if TYPE_CHECKING:
    from mtkit.config import Recipe
    from mtkit.data.manifest import Manifest
    from mtkit.data.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]  # the repository
RECIPES = ROOT / "recipes"
DATA = Path(__file__).parent / "data"  # the Bible sample (see data/README.md)
LETTERS = "abcdefghij"


# --------------------------------------------------------------------------- recipes


def raw_recipe(src: str | Path = "train.es", tgt: str | Path = "train.en", *,
               valid: tuple[str | Path, str | Path] | None = None,
               **sections: Any) -> dict[str, Any]:
    """The smallest raw recipe (for `recipe_from_dict`): a training pair, optionally a
    valid pair, and the other sections as given."""
    data: dict[str, Any] = {"train": {"src": str(src), "tgt": str(tgt)}}
    if valid is not None:
        data["valid"] = {"src": str(valid[0]), "tgt": str(valid[1])}
    return {"data": data, **sections}


def reverse_task(directory: Path, n_train: int = 3000, n_test: int = 100, seed: int = 0) -> dict:
    """Write source/target files where the target is the source reversed."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)

    def write(split: str, n: int) -> tuple[Path, Path]:
        rows = [[rng.choice(LETTERS) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        src, tgt = directory / f"{split}.src", directory / f"{split}.tgt"
        src.write_text("".join(" ".join(r) + "\n" for r in rows), encoding="utf-8")
        tgt.write_text("".join(" ".join(reversed(r)) + "\n" for r in rows), encoding="utf-8")
        return src, tgt

    return {
        "train": write("train", n_train),
        "valid": write("valid", 50),
        "test": write("test", n_test),
    }


def reverse_links(src: Path, out: Path) -> Path:
    """The reversal's true word links of each line of `src` (Pharaoh `i-j`), into `out`."""
    rows = [len(line.split()) for line in src.read_text(encoding="utf-8").splitlines()]
    out.write_text("".join(" ".join(f"{i}-{n - 1 - i}" for i in range(n)) + "\n"
                           for n in rows), encoding="utf-8")
    return out


def reverse_recipe(files: dict, max_steps: int = 350) -> dict[str, Any]:
    """A raw recipe (for recipe_from_dict) that learns the reverse task in seconds."""
    return raw_recipe(
        *files["train"],
        valid=files["valid"],
        tokenizer={"vocab_size": 24, "model_type": "bpe"},
        model=tiny_model(dropout=0.0),
        train={"max_tokens": 2048, "lr": 0.004, "warmup_steps": 50, "max_steps": max_steps,
               "valid_every": 1000, "save_every": 1000, "log_every": 100,
               "label_smoothing": 0.0, "average": "none", "valid_bleu_lines": 0},
    )


def tiny_model(**changes: Any) -> dict[str, Any]:
    model = {
        "enc_layers": 2,
        "dec_layers": 2,
        "d_model": 64,
        "heads": 4,
        "ffn_dim": 128,
        "dropout": 0.1,
        "max_positions": 64,
    }
    model.update(changes)
    return model


def bible_recipe(
    directory: Path, train: dict | None = None, model: dict | None = None, **sections: Any
) -> Path:
    """A tiny recipe on the Bible sample in tests/data, written to directory/tiny.yaml."""
    raw = raw_recipe(
        DATA / "train.es",
        DATA / "train.en",
        valid=(DATA / "dev.es", DATA / "dev.en"),
        tokenizer={"vocab_size": 300},
        model=tiny_model(**(model or {})),
        train={
            "max_tokens": 1024,
            "lr": 0.003,
            "warmup_steps": 10,
            "max_steps": 20,
            "valid_every": 10,
            "save_every": 10,
            "log_every": 5,
            "keep_last": 3,
            "valid_bleu_lines": 20,
            "average": "last-2",
            **(train or {}),
        },
        decode={"beam": 2, "max_len_a": 1.0, "max_len_b": 5},
    )
    raw["data"]["langs"] = {"src": "es", "tgt": "en"}
    raw["data"]["test"] = [{"src": str(DATA / "test.es"), "tgt": str(DATA / "test.en")}]
    raw.update(sections)
    path = directory / "tiny.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def prepare(recipe: Recipe, run_dir: Path) -> tuple[Tokenizer, dict[str, str]]:
    """Run the tokenizer and binarize stages into run_dir: the tokenizer and the training
    data fingerprints that `train.train` takes."""
    from mtkit.pipeline import PipelineRun, binarize_stage, tokenizer_stage  # not for unit tests
    from mtkit.train.run import RunPaths

    run = PipelineRun(recipe, RunPaths(run_dir), torch.device("cpu"))
    tokenizer_stage(run)
    binarize_stage(run)
    return run.tokenizer, run.manifest.training_fingerprints()


# --------------------------------------------------------------------------- what a run leaves


def metrics_records(run_dir: Path, event: str | None = None) -> list[dict[str, Any]]:
    """RUN_DIR/metrics.jsonl as a list of records (only those of `event` if given)."""
    lines = (Path(run_dir) / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    return [r for r in records if event is None or r["event"] == event]


def tensorboard_steps(run_dir: Path, tag: str) -> list[int]:
    """The steps of a scalar in RUN_DIR/tensorboard as TensorBoard reads them (it applies
    the purge a resumed run asks for), in order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return [event.step for event in events.Scalars(tag)]


def weights(path: Path) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint file, read with torch alone."""
    return torch.load(path, weights_only=True)["model"]


def saved_step(path: Path) -> int:
    """The training step a resumable checkpoint (checkpoint_last.pt) holds, read with torch
    alone."""
    return torch.load(path, weights_only=True)["train_state"]["progress"]["step"]


def small_manifest() -> Manifest:
    """A manifest.json's contents, made by hand: a filtered train split of 9 lines and a
    dev split of 4."""
    from mtkit.data.manifest import Manifest, SourceFile, SplitInfo

    def split(lines: int, filtered: bool) -> SplitInfo:
        return SplitInfo(
            lines=lines,
            pairs=lines - 3 * filtered,
            src_tokens=10 * lines,
            tgt_tokens=11 * lines,
            filtered=filtered,
            dropped={"empty": 1 * filtered, "too_long": 2 * filtered, "ratio": 0},
            src=SourceFile(f"/corpus/{lines}.es", "ab" * 20),
            tgt=SourceFile(f"/corpus/{lines}.en", "cd" * 20),
        )

    return Manifest("uint16", "f" * 64, 255, 3.0, {"train": split(9, True), "dev": split(4, False)})


# --------------------------------------------------------------------------- scripted models

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = SpecialIds(pad=PAD, unk=UNK, start=BOS, eos=EOS)  # the searches' ids for these
A, B, C, D = 4, 5, 6, 7
VOCAB = 10

Probs = dict[int, float]


class ScriptedCache:
    """Remembers each row's source id and its tokens so far; reorder keeps them aligned."""

    def __init__(self, keys: torch.Tensor, max_len: int, beam: int) -> None:
        self.sentence_keys = keys  # (n,) source id per sentence
        self.keys = keys.repeat_interleave(beam)  # (B,) source id per row
        self.history = keys.new_zeros((self.keys.numel(), 0))  # (B, step) tokens so far
        self.max_len = max_len
        self.step = 0

    def reorder(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        beam = rows.numel() // (self.keys.numel() if sentences is None else sentences.numel())
        if sentences is None:  # the search promises that rows stay within their sentence
            assert torch.equal(self.keys[rows], self.keys)
        else:  # and that new row i comes from sentence sentences[i // beam]
            self.sentence_keys = self.sentence_keys[sentences]
            assert torch.equal(self.keys[rows], self.sentence_keys.repeat_interleave(beam))
        self.keys, self.history = self.keys[rows], self.history[rows]


class ScriptedModel:
    """A stand-in with the model interface (mtkit.search.SearchModel) whose next-token
    probabilities are set by hand.

    next_probs(source_id, prefix) -> {token: probability}: source_id is the first token of
    the source row, prefix the tokens after the start token. Tokens not listed get
    probability 1e-6.
    """

    def __init__(self, next_probs: Callable[[int, tuple[int, ...]], Probs],
                 max_positions: int = 64, specials: SpecialIds = SPECIALS) -> None:
        self.max_positions = max_positions
        self.specials = specials  # the ids its vocabulary gives pad and the start token
        self.next_probs = next_probs
        self.rows_per_step: list[int] = []  # rows in each decode_step call

    def eval(self) -> ScriptedModel:
        # Not part of SearchModel, but engine.TorchEngine.search calls it on its models.
        return self

    def encode(self, src: torch.Tensor):
        # memory (B, S, 1) carries the ids
        return src.float().unsqueeze(-1), src == self.specials.pad

    def step_weights(self) -> None:
        # Not part of SearchModel: engine.InferenceModel gathers them once per engine.
        return None

    def init_cache(self, memory, src_pad_mask, max_len: int, beam: int,
                   weights: None = None) -> ScriptedCache:
        assert max_len <= self.max_positions
        return ScriptedCache(memory[:, 0, 0].long(), max_len, beam)

    def decode_step(self, prev_tokens: torch.Tensor, cache: ScriptedCache) -> torch.Tensor:
        assert cache.step < cache.max_len, "decode_step beyond the cache's max_len"
        self.rows_per_step.append(prev_tokens.numel())
        cache.history = torch.cat([cache.history, prev_tokens[:, None]], dim=1)
        cache.step += 1
        return self._logits(cache.keys, cache.history)

    def decode(self, tgt_in: torch.Tensor, memory, src_pad_mask) -> torch.Tensor:
        assert tgt_in.size(1) <= self.max_positions
        keys = memory[:, 0, 0].long()
        steps = [self._logits(keys, tgt_in[:, : i + 1]) for i in range(tgt_in.size(1))]
        return torch.stack(steps, dim=1)  # (B, T, V)

    def _logits(self, keys: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        probs = torch.full((keys.numel(), VOCAB), 1e-6)
        for row, (key, seq) in enumerate(zip(keys.tolist(), history.tolist(), strict=True)):
            assert seq[0] == self.specials.start
            for token, p in self.next_probs(key, tuple(seq[1:])).items():
                probs[row, token] = p
        return probs.log()


def table(script: dict[tuple[int, ...], Probs], default: Probs | None = None):
    """next_probs from a {prefix: probs} table; other prefixes get `default` (EOS)."""
    default = default or {EOS: 1.0}
    return lambda key, prefix: script.get(prefix, default)


# The case where the stop rules differ. Ending now scores ln 0.7 = -0.36; A (0.3) has
# -1.2 / 2 = -0.6 if it ended next, but with near-certain tokens after it A B C D EOS
# scores (ln 0.3 + 3 ln 0.99) / 5 = -0.25: with lenpen 1.0 and beam 2, `early` gives up
# A after the first step and returns the empty hypothesis, `exact` returns A B C D.
LONG_RECOVERS = {(): {EOS: 0.7, A: 0.3}, (A,): {B: 0.99, EOS: 0.01},
                 (A, B): {C: 0.99, EOS: 0.01}, (A, B, C): {D: 0.99, EOS: 0.01}}


# --------------------------------------------------------------------------- metric sentences

HYPS = [
    "The cat sat on the mat.",
    "Hello world, how are you?",
    "It rains in Spain mainly.",
    "A quick brown fox jumps.",
]
REF1 = [
    "The cat sat on a mat.",
    "Hello there world, how are you?",
    "The rain in Spain falls mainly on the plain.",
    "The quick brown fox jumps over the lazy dog.",
]
REF2 = [
    "A cat was sitting on the mat.",
    "Hi world, how are you?",
    "It rains mainly in Spain.",
    "A fast brown fox jumps.",
]


# --------------------------------------------------------------------------- what a server says

_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')

Series = tuple[str, tuple[tuple[str, str], ...]]  # (name, sorted (label, raw value) pairs)


def prometheus_text(text: str) -> tuple[dict[str, str], dict[Series, float]]:
    """Prometheus' text format (0.0.4) read back, its rules asserted on the way: every
    family has `# HELP` then `# TYPE` before its series, every series line is well formed
    and in a declared family (a histogram's `_bucket`, `_sum`, `_count` in its own).
    Returns (family -> type, series -> value)."""
    types: dict[str, str] = {}
    helped: set[str] = set()
    values: dict[Series, float] = {}
    assert text.endswith("\n"), "the text must end with a newline"
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split(" ")[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name in helped and name not in types, line
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            types[name] = kind
            continue
        match = _SERIES.match(line)
        assert match, f"not a series line: {line!r}"
        name, label_text, value = match.groups()
        labels, consumed = [], 0
        for label in _LABEL.finditer(label_text or ""):
            assert label.start() == consumed, line
            consumed = label.end()
            labels.append((label[1], label[2]))
        assert consumed == len(label_text or ""), line
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or types.get(family) == "histogram", f"undeclared: {name}"
        values[(name, tuple(sorted(labels)))] = float("inf") if value == "+Inf" else float(value)
    return types, values
