"""The recipe pipeline: tokenizer -> binarise -> train -> average -> evaluate.

Each stage writes a stamp describing its inputs (content fingerprints and settings);
a stage runs only when its stamp differs from what the recipe asks now, so running the
same command twice does no work the second time.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from .checkpoint import (
    atomic_write,
    average_checkpoints,
    load_checkpoint,
    save_checkpoint,
    without_train_state,
)
from .config import Recipe
from .data import binarize, file_fingerprint, load_manifest, read_lines
from .errors import ConfigError
from .metrics import corpus_scores
from .model import Transformer
from .runtime import resolve_device
from .tokenizer import Tokenizer, load_recipe_tokenizer, train_recipe_tokenizer
from .train import RunPaths, train, training_complete
from .translate import DecodeOptions, Translator, load_models, model_from_bundle

log = logging.getLogger("mtkit")

STAGES = ("tokenizer", "binarize", "train", "average", "eval")


def run_pipeline(
    recipe: Recipe,
    run_dir: Path,
    until: str | None = None,
    restart: bool = False,
    device: str = "auto",
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    _claim_run_dir(recipe, run_dir)
    steps = [
        ("tokenizer", lambda: tokenizer_stage(recipe, run_dir)),
        ("binarize", lambda: binarize_stage(recipe, run_dir)),
        ("train", lambda: train_stage(recipe, run_dir, restart, device)),
        ("average", lambda: average_stage(recipe, run_dir, device)),
        ("eval", lambda: eval_stage(recipe, run_dir, device)),
    ]
    timings = {}
    for name, stage in steps:
        start = time.perf_counter()
        stage()
        timings[name] = round(time.perf_counter() - start, 1)
        if name == "train":  # the run accepted this recipe
            _record_recipe(recipe, run_dir)
        if name == until:
            log.info("stopping after stage %s (--until)", name)
            break
    log.info("stage wall times (s): %s", ", ".join(f"{k} {v}" for k, v in timings.items()))


def _claim_run_dir(recipe: Recipe, run_dir: Path) -> None:
    """A run directory belongs to one recipe name; refuse to mix two in one place."""
    owner_name = run_dir / "recipe.name"
    if owner_name.is_file():
        owner = owner_name.read_text(encoding="utf-8").strip()
        if owner != recipe.name:
            raise ConfigError(
                f"{run_dir}: this run directory belongs to recipe '{owner}', not "
                f"'{recipe.name}'; use another --run-dir"
            )
    else:
        atomic_write(owner_name, lambda f: f.write(recipe.name.encode() + b"\n"))


def _record_recipe(recipe: Recipe, run_dir: Path) -> None:
    """RUN_DIR/recipe.yaml: the resolved recipe the run's files were made with."""
    path = run_dir / "recipe.yaml"
    text = recipe.to_yaml().encode("utf-8")
    if not path.is_file() or path.read_bytes() != text:
        atomic_write(path, lambda f: f.write(text))


# --------------------------------------------------------------------------- stamps


def _read_stamp(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _write_stamp(path: Path, stamp: dict[str, Any]) -> None:
    atomic_write(path, lambda f: f.write(json.dumps(stamp, indent=1).encode("utf-8")))


def _skip(stage: str, why: str) -> None:
    log.info("[%s] skipped: %s", stage, why)


def _run(stage: str, why: str) -> None:
    log.info("[%s] running: %s", stage, why)


# --------------------------------------------------------------------------- stages


def tokenizer_stage(recipe: Recipe, run_dir: Path) -> Tokenizer:
    out_dir = run_dir / "tokenizer"
    stamp_path = out_dir / "stamp.json"
    train_files = [recipe.data.train.src, recipe.data.train.tgt]
    stamp = {
        "settings": asdict(recipe.tokenizer),
        "inputs": [file_fingerprint(p) for p in train_files],
    }
    old = _read_stamp(stamp_path)
    if old == stamp:
        try:
            tokenizer = load_recipe_tokenizer(out_dir, recipe.tokenizer.joint)
            _skip("tokenizer", "settings and training text unchanged")
            return tokenizer
        except Exception:  # noqa: BLE001 - a damaged model file is simply rebuilt
            old = None
    _run("tokenizer", "no tokenizer yet" if old is None else "settings or training text changed")
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp_path.unlink(missing_ok=True)
    tokenizer = train_recipe_tokenizer(recipe, out_dir)
    _write_stamp(stamp_path, stamp)
    return tokenizer


def _splits(recipe: Recipe) -> dict[str, tuple[Path, Path]]:
    splits = {"train": (recipe.data.train.src, recipe.data.train.tgt)}
    if recipe.data.valid is not None:
        splits["valid"] = (recipe.data.valid.src, recipe.data.valid.tgt)
    return splits


def _train_max_len(recipe: Recipe) -> int:
    """Longest training side kept: the recipe's filter, within what the model can hold."""
    return min(recipe.data.max_len, recipe.model.max_positions - 1)


def binarize_recipe(recipe: Recipe, run_dir: Path, workers: int = 0) -> dict[str, Any]:
    """Binarise the recipe's train/valid splits with its (already trained) tokenizer."""
    tokenizer = load_recipe_tokenizer(run_dir / "tokenizer", recipe.tokenizer.joint)
    return binarize(
        tokenizer, _splits(recipe), run_dir / "data", workers,
        _train_max_len(recipe), recipe.data.max_ratio,
    )


def data_fingerprints(manifest: dict[str, Any]) -> dict[str, str]:
    """What identifies the training data in checkpoints: tokenizer + train files."""
    train = manifest["splits"]["train"]
    return {
        "tokenizer": manifest["tokenizer"],
        "train.src": train["src"]["fingerprint"],
        "train.tgt": train["tgt"]["fingerprint"],
    }


def binarize_stage(recipe: Recipe, run_dir: Path) -> dict[str, Any]:
    tokenizer = load_recipe_tokenizer(run_dir / "tokenizer", recipe.tokenizer.joint)
    manifest = load_manifest(run_dir / "data")
    why = _binarize_staleness(recipe, tokenizer, manifest)
    if not why:
        _skip("binarize", "tokenizer, data files and filters unchanged")
        return manifest
    _run("binarize", why)
    return binarize_recipe(recipe, run_dir)


def _binarize_staleness(recipe: Recipe, tokenizer: Tokenizer, manifest: dict | None) -> str:
    if manifest is None:
        return "no binarised data yet"
    if manifest.get("tokenizer") != tokenizer.fingerprint():
        return "the tokenizer changed"
    filters = (manifest.get("max_len"), manifest.get("max_ratio"))
    if filters != (_train_max_len(recipe), recipe.data.max_ratio):
        return "data.max_len, data.max_ratio or model.max_positions changed"
    splits = _splits(recipe)
    if set(manifest["splits"]) != set(splits):
        return "the recipe's splits changed"
    for name, (src, tgt) in splits.items():
        for side, path in (("src", src), ("tgt", tgt)):
            if manifest["splits"][name][side]["fingerprint"] != file_fingerprint(path):
                return f"{path} changed"
    return ""


def train_stage(recipe: Recipe, run_dir: Path, restart: bool, device: str) -> None:
    manifest = load_manifest(run_dir / "data")
    tokenizer = load_recipe_tokenizer(run_dir / "tokenizer", recipe.tokenizer.joint)
    fingerprints = data_fingerprints(manifest)
    if not restart:
        done = training_complete(recipe, run_dir, tokenizer, fingerprints)
        if done:
            _skip("train", f"training complete ({done})")
            return
    resuming = RunPaths(run_dir).last.is_file() and not restart
    _run("train", "resuming the run" if resuming else "starting a new run")
    train(recipe, run_dir, tokenizer, run_dir / "data", fingerprints, device, restart)


def average_stage(recipe: Recipe, run_dir: Path, device: str = "auto") -> Path:
    """model.pt: the average that `train.average` names (the last K step checkpoints or
    the K best by dev score) or the best single checkpoint, whichever translates the dev
    set better (early in training an average that reaches back to weaker checkpoints can
    lose to the newest one)."""
    paths = RunPaths(run_dir)
    kind, k = recipe.train.average_kind, recipe.train.average_k
    best = paths.best if paths.best.is_file() else paths.last
    sources = {
        "last": paths.step_checkpoints()[-k:],
        "best": paths.top_checkpoints(),  # training kept exactly the K best
    }.get(kind, [])
    target = run_dir / "model.pt"
    stamp_path = run_dir / "model.stamp.json"
    stamp = {"sources": [[p.name, file_fingerprint(p)] for p in [*sources, best]]}
    old = _read_stamp(stamp_path)
    if target.is_file() and old is not None and old.get("sources") == stamp["sources"]:
        _skip("average", "model.pt is up to date with its checkpoints")
        return target
    best_bundle = without_train_state(load_checkpoint(best))
    chosen, bundle = best.name, best_bundle
    if len(sources) > 1:
        _run("average", f"averaging {len(sources)} checkpoints, comparing with {best.name}")
        averaged = average_checkpoints(sources)
        if recipe.data.valid is not None:
            scores = {
                "average": dev_bleu(recipe, averaged, device),
                best.name: dev_bleu(recipe, best_bundle, device),
            }
            stamp["dev_bleu"] = scores
            log.info("[average] dev BLEU: average of %s %d %.2f | %s %.2f", kind,
                     len(sources), scores["average"], best.name, scores[best.name])
            if scores["average"] >= scores[best.name]:
                chosen, bundle = "average", averaged
        else:
            chosen, bundle = "average", averaged
    else:
        _run("average", f"model.pt is {best.name}")
    log.info("[average] model.pt is %s", "the average" if chosen == "average" else chosen)
    stamp["chosen"] = chosen
    stamp_path.unlink(missing_ok=True)
    save_checkpoint(target, bundle)
    _write_stamp(stamp_path, stamp)
    return target


def dev_bleu(recipe: Recipe, bundle: dict[str, Any], device: str) -> float:
    """Greedy BLEU of a model bundle on the first `valid_bleu_lines` dev lines (all if 0)."""
    torch_device = resolve_device(device)
    tokenizer = Tokenizer.from_bytes(bundle["spm_src"], bundle["spm_tgt"])
    model = model_from_bundle(bundle, tokenizer, "model.pt").to(torch_device)
    translator = _translator(recipe, [model], tokenizer, torch_device, 1, 1.0)
    return _bleu_on_dev(recipe, translator, *_dev_lines(recipe))


def _translator(recipe: Recipe, models: list[Transformer], tokenizer: Tokenizer,
                device: torch.device, beam: int, lenpen: float) -> Translator:
    d = recipe.decode
    options = DecodeOptions(beam=beam, lenpen=lenpen, stop=d.stop, max_len_a=d.max_len_a,
                            max_len_b=d.max_len_b, max_tokens=recipe.train.max_tokens)
    return Translator(models, tokenizer, options, device)


def _dev_lines(recipe: Recipe) -> tuple[list[str], list[str]]:
    """The first `valid_bleu_lines` dev sources and references (all if 0)."""
    limit = recipe.train.valid_bleu_lines or None
    sources = list(read_lines(recipe.data.valid.src))[:limit]
    refs = list(read_lines(recipe.data.valid.tgt))[:limit]
    return sources, refs


def _bleu_on_dev(recipe: Recipe, translator: Translator, sources: list[str],
                 refs: list[str]) -> float:
    hyps = translator.format(translator.translate(sources), 0)
    return corpus_scores(hyps, [refs], ("bleu",), tgt_lang=recipe.data.langs.tgt)[0].score


def tune_decoding(
    recipe: Recipe, models: list[Transformer], tokenizer: Tokenizer, device: torch.device
) -> tuple[int, float, list[dict[str, float]]]:
    """Dev BLEU of every `decode.tune_beam` x `decode.tune_lenpen`; the best setting (the
    first listed among equals) and the whole grid."""
    d = recipe.decode
    sources, refs = _dev_lines(recipe)
    grid = []
    for beam in d.tune_beam or (d.beam,):
        for lenpen in d.tune_lenpen or (d.lenpen,):
            translator = _translator(recipe, models, tokenizer, device, beam, lenpen)
            bleu = round(_bleu_on_dev(recipe, translator, sources, refs), 2)
            log.info("[eval] dev BLEU with beam %d, lenpen %g: %.2f", beam, lenpen, bleu)
            grid.append({"beam": beam, "lenpen": lenpen, "dev_bleu": bleu})
    chosen = max(grid, key=lambda row: row["dev_bleu"])  # max keeps the first of equals
    return chosen["beam"], chosen["lenpen"], grid


def eval_stage(recipe: Recipe, run_dir: Path, device: str) -> dict[str, Any] | None:

    if not recipe.data.test:
        _skip("eval", "the recipe has no data.test sets")
        return None
    model_path = run_dir / "model.pt"
    eval_dir = run_dir / "eval"
    scores_path = eval_dir / "scores.json"
    stamp = {
        "model": file_fingerprint(model_path),
        "decode": recipe.to_dict()["decode"],
        "tests": [[file_fingerprint(t.src), file_fingerprint(t.tgt)] for t in recipe.data.test],
    }
    old = _read_stamp(scores_path)
    if old is not None and old.get("stamp") == stamp:
        _skip("eval", "scores.json is up to date with model.pt and the test sets")
        return old
    _run("eval", f"translating {len(recipe.data.test)} test set(s) with model.pt")
    torch_device = resolve_device(device)
    models, tokenizer, _ = load_models([model_path], torch_device)
    d = recipe.decode
    beam, lenpen, grid = d.beam, d.lenpen, None
    if (d.tune_beam or d.tune_lenpen) and recipe.data.valid is not None:
        beam, lenpen, grid = tune_decoding(recipe, models, tokenizer, torch_device)
        log.info("[eval] decoding the test sets with beam %d, lenpen %g (best on dev)",
                 beam, lenpen)
    translator = _translator(recipe, models, tokenizer, torch_device, beam, lenpen)
    eval_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for test in recipe.data.test:
        sources = list(read_lines(test.src))
        refs = list(read_lines(test.tgt))
        start = time.perf_counter()
        hyps = translator.format(translator.translate(sources), 0)
        seconds = time.perf_counter() - start
        hyp_path = eval_dir / f"{test.src.name}.hyp.{recipe.data.langs.tgt}"
        text = "".join(h + "\n" for h in hyps).encode("utf-8")
        atomic_write(hyp_path, lambda f, text=text: f.write(text))
        scores = corpus_scores(
            hyps,
            [refs],
            ("bleu", "chrf"),
            tgt_lang=recipe.data.langs.tgt,
            ref_names=[str(test.tgt)],
        )
        results.append(
            {
                "src": str(test.src),
                "ref": str(test.tgt),
                "hyp": str(hyp_path),
                "lines": len(hyps),
                "seconds": round(seconds, 1),
                "scores": {
                    s.name: {"score": round(s.score, 2), "signature": s.signature} for s in scores
                },
            }
        )
    report = {"stamp": stamp, "decode": {"beam": beam, "lenpen": lenpen, "stop": d.stop},
              "results": results}
    if grid is not None:
        report["dev_grid"] = grid
    _write_stamp(scores_path, report)
    _print_table(results)
    return report


def _print_table(results: list[dict[str, Any]]) -> None:
    for r in results:
        parts = [f"{name} {v['score']:.2f}" for name, v in r["scores"].items()]
        log.info("[eval] %s (%d lines): %s", Path(r["src"]).name, r["lines"], " | ".join(parts))
        for name, v in r["scores"].items():
            log.info("[eval]   %s signature: %s", name, v["signature"])
