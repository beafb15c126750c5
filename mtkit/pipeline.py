"""The recipe pipeline: tokenizer -> binarise -> train -> average -> evaluate.

Each stage writes a stamp describing its inputs (content fingerprints and settings);
a stage runs only when its stamp differs from what the recipe asks now, so running the
same command twice does no work the second time. Stages hand their artefacts on in a
`PipelineRun` (the tokenizer, the manifest, the model path) instead of reloading them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mtkit.config import Recipe
from mtkit.config.sampling import decode_stamp
from mtkit.data.binarize import binarize
from mtkit.data.corpora import training_fingerprints, training_splits
from mtkit.data.manifest import Manifest, load_manifest
from mtkit.data.recipe_splits import (
    binarize_staleness,
    recipe_splits,
    recipe_training_prints,
    train_max_len,
)
from mtkit.data.run_tokenizer import (
    given_tokenizer,
    load_recipe_tokenizer,
    stamp_changes,
    tokenizer_stamp,
    train_recipe_tokenizer,
    write_tokenizer,
)
from mtkit.data.tokenizer import Tokenizer
from mtkit.decode.engine import TorchEngine
from mtkit.decode.translate import Translator
from mtkit.errors import ConfigError
from mtkit.evaluate.validation import (
    DevSet,
    bundle_dev_bleu,
    evaluate_test_sets,
    hypothesis_paths,
    log_results,
    log_test_summary,
    tune_decoding,
)
from mtkit.files.atomic import atomic_write_bytes, atomic_write_json
from mtkit.files.textio import file_fingerprint, read_json
from mtkit.model.checkpoint import (
    Bundle,
    Parent,
    average_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from mtkit.report.plot import run_curves
from mtkit.runtime import distributed as dist
from mtkit.runtime.devices import resolve_device
from mtkit.train.finetune import load_parent, write_parent_tokenizer
from mtkit.train.run import (
    RESTART_ADVICE,
    RunLock,
    RunPaths,
    check_same_data,
    check_same_model,
    training_complete,
)
from mtkit.train.trainer import train

log = logging.getLogger("mtkit")


@dataclass
class PipelineRun:
    """One `mtkit train RECIPE`: its settings, and what each stage hands to the next."""

    recipe: Recipe
    paths: RunPaths
    device: torch.device
    restart: bool = False
    tokenizer: Tokenizer | None = None  # from the tokenizer stage
    manifest: Manifest | None = None  # from the binarize stage
    model: Path | None = None  # model.pt, from the average stage
    chosen: str = ""  # what model.pt is ("average" or a checkpoint's name), ditto
    scores: dict[str, Any] | None = None  # eval/scores.json, from the eval stage
    parent: tuple[Bundle, Parent] | None = None  # train.init_from, read and checked first
    given_tokenizer: Tokenizer | None = None  # tokenizer.model, read and checked first
    workers: int = 0  # binarize's encoding processes (0: every core)
    _dev: DevSet | None = None

    def dev(self) -> DevSet:
        """The first train.valid_bleu_lines dev lines (all if 0), read once for averaging
        and tuning."""
        if self._dev is None:
            data = self.recipe.data
            self._dev = DevSet.read(data.valid, data.langs.tgt, self.recipe.train.valid_bleu_lines)
        return self._dev


def run_pipeline(recipe: Recipe, run_dir: Path, until: str | None = None, restart: bool = False,
                 device: str | torch.device = "auto", workers: int = 0) -> None:
    """The stages, in order. Under torchrun every rank runs this: rank 0 holds the run
    directory's lock and does the work of one process (tokenizer, binarise, average, eval,
    every file written), all ranks train."""
    run = PipelineRun(recipe, RunPaths(run_dir), resolve_device(device), restart, workers=workers)
    if recipe.train.init_from is not None:
        recipe, bundle, lineage = load_parent(recipe)  # bad input ends here, unwritten
        run.recipe, run.parent = recipe, (bundle, lineage)
    if recipe.tokenizer.model is not None:
        run.given_tokenizer = given_tokenizer(recipe)
    if not dist.is_main():
        dist.wait_for_main()  # until rank 0 holds the run directory
        _run_stages(run, until)
        return
    with ExitStack() as held:
        with dist.main_alone():  # the other ranks wait until rank 0 holds the run directory
            run_dir.mkdir(parents=True, exist_ok=True)
            held.enter_context(RunLock(run_dir))
            _claim_run_dir(run)
            _check_continuation(run)
        dist.wait_for_main()
        _run_stages(run, until)


def _run_stages(run: PipelineRun, until: str | None) -> None:
    timings = {}
    for name, stage in STAGES.items():
        start = time.perf_counter()
        # rank 0 averages and evaluates while the others wait for the job's end (launch.py)
        with dist.main_alone(name in ("average", "eval")):
            stage(run)
        timings[name] = round(time.perf_counter() - start, 1)
        if name == until:
            log.info("stopping after stage %s (--until)", name)
            break
    if not dist.is_main():
        return
    log.info("stage wall times (s): %s", ", ".join(f"{k} {v}" for k, v in timings.items()))
    if run.model is not None:
        _summary(run, run_curves(run.paths.run_dir, run.paths.metrics))


def _summary(run: PipelineRun, curves: Path | None) -> None:
    """The end of `mtkit train`: where the model is, what it scores, how to use it."""
    what = "the average" if run.chosen == "average" else run.chosen
    log.info("[done] model: %s (%s)", run.model, what)
    log_test_summary((run.scores or {}).get("results", []))
    if curves is not None:
        log.info("[done] curves: %s", curves)
    log.info("[done] translate with: mtkit translate -m %s < input.%s > output.%s", run.model,
             run.recipe.data.langs.src, run.recipe.data.langs.tgt)


def _claim_run_dir(run: PipelineRun) -> None:
    """A run directory belongs to one recipe name; refuse to mix two in one place."""
    owner_file, name = run.paths.recipe_name, run.recipe.name
    if owner_file.is_file():
        owner = owner_file.read_text(encoding="utf-8").strip()
        if owner != name:
            raise ConfigError(
                f"{run.paths.run_dir}: this run directory belongs to recipe '{owner}', not "
                f"'{name}'; use another --run-dir"
            )
    else:
        atomic_write_bytes(owner_file, name.encode() + b"\n")


def _check_continuation(run: PipelineRun) -> None:
    """Refuse a run that cannot continue under this recipe before the tokenizer and
    binarize stages rewrite its files: those would then no longer match its checkpoints.
    The train stage checks again, against what the stages made."""
    paths = run.paths
    if run.restart or not paths.last.is_file():
        return
    bundle = load_checkpoint(paths.last, mmap=True)  # its settings, not its weights
    if bundle.parent is not None and run.recipe.train.init_from is None:
        # else the defaults standing in for the parent's model section are what differs
        raise ConfigError(f"{paths.run_dir}: this run started from train.init_from "
                          f"{bundle.parent.path}; give it again to continue the run, or "
                          f"{RESTART_ADVICE}")
    check_same_model(bundle, run.recipe, paths.run_dir)
    # the training files first: when they changed, the tokenizer's stamp changed too
    check_same_data(bundle, _training_fingerprints(run, recipe_training_prints(run.recipe)),
                    paths.run_dir, ignore=("tokenizer",))
    old = read_json(paths.tokenizer / "stamp.json")
    new = _tokenizer_plan(run)[0]
    if old is not None and old != new:  # the tokenizer stage would make another
        raise ConfigError(f"{paths.run_dir}: the tokenizer changed since this run started "
                          f"({', '.join(stamp_changes(old, new))}); {RESTART_ADVICE}")


# --------------------------------------------------------------------------- stamps


def _write_stamp(path: Path, stamp: dict[str, Any]) -> None:
    atomic_write_json(path, stamp, indent=1)


def _skip(stage: str, why: str) -> None:
    log.info("[%s] skipped: %s", stage, why)


def _run(stage: str, why: str) -> None:
    log.info("[%s] running: %s", stage, why)


# --------------------------------------------------------------------------- tokenizer


def _main_then_all(work: Callable[[], None], load: Callable[[], None]) -> None:
    """Rank 0 does `work`; the other ranks wait for it, then `load` what it wrote."""
    if dist.is_main():
        with dist.main_alone():
            work()
    dist.wait_for_main()
    if not dist.is_main():
        load()


def tokenizer_stage(run: PipelineRun) -> None:
    def load() -> None:
        run.tokenizer = load_recipe_tokenizer(run.paths.tokenizer, run.recipe.tokenizer.joint)

    _main_then_all(lambda: _tokenizer(run), load)


def _tokenizer_plan(run: PipelineRun) -> tuple[dict[str, Any], str, str]:
    """(stamp, why it is kept, where it comes from) of the run's SentencePiece model: the
    parent's (train.init_from), the one tokenizer.model names, or one trained on the
    training text."""
    recipe = run.recipe
    if run.parent is not None:
        return ({"init_from": run.parent[1].fingerprint}, "the parent model's, unchanged",
                f"{run.parent[1].path} (train.init_from)")
    if run.given_tokenizer is not None:
        return ({"model": run.given_tokenizer.fingerprint()}, "tokenizer.model's, unchanged",
                f"{recipe.tokenizer.model} (tokenizer.model)")
    return tokenizer_stamp(recipe), "settings and training text unchanged", ""


def _tokenizer(run: PipelineRun) -> None:
    """The run's SentencePiece model (_tokenizer_plan), each as it is kept."""
    recipe, out_dir = run.recipe, run.paths.tokenizer
    stamp_path = out_dir / "stamp.json"
    stamp, kept, source = _tokenizer_plan(run)
    old = read_json(stamp_path)
    if old == stamp:
        try:
            run.tokenizer = load_recipe_tokenizer(out_dir, recipe.tokenizer.joint)
            _skip("tokenizer", kept)
            return
        except Exception:  # noqa: BLE001 - a damaged model file is simply rebuilt
            old = None
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp_path.unlink(missing_ok=True)
    if run.parent is not None:
        _run("tokenizer", f"taking the SentencePiece model of {source}")
        run.tokenizer = write_parent_tokenizer(recipe, run.parent[0], out_dir)
    elif run.given_tokenizer is not None:
        _run("tokenizer", f"taking the SentencePiece model of {source}")
        run.tokenizer = write_tokenizer(run.given_tokenizer, out_dir)
    else:
        _run("tokenizer", "no tokenizer yet" if old is None
             else "settings or training text changed")
        run.tokenizer = train_recipe_tokenizer(recipe, out_dir)
    _write_stamp(stamp_path, stamp)


# --------------------------------------------------------------------------- binarize


def binarize_recipe(recipe: Recipe, paths: RunPaths, tokenizer: Tokenizer,
                    workers: int = 0) -> Manifest:
    """Binarise the recipe's train/valid splits with its (already trained) tokenizer."""
    corpora = training_splits(recipe)
    tags = {name: c.tag for name, c in corpora if c.tag is not None}
    links = {name: c.alignments for name, c in corpora if c.alignments is not None}
    return binarize(tokenizer, recipe_splits(recipe), paths.data, workers, train_max_len(recipe),
                    recipe.data.max_ratio, tuple(name for name, _ in corpora), tags, links)


def binarize_stage(run: PipelineRun) -> None:
    def load() -> None:
        run.manifest = load_manifest(run.paths.data)

    _main_then_all(lambda: _binarize(run), load)


def _binarize(run: PipelineRun) -> None:
    manifest = load_manifest(run.paths.data)
    why = binarize_staleness(run.recipe, run.tokenizer, manifest)
    if not why:
        _skip("binarize", "tokenizer, data files and filters unchanged")
        run.manifest = manifest
        return
    _run("binarize", why)
    filters = (train_max_len(run.recipe), run.recipe.data.max_ratio)
    if manifest is not None and (manifest.max_len, manifest.max_ratio) != filters \
            and run.paths.last.is_file() and not run.restart:
        log.warning("binarize: data.max_len or data.max_ratio changed since this run "
                    "started: it goes on with other training pairs, no longer as an "
                    "uninterrupted run would")
    run.manifest = binarize_recipe(run.recipe, run.paths, run.tokenizer, run.workers)


# --------------------------------------------------------------------------- train


def _training_fingerprints(run: PipelineRun, manifest_prints: dict[str, str]) -> dict[str, str]:
    """What identifies the run's training data in its checkpoints."""
    fingerprints = training_fingerprints(run.recipe, manifest_prints)
    if run.parent is not None:  # a run is the continuation of one parent only
        fingerprints["init_from"] = run.parent[1].fingerprint
    return fingerprints


def train_stage(run: PipelineRun) -> None:
    recipe, paths = run.recipe, run.paths
    fingerprints = _training_fingerprints(run, run.manifest.training_fingerprints())
    done = "" if run.restart else training_complete(recipe, paths.run_dir, run.tokenizer,
                                                    fingerprints)
    if done:
        _skip("train", f"training complete ({done})")
    else:
        resuming = paths.last.is_file() and not run.restart
        _run("train", "resuming the run" if resuming else "starting a new run")
        train(recipe, paths.run_dir, run.tokenizer, paths.data, fingerprints, run.device,
              run.restart, run.parent)
    if dist.is_main():
        _record_recipe(recipe, paths)  # the run accepted this recipe


def _record_recipe(recipe: Recipe, paths: RunPaths) -> None:
    """RUN_DIR/recipe.yaml: the resolved recipe the run's files were made with."""
    text = recipe.to_yaml().encode("utf-8")
    if not paths.recipe_yaml.is_file() or paths.recipe_yaml.read_bytes() != text:
        atomic_write_bytes(paths.recipe_yaml, text)


# --------------------------------------------------------------------------- average


def average_stage(run: PipelineRun) -> None:
    """model.pt: the average that `train.average` names (the last K step checkpoints or
    the K best by dev score), the weights' moving average (`train.ema`) or the best single
    checkpoint, whichever translates the dev set best (early in training an average that
    reaches back to weaker checkpoints can lose to the newest one)."""
    if not dist.is_main():
        return  # one process averages
    recipe, paths = run.recipe, run.paths
    average = recipe.train.average
    best = paths.best if paths.best.is_file() else paths.last
    sources = {
        "last": paths.step_checkpoints()[-average.k:] if average.k else [],
        "best": paths.top_checkpoints(),  # training kept exactly the K best
    }.get(average.kind, [])
    ema = paths.ema if recipe.train.ema and paths.ema.is_file() else None
    run.model = paths.model
    stamp = {"sources": [[p.name, file_fingerprint(p)]
                         for p in [*sources, *([ema] if ema else []), best]]}
    old = read_json(paths.model_stamp)
    if paths.model.is_file() and old is not None and old.get("sources") == stamp["sources"]:
        _skip("average", "model.pt is up to date with its checkpoints")
        run.chosen = old.get("chosen", "")
        return
    # the candidates, in the order that wins a tie: the average, the EMA, the best
    candidates: dict[str, Bundle] = {}
    if len(sources) > 1:
        candidates["average"] = average_checkpoints(sources)
    if ema is not None:
        candidates["ema"] = load_checkpoint(ema)
    candidates[best.name] = load_checkpoint(best).without_train_state()
    chosen = next(iter(candidates))
    if len(candidates) == 1:
        _run("average", f"model.pt is {best.name}")
    else:
        averaged = f" (the average of {average.kind} {len(sources)})" if len(sources) > 1 else ""
        _run("average", f"choosing model.pt among {', '.join(candidates)}{averaged}")
        if recipe.data.valid is not None:
            dev = run.dev()
            scores = {name: bundle_dev_bleu(bundle, recipe.decode, recipe.train.max_tokens, dev,
                                            run.device) for name, bundle in candidates.items()}
            stamp["dev_bleu"] = scores
            log.info("[average] dev BLEU: %s",
                     " | ".join(f"{name} {score:.2f}" for name, score in scores.items()))
            chosen = max(scores, key=lambda name: scores[name])  # the first of equals
    bundle = candidates[chosen]
    log.info("[average] model.pt is %s", "the average" if chosen == "average" else chosen)
    stamp["chosen"] = run.chosen = chosen
    paths.model_stamp.unlink(missing_ok=True)
    save_checkpoint(paths.model, bundle)
    stamp["model"] = file_fingerprint(paths.model)  # `info` trusts `chosen` while it is this
    _write_stamp(paths.model_stamp, stamp)


# --------------------------------------------------------------------------- eval


def eval_stage(run: PipelineRun) -> None:
    """Tune beam x lenpen on dev (when asked), decode and score every test set, report."""
    if not dist.is_main():
        return  # one process evaluates
    recipe, paths, tgt = run.recipe, run.paths, run.recipe.data.langs.tgt
    if not recipe.data.test:
        _skip("eval", "the recipe has no data.test sets")
        return
    scores_path = paths.eval / "scores.json"
    stamp = {
        "model": file_fingerprint(paths.model),
        "decode": decode_stamp(recipe.to_dict()["decode"], recipe.decode.sampling),
        "tests": [[file_fingerprint(t.src), file_fingerprint(t.tgt)] for t in recipe.data.test],
    }
    old, written = read_json(scores_path), hypothesis_paths(recipe.data.test, paths.eval, tgt)
    # a file missing: deleted, or data.langs.tgt (which also picks the BLEU tokenizer) changed
    if old is not None and old.get("stamp") == stamp and all(p.is_file() for p in written):
        _skip("eval", "scores.json is up to date with model.pt and the test sets")
        run.scores = old
        return
    _run("eval", f"translating {len(recipe.data.test)} test set(s) with model.pt")
    engine = TorchEngine.load([paths.model], run.device)
    settings, grid = recipe.decode, None
    if (settings.tune_beam or settings.tune_lenpen) and recipe.data.valid is not None:
        settings, grid = tune_decoding(engine, settings, run.dev(), recipe.train.max_tokens)
        log.info("[eval] decoding the test sets with beam %d, lenpen %g (best on dev)",
                 settings.beam, settings.lenpen)
    translator = Translator(engine, settings, recipe.train.max_tokens)
    results = evaluate_test_sets(translator, recipe.data.test, paths.eval, tgt)
    report = {"stamp": stamp,
              "decode": {"beam": settings.beam, "lenpen": settings.lenpen, "stop": settings.stop},
              "results": [r.to_dict() for r in results]}
    if grid is not None:
        report["dev_grid"] = grid
    _write_stamp(scores_path, report)
    run.scores = report
    log_results(results)


STAGES: dict[str, Callable[[PipelineRun], None]] = {
    "tokenizer": tokenizer_stage,
    "binarize": binarize_stage,
    "train": train_stage,
    "average": average_stage,
    "eval": eval_stage,
}
