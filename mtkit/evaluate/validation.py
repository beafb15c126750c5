"""Measuring a model on held-out data: validation during training (dev loss and BLEU),
dev BLEU for averaging and tuning, and test-set evaluation.

Every translation here goes through a `Translator`, the object `mtkit translate` uses, so
a score printed during training or by the pipeline is what a user would get by running
`mtkit translate` with the same settings and `mtkit score` on its output.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mtkit.config import DecodeConfig, Pair, Recipe, Sampling
from mtkit.data.batching import BatchSampler, make_batch
from mtkit.data.dataset import ParallelData
from mtkit.data.tokenizer import SpecialIds, Tokenizer
from mtkit.decode.engine import Engine, TorchEngine
from mtkit.decode.translate import Translator
from mtkit.evaluate.metrics import Score, corpus_scores
from mtkit.files.atomic import atomic_write_bytes
from mtkit.files.textio import read_lines
from mtkit.model.checkpoint import Bundle
from mtkit.model.loss import label_smoothed_nll
from mtkit.model.transformer import Transformer

log = logging.getLogger("mtkit")


@dataclass(frozen=True)
class DevSet:
    """The dev lines BLEU is measured on during training, averaging and tuning."""

    sources: list[str]
    refs: list[str]
    tgt_lang: str

    @classmethod
    def read(cls, pair: Pair, tgt_lang: str, limit: int = 0) -> DevSet:
        """The first `limit` lines of the pair (all if 0)."""
        count = limit or None
        return cls(list(itertools.islice(read_lines(pair.src), count)),
                   list(itertools.islice(read_lines(pair.tgt), count)), tgt_lang)


def greedy(settings: DecodeConfig) -> DecodeConfig:
    """Validation decodes greedily: cheap, and what training progress is judged by (never
    by sampling, whatever the recipe's decode.sampling)."""
    return dataclasses.replace(settings, beam=1, lenpen=1.0, nbest=1, sampling=Sampling())


def dev_bleu(translator: Translator, dev: DevSet) -> float:
    hyps = translator.translate(dev.sources)
    return corpus_scores(hyps, [dev.refs], ("bleu",), tgt_lang=dev.tgt_lang)[0].score


def bundle_dev_bleu(bundle: Bundle, settings: DecodeConfig, max_tokens: int, dev: DevSet,
                    device: torch.device) -> float:
    """Greedy dev BLEU of a model bundle, as validation during training measures it."""
    engine = TorchEngine.from_bundles([bundle], ["model.pt"], device)
    return dev_bleu(Translator(engine, greedy(settings), max_tokens), dev)


def tune_decoding(engine: Engine, settings: DecodeConfig, dev: DevSet,
                  max_tokens: int) -> tuple[DecodeConfig, list[dict[str, float]]]:
    """Dev BLEU of every `tune_beam` x `tune_lenpen`; the best setting (the first listed
    among equals) and the whole grid."""
    grid = []
    for beam in settings.tune_beam or (settings.beam,):
        for lenpen in settings.tune_lenpen or (settings.lenpen,):
            trial = dataclasses.replace(settings, beam=beam, lenpen=lenpen, nbest=1)
            bleu = round(dev_bleu(Translator(engine, trial, max_tokens), dev), 2)
            log.info("[eval] dev BLEU with beam %d, lenpen %g: %.2f", beam, lenpen, bleu)
            grid.append({"beam": beam, "lenpen": lenpen, "dev_bleu": bleu})
    chosen = max(grid, key=lambda row: row["dev_bleu"])  # max keeps the first of equals
    return dataclasses.replace(settings, beam=chosen["beam"], lenpen=chosen["lenpen"]), grid


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class Validation:
    loss: float  # per target token, without label smoothing
    nll: float
    ppl: float
    bleu: float | None  # greedy, on the first train.valid_bleu_lines dev lines

    def score(self, best_metric: str) -> float:
        """Higher is better: dev BLEU, or minus the dev loss."""
        return self.bleu if best_metric == "bleu" and self.bleu is not None else -self.loss

    def record(self) -> dict[str, float]:
        """The metrics.jsonl fields."""
        fields = {"loss": self.loss, "nll": self.nll, "ppl": self.ppl}
        return fields if self.bleu is None else {**fields, "bleu": self.bleu}


class Validator:
    """What training judges a model by: teacher-forced dev loss on the binarised dev split,
    and greedy dev BLEU through the same Translator as `mtkit translate`."""

    def __init__(self, recipe: Recipe, tokenizer: Tokenizer, valid_data: ParallelData,
                 device: torch.device):
        self.recipe, self.tokenizer, self.data, self.device = recipe, tokenizer, valid_data, device
        self.max_len = recipe.model.max_positions - 1  # tokens per side before EOS/BOS
        lines = min(recipe.train.valid_bleu_lines, len(valid_data))
        valid = recipe.data.valid
        self.dev = None if valid is None or lines == 0 else DevSet.read(
            valid, recipe.data.langs.tgt, limit=lines)  # read once for the whole run

    def __call__(self, model: Transformer) -> Validation:
        max_tokens = self.recipe.train.max_tokens
        loss, nll = evaluate_loss(model, self.data, max_tokens, self.device, self.max_len,
                                  self.tokenizer.specials)
        bleu = None
        if self.dev is not None:
            # a new engine each run: it decodes with the weights the model has now
            engine = TorchEngine([model], self.tokenizer, self.recipe, self.device)
            bleu = dev_bleu(Translator(engine, greedy(self.recipe.decode), max_tokens), self.dev)
        return Validation(loss, nll, math.exp(min(nll, 50.0)), bleu)


@torch.no_grad()
def evaluate_loss(model: Transformer, data: ParallelData, max_tokens: int,
                  device: torch.device, max_len: int,
                  specials: SpecialIds) -> tuple[float, float]:
    """Per-token loss and NLL (the same without label smoothing) over a whole split."""
    model.eval()
    sampler = BatchSampler.fixed(data.src_lens, data.tgt_lens, max_tokens, seed=0, shuffle=False)
    loss_sum = nll_sum = 0.0
    ntokens = 0
    for indices in sampler:
        batch = make_batch(data, indices, specials, max_len)
        logits = model(batch.src.to(device), batch.tgt_in.to(device))
        loss, nll, n = label_smoothed_nll(logits, batch.tgt_out.to(device), 0.0, specials.pad)
        loss_sum += loss.item()
        nll_sum += nll.item()
        ntokens += n
    ntokens = max(ntokens, 1)
    return loss_sum / ntokens, nll_sum / ntokens


# --------------------------------------------------------------------------- test sets


@dataclass(frozen=True)
class TestResult:
    test: Pair
    hyp_path: Path
    lines: int
    seconds: float
    scores: list[Score]

    def to_dict(self) -> dict[str, Any]:
        """One entry of scores.json's "results"."""
        return {
            "src": str(self.test.src),
            "ref": str(self.test.tgt),
            "hyp": str(self.hyp_path),
            "lines": self.lines,
            "seconds": round(self.seconds, 1),
            "scores": {s.name: {"score": round(s.score, 2), "signature": s.signature}
                       for s in self.scores},
        }


def decode_test_set(translator: Translator, test: Pair, hyp_path: Path) -> tuple[list[str], float]:
    """Translate a test set's source into hyp_path (atomically); the lines and seconds."""
    sources = list(read_lines(test.src))
    start = time.perf_counter()
    hyps = translator.translate(sources)
    seconds = time.perf_counter() - start
    atomic_write_bytes(hyp_path, "".join(h + "\n" for h in hyps).encode("utf-8"))
    return hyps, seconds


def score_test_set(test: Pair, hyps: list[str], tgt_lang: str) -> list[Score]:
    refs = list(read_lines(test.tgt))
    return corpus_scores(hyps, [refs], ("bleu", "chrf"), tgt_lang=tgt_lang,
                         ref_names=[str(test.tgt)])


def test_set_names(sources: list[Path]) -> list[str]:
    """How eval/ and the logs name each test set: its source's file name, with its index
    in data.test where two share one (wmt19/test.de, wmt20/test.de), so that neither's
    translations overwrite the other's."""
    names = [src.name for src in sources]
    return [name if names.count(name) == 1 else f"{name}.{i}" for i, name in enumerate(names)]


def hypothesis_paths(tests: tuple[Pair, ...], out_dir: Path, tgt_lang: str) -> list[Path]:
    """The file of each test set's translations: eval/NAME.hyp.TGT (test_set_names)."""
    return [out_dir / f"{name}.hyp.{tgt_lang}" for name in test_set_names([t.src for t in tests])]


def evaluate_test_sets(translator: Translator, tests: tuple[Pair, ...], out_dir: Path,
                       tgt_lang: str) -> list[TestResult]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for test, hyp_path in zip(tests, hypothesis_paths(tests, out_dir, tgt_lang)):
        hyps, seconds = decode_test_set(translator, test, hyp_path)
        scores = score_test_set(test, hyps, tgt_lang)
        results.append(TestResult(test, hyp_path, len(hyps), seconds, scores))
    return results


def log_results(results: list[TestResult]) -> None:
    for r, name in zip(results, test_set_names([r.test.src for r in results])):
        parts = [f"{s.name} {round(s.score, 2):.2f}" for s in r.scores]
        log.info("[eval] %s (%d lines): %s", name, r.lines, " | ".join(parts))
        for s in r.scores:
            log.info("[eval]   %s signature: %s", s.name, s.signature)


def log_test_summary(results: list[dict[str, Any]]) -> None:
    """The end of `mtkit train`: each test set's scores, as scores.json's results hold them."""
    for result, name in zip(results, test_set_names([Path(r["src"]) for r in results])):
        scores = " | ".join(f"{k} {v['score']:.2f}" for k, v in result["scores"].items())
        log.info("[done] %s: %s", name, scores)
