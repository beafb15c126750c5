"""`mtkit info`: what a model bundle holds, and how the run that made it chose and scored it.

`model_info(PATH)` takes a model file or a run directory (RUN_DIR/model.pt, or
checkpoints/checkpoint_last.pt while training has not finished) and returns a `ModelInfo`:
`to_dict()` is the stable JSON of `--json`, `lines()` the aligned text for a person.
It only reads: the bundle, and for a run model.stamp.json, eval/scores.json, metrics.jsonl.
"""

from __future__ import annotations

import dataclasses
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import CheckpointError, ConfigError
from mtkit.evaluate.validation import test_set_names
from mtkit.files.textio import file_fingerprint, read_json, read_json_lines
from mtkit.model.checkpoint import (
    FORMAT,
    FORMAT_VERSION,
    Bundle,
    Imported,
    Parent,
    Trained,
    load_checkpoint,
)
from mtkit.train.run import RunPaths

# the model section as --json shows it: fixed keys (dropout is training, not architecture)
ARCHITECTURE = ("enc_layers", "dec_layers", "d_model", "heads", "ffn_dim", "activation",
                "norm", "positions", "position_layout", "scale_embeddings", "output_bias",
                "tie_embeddings", "max_positions")
# the decode settings translate and serve start from (their options change them)
DECODE = ("beam", "lenpen", "stop", "nbest", "max_len_a", "max_len_b")
# null if unknown
TRAINED = ("updates", "epoch", "seconds", "tgt_tokens", "tgt_tokens_per_s", "precision")


@dataclass(frozen=True)
class EvalScore:
    test: str  # the test set's source file
    name: str  # as eval/ and the log name it: the file's name (test_set_names)
    metric: str  # sacrebleu's name: BLEU, chrF2, TER
    score: float
    signature: str


@dataclass(frozen=True)
class RunInfo:
    """What the run directory says about its model file."""

    run_dir: Path
    model_file: str  # "model.pt", or "checkpoints/checkpoint_last.pt" before training finished
    chosen: str | None  # model.stamp.json: the average or the checkpoint model.pt is
    dev_bleu: dict[str, float]  # model.stamp.json: the dev BLEU comparison behind `chosen`
    # "current" (model.stamp.json chose this very file, or predates recording which file),
    # "stale" (model.pt was replaced since: `chosen` and `dev_bleu` are then left out),
    # "absent" (no readable model.stamp.json, or a checkpoint rather than model.pt)
    choice_status: str
    scores_status: str  # "current" (scores.json is of this file), "stale", "absent", "damaged"
    decode: dict[str, Any]  # the settings the test sets were decoded with (when current)
    scores: list[EvalScore]  # only when current
    validations: int  # metrics.jsonl's validation records
    last_bleu: tuple[int, float] | None  # (step, dev BLEU) of the last one with BLEU
    best_bleu: tuple[int, float] | None


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    size: int  # bytes
    mtkit_version: str  # "" in files of versions that did not record it
    format_version: int
    langs: tuple[str, str]
    architecture: dict[str, Any]
    parameters: int
    vocab: tuple[int, int]  # source, target
    joint: bool
    model_type: str  # unigram or bpe; "explicit vocabulary" for an imported model's
    tags: tuple[str, ...]  # the corpus tags the source vocabulary holds (translate --tag)
    # a multilingual model's language codes (translate --src-lang/--tgt-lang); langs its default
    languages: tuple[str, ...]
    # where a source's language token goes: "[src_lang] pieces </s>", or "pieces </s>
    # [src_lang]" (NLLB's legacy_behaviour); "" for a model of one pair
    source_layout: str
    decode: dict[str, Any]  # the recipe's decode settings named in DECODE
    trained: Trained | None  # None: not recorded (bundles of older versions)
    resumable: bool
    data_fingerprints: dict[str, str]
    averaged_from: list[str] = field(default_factory=list)
    parent: Parent | None = None  # the model train.init_from started the run from
    imported: Imported | None = None  # where `mtkit import` read the model from
    run: RunInfo | None = None

    def to_dict(self) -> dict[str, Any]:
        """The --json object: every key always present, null where nothing is recorded."""
        t = self.trained
        training = {key: None if t is None else getattr(t, key) for key in TRAINED}
        run = None
        if self.run is not None:
            run = dataclasses.asdict(self.run)
            run["run_dir"] = str(self.run.run_dir)
            for key in ("last_bleu", "best_bleu"):
                run[key] = None if run[key] is None else dict(zip(("step", "bleu"), run[key]))
        return {
            "file": {"path": str(self.path), "bytes": self.size,
                     "mtkit_version": self.mtkit_version or None,
                     "format_version": self.format_version},
            "languages": {**dict(zip(("src", "tgt"), self.langs)),
                          "choices": list(self.languages),
                          "source_layout": self.source_layout or None},
            "architecture": self.architecture,
            "parameters": self.parameters,
            "vocabulary": {"src": self.vocab[0], "tgt": self.vocab[1], "joint": self.joint,
                           "model_type": self.model_type, "tags": list(self.tags)},
            "decode": dict(self.decode),
            "training": {**training, "resumable": self.resumable,
                         "data_fingerprints": self.data_fingerprints},
            "lineage": {"averaged_from": self.averaged_from,
                        "init_from": None if self.parent is None
                        else dataclasses.asdict(self.parent),
                        "imported": None if self.imported is None
                        else dataclasses.asdict(self.imported)},
            "run": run,
        }

    def sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """(title, [(key, value)]) groups of the text output."""
        a, t = self.architecture, self.trained
        file = [("path", str(self.path)),
                ("size", f"{self.size / 1e6:.1f} MB ({self.size:,} bytes)"),
                ("written by", f"mtkit {self.mtkit_version or '(not recorded)'}, "
                               f"checkpoint format {self.format_version}")]
        vocab = "joint" if self.joint else "separate"
        choices = f" (by default; any two of {len(self.languages)}: {', '.join(self.languages)})"
        model = [("languages", " -> ".join(self.langs) + (choices if self.languages else "")),
                 *([("sources", self.source_layout)] if self.source_layout else []),
                 ("layers", f"{a['enc_layers']} encoder, {a['dec_layers']} decoder"),
                 *((key, str(a[key])) for key in ARCHITECTURE[2:]),
                 ("parameters", f"{self.parameters:,}"),
                 ("vocabulary", f"{self.vocab[0]:,} source, {self.vocab[1]:,} target "
                                f"({vocab} {self.model_type})"),
                 *([("tags", ", ".join(self.tags) + " (translate --tag)")] if self.tags else [])]
        untrained = "trained elsewhere (imported)" if self.imported else "not recorded"
        training = [("updates", untrained)] if t is None else [
            ("updates", f"{t.updates:,}"), ("epoch", str(t.epoch)),
            ("training time", _duration(t.seconds)),
            ("target tokens/s", f"{t.tgt_tokens_per_s:,.0f}"),
            ("precision", t.precision or "not recorded")]
        training.append(("resumable", "yes (full training state)" if self.resumable
                         else "no (weights only)"))
        training += [(f"data {name}", fp[:12]) for name, fp in self.data_fingerprints.items()]
        lineage = [("averaged from", p) for p in self.averaged_from] or [("averaged from", "-")]
        lineage.append(("fine-tuned from", "-" if self.parent is None else
                        f"{self.parent.path} (fingerprint {self.parent.fingerprint[:12]})"))
        if self.imported is not None:
            i = self.imported
            lineage.append(("imported from", f"{i.path} ({i.format}: {i.name}, weights "
                                             f"fingerprint {i.fingerprint[:12]})"))
        decode = [(key, str(value)) for key, value in self.decode.items()]
        groups = [("file", file), ("model", model),
                  ("decode (translate's defaults)", decode), ("training", training),
                  ("lineage", lineage)]
        if self.run is not None:
            groups.append((f"run {self.run.run_dir}", _run_rows(self.run)))
        return groups

    def lines(self) -> list[str]:
        """The text output: groups of `key: value` lines, the values in one column."""
        groups = self.sections()
        width = max(len(key) for _, rows in groups for key, _ in rows) + 2
        out = []
        for title, rows in groups:
            out.append(title)
            out += [f"  {key + ':':<{width}}{value}" for key, value in rows]
        return out


def _run_rows(run: RunInfo) -> list[tuple[str, str]]:
    rows = [("model file", run.model_file if run.model_file == "model.pt"
             else f"{run.model_file} (no model.pt yet: training has not finished)")]
    if run.choice_status == "stale":
        rows.append(("model.pt is", "replaced since the average stage chose one "
                                    "(model.stamp.json is for another model file)"))
    if run.chosen is not None:
        compared = ", ".join(f"{name} {bleu:.2f}" for name, bleu in run.dev_bleu.items())
        rows.append(("model.pt is", run.chosen + (f" (dev BLEU: {compared})" if compared else "")))
    if run.validations:
        rows.append(("validations", str(run.validations)))
    for key, found in (("last dev BLEU", run.last_bleu), ("best dev BLEU", run.best_bleu)):
        if found is not None:
            rows.append((key, f"{found[1]:.2f} at step {found[0]}"))
    if run.scores_status != "current":
        why = {"stale": "eval/scores.json is for another model file",
               "damaged": "eval/scores.json unreadable"}.get(run.scores_status,
                                                             "no eval/scores.json")
        return [*rows, ("test scores", f"{run.scores_status} ({why})")]
    settings = ", ".join(f"{k} {v}" for k, v in run.decode.items())
    rows.append(("test decoding", settings or "-"))
    rows += [(f"{s.name} {s.metric}", f"{s.score:.2f}  {s.signature}") for s in run.scores]
    return rows


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}h {minutes % 60:02d}m {secs:02d}s"


# --------------------------------------------------------------------------- reading


def model_info(path: str | Path) -> ModelInfo:
    """What PATH (a model file or a run directory) holds; CheckpointError/ConfigError else."""
    model_path, run_dir = _resolve(Path(path))
    bundle, format_version = read_bundle(model_path)
    tokenizer = bundle.tokenizer()
    # Parameters of the model built from the bundle, not of `bundle.weights`: tied tables
    # are one Parameter there, while averaged files store each tied key as its own tensor.
    parameters = bundle.model(tokenizer, where=str(model_path)).num_parameters()
    recipe = bundle.recipe
    return ModelInfo(
        path=model_path,
        size=model_path.stat().st_size,
        mtkit_version=bundle.mtkit_version,
        format_version=format_version,
        # a multilingual model's default pair is its vocabulary's (chosen at import), which
        # a fine-tuned child keeps whatever its recipe's data.langs say
        langs=tokenizer.langs or (recipe.data.langs.src, recipe.data.langs.tgt),
        architecture={key: getattr(recipe.model, key) for key in ARCHITECTURE},
        parameters=parameters,
        vocab=(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size),
        joint=tokenizer.joint,
        model_type=(recipe.tokenizer.model_type if recipe.tokenizer.kind == "sentencepiece"
                    else "explicit vocabulary"),
        tags=tokenizer.tags,
        languages=tokenizer.languages,
        source_layout=_source_layout(tokenizer),
        decode={key: getattr(recipe.decode, key) for key in DECODE},
        trained=bundle.trained,
        resumable=bundle.train_state is not None,
        data_fingerprints=dict(bundle.data_fingerprints),
        averaged_from=list(bundle.averaged_from),
        parent=bundle.parent,
        imported=bundle.imported,
        run=None if run_dir is None else run_info(RunPaths(run_dir), model_path),
    )


def _resolve(path: Path) -> tuple[Path, Path | None]:
    """(the model file, its run directory or None) for a model file or a run directory."""
    if path.is_file():
        paths = RunPaths(path.parent)
        is_run_model = path.name == "model.pt" and (paths.model_stamp.is_file()
                                                    or paths.recipe_name.is_file())
        return path, paths.run_dir if is_run_model else None
    if not path.is_dir():
        raise CheckpointError(f"{path}: not found; give a model file or a run directory")
    paths = RunPaths(path)
    for model in (paths.model, paths.last):
        if model.is_file():
            return model, path
    if paths.recipe_name.is_file():
        raise ConfigError(f"{path}: the run has no model yet (no model.pt, no "
                          "checkpoints/checkpoint_last.pt); train it first")
    _refuse_other_models(path)
    raise ConfigError(f"{path}: not an mtkit run directory (no model.pt, no "
                      "checkpoints/checkpoint_last.pt); give a model file or a run directory")


def _refuse_other_models(path: Path) -> None:
    """A CTranslate2 export or a Hugging Face directory, said as such: neither is a bundle,
    but each comes from or leads to one."""
    from mtkit.decode.ct2 import MARKER, load_exported_marker

    if (path / MARKER).is_file():
        origin = load_exported_marker(path).get("exported_from")
        raise ConfigError(f"{path}: a CTranslate2 export, not an mtkit model file; run "
                          f"mtkit info {origin or 'on the model it was exported from'}")
    if (path / "config.json").is_file():
        raise ConfigError(f"{path}: a Hugging Face model directory, not an mtkit model; "
                          f"mtkit import {path} -o MODEL.pt, then mtkit info MODEL.pt")


def read_bundle(path: Path) -> tuple[Bundle, int]:
    """The bundle and its checkpoint format version, loading the file once.

    load_checkpoint drops format_version, so the raw dict is loaded here (as safely:
    weights_only). Whenever it is not a bundle this mtkit reads, load_checkpoint is asked
    to word the one-line error (text file, truncated, foreign, newer format).
    """
    raw: Any = None
    if zipfile.is_zipfile(path):  # torch.save writes zip archives
        try:
            raw = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - load_checkpoint below says what is wrong
            raw = None
    ours = isinstance(raw, dict) and raw.get("format") == FORMAT
    version = raw.get("format_version") if ours else None
    if not isinstance(version, int) or version > FORMAT_VERSION:
        load_checkpoint(path)  # raises the CheckpointError that fits
        raise CheckpointError(f"{path}: not an mtkit checkpoint")  # in case it did not
    return Bundle.from_dict(raw, where=str(path)), version


def run_info(paths: RunPaths, model_path: Path) -> RunInfo:
    """How the run chose `model_path`, its test scores (if of this very file) and dev BLEU.
    What a damaged or hand-edited file does not say is left out, never a crash."""
    stamp = read_json(paths.model_stamp) if model_path.name == "model.pt" else None
    choice_status = _choice_status(stamp, model_path)
    stamp = stamp if choice_status == "current" else {}
    chosen, dev_bleu = stamp.get("chosen"), stamp.get("dev_bleu")
    status, decode, scores = _test_scores(paths.eval / "scores.json", model_path)
    valid = [r for r in read_json_lines(paths.metrics)
             if r.get("event") == "valid" and _is_int(r.get("step"))]
    with_bleu = [(r["step"], r["bleu"]) for r in valid if _is_number(r.get("bleu"))]
    return RunInfo(
        run_dir=paths.run_dir,
        model_file=model_path.relative_to(paths.run_dir).as_posix(),
        chosen=chosen if isinstance(chosen, str) else None,
        dev_bleu={str(name): bleu for name, bleu in dev_bleu.items() if _is_number(bleu)}
        if isinstance(dev_bleu, dict) else {},
        choice_status=choice_status,
        scores_status=status,
        decode=decode,
        scores=scores,
        validations=len(valid),
        last_bleu=with_bleu[-1] if with_bleu else None,
        best_bleu=max(with_bleu, key=lambda r: r[1]) if with_bleu else None,  # first best
    )


def _choice_status(stamp: dict[str, Any] | None, model_path: Path) -> str:
    """Whether model.stamp.json describes `model_path`: its "model" fingerprint (stamps
    of earlier versions have none and are taken at their word) against the file's."""
    if stamp is None:
        return "absent"
    made = stamp.get("model")
    return "current" if made is None or made == file_fingerprint(model_path) else "stale"


def _test_scores(path: Path, model_path: Path) -> tuple[str, dict[str, Any], list[EvalScore]]:
    """(status, decode settings, scores) of eval/scores.json for `model_path`: "current"
    when it scored this very file, "stale" (a retrained model.pt), "absent" or "damaged"."""
    report = read_json(path)
    if report is None:
        return ("damaged" if path.exists() else "absent"), {}, []
    stamp = report.get("stamp")
    if not isinstance(stamp, dict):
        return "damaged", {}, []
    if stamp.get("model") != file_fingerprint(model_path):
        return "stale", {}, []
    try:
        decode = dict(report.get("decode", {}))
        results = list(report.get("results", []))
        names = test_set_names([Path(str(r["src"])) for r in results])
        scores = [EvalScore(str(r["src"]), test, str(metric), float(s["score"]),
                            str(s["signature"]))
                  for r, test in zip(results, names) for metric, s in r["scores"].items()]
    except (AttributeError, KeyError, TypeError, ValueError):  # fields of other types
        return "damaged", {}, []
    return "current", decode, scores


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _source_layout(tokenizer: Tokenizer) -> str:
    """Where a multilingual model's sources carry their language token ("" for others)."""
    if not tokenizer.languages:
        return ""
    if tokenizer.specials.tag_after_eos:
        return "pieces </s> [src_lang] (NLLB legacy_behaviour)"
    return "[src_lang] pieces </s>"
