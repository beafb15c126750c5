"""CTranslate2: export an mtkit model to a CTranslate2 model directory, and decode with it.

Needs the optional extra `pip install 'mtkit[ct2]'`. The export goes through
CTranslate2's Python model specification: build the spec, fill every weight, validate
(ct2_spec.py), quantise, save. The directory also holds the SentencePiece model(s) and the
recipe, so `mtkit translate -m DIR` needs nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import torch

from mtkit.config import DecodeConfig, Recipe, recipe_from_dict
from mtkit.data.tokenizer import VOCAB_FILE, Tokenizer
from mtkit.decode.ct2_spec import model_spec, with_alignment_layer
from mtkit.decode.search import Hypothesis
from mtkit.errors import CheckpointError, ConfigError
from mtkit.files.atomic import recover_dir, replace_dir
from mtkit.model.checkpoint import load_checkpoint
from mtkit.runtime.devices import usable_cores

QUANTIZATIONS = ("float32", "int8", "int8_float32")
MARKER = "mtkit.json"  # what tells an exported directory from any other


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise ConfigError(
            "CTranslate2 is not installed; install the extra: pip install 'mtkit[ct2]'"
        ) from None
    return ctranslate2


def is_exported_model(path: Path) -> bool:
    recover_dir(path)  # an export killed between its two renames left only PATH.old
    return path.is_dir() and (path / MARKER).is_file()


# --------------------------------------------------------------------------- export


def export(model_path: Path, out_dir: Path, quantization: str = "int8", force: bool = False,
           alignment_layer: int | None = None):
    """Write a CTranslate2 model directory for the mtkit model bundle at model_path.
    `alignment_layer`: the decoder layer word alignments read (None: the recipe's
    decode.alignment_layer); the export fixes it, and its recipe says so."""
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantize {quantization}: expected one of "
                          f"{', '.join(QUANTIZATIONS)}")
    _check_output(model_path, out_dir, force)
    ctranslate2 = _ctranslate2()
    bundle = load_checkpoint(model_path)
    recipe = with_alignment_layer(bundle.recipe, alignment_layer)
    tokenizer = bundle.tokenizer()
    spec, layer = model_spec(ctranslate2, bundle.model(tokenizer, str(model_path)), tokenizer,
                             recipe)
    spec.optimize(quantization=quantization)

    partial = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        spec.save(str(partial))
        (partial / "spm.src.model").write_bytes(tokenizer.src_bytes)
        if tokenizer.tgt_bytes is not None:
            (partial / "spm.tgt.model").write_bytes(tokenizer.tgt_bytes)
        if tokenizer.vocab_bytes is not None:
            (partial / VOCAB_FILE).write_bytes(tokenizer.vocab_bytes)
        marker = {"recipe": recipe.to_dict(), "quantization": quantization,
                  "exported_from": str(model_path), "alignment_layer": layer}
        (partial / MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")
        replace_dir(partial, out_dir)  # a crash leaves the old export or the new one, never half
    finally:
        shutil.rmtree(partial, ignore_errors=True)  # a no-op after the swap


def _check_output(model_path: Path, out_dir: Path, force: bool) -> None:
    """-o must be new, or (with --force) an earlier export or an empty directory, and not
    hold the input model: replacing anything else would delete what the user wrote, the
    model being exported included (binarize's output directory is guarded the same way)."""
    model, out = Path(os.path.realpath(model_path)), Path(os.path.realpath(out_dir))
    if out == model or out in model.parents:
        raise ConfigError(f"-o {out_dir}: is or holds the input model -m {model_path}; "
                          "give another directory")
    if not out_dir.exists():
        # the export is written beside -o first: a file in its way is named as the user
        # gave it, not by the name of that temporary directory
        above = next(p for p in out_dir.absolute().parents if p.exists())
        if not above.is_dir():
            raise ConfigError(f"-o {out_dir}: {above} is not a directory; give a directory "
                              "path")
        return
    if not out_dir.is_dir():
        raise ConfigError(f"-o {out_dir}: exists and is not a directory; give a new "
                          "directory (--force replaces only an earlier export)")
    if not force:
        raise ConfigError(f"{out_dir}: already exists; use --force to replace it")
    if not is_exported_model(out_dir) and any(out_dir.iterdir()):
        raise ConfigError(f"-o {out_dir}: is not a CTranslate2 export (no {MARKER}); "
                          "--force replaces only an earlier export; give another directory")


# --------------------------------------------------------------------------- decoding


# Threads. A CTranslate2 translator fixes its threads when it is loaded: `inter_threads`
# workers, each decoding one batch at a time with `intra_threads` OpenMP threads. Spread
# over cores, OpenMP threads pay off only when a batch has enough rows to share out: one
# sentence runs slower on two threads than on one, a test set's batches faster
# (bench/engines.py; docs/benchmarks.md). So by default (threads 0) a small batch runs on
# one thread, with a worker per core for calls made at the same time, and a large batch
# gets every core intra-op.
# `--threads N` sets N intra-op threads for every batch (one worker).
LARGE_BATCH = 16  # sentences from which a batch gets every core intra-op (not tuned)
_SEEDING = threading.Lock()  # CTranslate2's seed is one per process (see _sample)


def choose_threads(sentences: int, cores: int, threads: int = 0) -> tuple[int, int]:
    """(inter_threads, intra_threads) for a batch of `sentences` on `cores` usable cores;
    `threads` > 0 is the user's choice of intra-op threads."""
    if threads > 0:
        return 1, threads
    if sentences >= LARGE_BATCH:
        return 1, cores
    return cores, 1


class CTranslate2Engine:
    """An `engine.Engine` that decodes with an exported CTranslate2 model.

    Threads per batch by `choose_threads`: one translator per setting in use, loaded when
    first needed (the small-batch one at once, so the first sentence does not wait).
    """

    name = "ctranslate2"
    # CTranslate2 ends a sentence once its top-ranked candidate has ended and its n-best
    # are in: mtkit's `top`, in effect. `early`, the default, is accepted for it.
    stop_rules = ("early", "top")

    def __init__(self, model_dir: Path, device: str = "cpu", threads: int = 0,
                 quantize: str = "none"):
        self.model_dir, self.device, self.threads = model_dir, device, threads
        # --quantize int8: CTranslate2 rounds a float32 export at load as an int8 export is
        self.compute_type = "int8" if quantize == "int8" else "default"
        self.cores = usable_cores()
        self._translators: dict[tuple[int, int], object] = {}
        self.translator_for(1)
        self.tokenizer = load_exported_tokenizer(model_dir)
        self.recipe = load_exported_recipe(model_dir)
        self.alignment_layer = load_exported_marker(model_dir).get("alignment_layer")
        self.max_source = self.recipe.model.max_positions - 1
        self.src_pieces = self.tokenizer.pieces("src")
        self.tgt_pieces = self.tokenizer.pieces("tgt")
        self.tgt_ids = {piece: i for i, piece in enumerate(self.tgt_pieces)}

    def translator_for(self, sentences: int):
        """The translator with the thread setting for a batch of `sentences`."""
        inter, intra = choose_threads(sentences, self.cores, self.threads)
        if self.device != "cpu":  # one worker on the GPU; its CPU threads as given
            inter, intra = 1, self.threads
        translator = self._translators.get((inter, intra))
        if translator is None:
            translator = _ctranslate2().Translator(
                str(self.model_dir), device=self.device, inter_threads=inter,
                intra_threads=intra, compute_type=self.compute_type)
            self._translators[inter, intra] = translator
        return translator

    def search(self, sources: list[list[int]], opts: DecodeConfig,
               prefixes: list[list[int]] | None = None,
               lines: list[int] | None = None) -> list[list[Hypothesis]]:
        """`lines` goes unused: CTranslate2 samples from one stream per call (`_sample`)."""
        tokens = self._source_tokens(sources)
        prefixes = prefixes if prefixes and any(prefixes) else None
        forced = None if prefixes is None else [[self.tgt_pieces[i] for i in p] for p in prefixes]
        # CTranslate2 caps lengths per batch, not per sentence: take the batch's largest
        # cap; it counts a forced prefix (mtkit's cap counts after it, so add its length)
        cap = max(min(max(int(opts.max_len_a * len(ids) + opts.max_len_b), 1) + len(p),
                      self.max_source)
                  for ids, p in zip(sources, prefixes or [[]] * len(sources), strict=True))
        # min_decoding_length 0: EOS may come first, as in mtkit's own search (default 1)
        common = {"target_prefix": forced, "max_decoding_length": cap, "return_scores": True,
                  "max_batch_size": 0, "min_decoding_length": 0}
        if opts.sampling.kind != "none":
            found, lenpen = self._sample(tokens, opts, common), 0.0
        else:
            lenpen = opts.lenpen if opts.beam > 1 else 0.0  # greedy's score: its log-prob
            results = self.translator_for(len(sources)).translate_batch(
                tokens, beam_size=opts.beam, length_penalty=lenpen,
                num_hypotheses=opts.nbest, **common)
            found = [list(zip(r.hypotheses, r.scores, strict=True)) for r in results]
        extra = self._prefix_logprobs(tokens, forced) if forced else [0.0] * len(sources)
        return [self._hypotheses(hyps, lenpen, cap, lp, ranked=opts.sampling.kind == "none")
                for hyps, lp in zip(found, extra, strict=True)]

    def cross_attention(self, sources: list[list[int]], targets: list[list[int]],
                        layer: int) -> list[torch.Tensor]:
        """Each target forced as a prefix, one CTranslate2 search step per token, with the
        attention of the layer and heads the export fixed (`_alignment_layer`): of the step
        that emits the token, over the source without its EOS, as mtkit's engine gives it."""
        exported = self.alignment_layer
        if exported is None or layer != exported:
            why = ("was exported before mtkit set alignments up: export it again"
                   if exported is None else f"aligns with decoder layer {exported}, fixed when "
                   "it was exported (decode.alignment_layer of the model's recipe)")
            raise ConfigError(f"{self.model_dir}: this CTranslate2 model {why}; or use "
                              "--engine torch with the mtkit model file")
        tokens = self._source_tokens(sources)
        forced = [[self.tgt_pieces[i] for i in ids] for ids in targets]
        # one cap for the batch: a shorter target's search goes on after it, unread
        results = self.translator_for(len(sources)).translate_batch(
            tokens, target_prefix=forced, beam_size=1, return_attention=True,
            max_decoding_length=max(len(t) for t in targets), min_decoding_length=0,
            max_batch_size=0)
        specials = self.tokenizer.specials
        return [torch.tensor(np.asarray(r.attention[0], dtype=np.float32)[: len(t)])
                [:, specials.source_positions(len(s))[:-1]]  # the ids' order, EOS left out
                for r, s, t in zip(results, sources, targets, strict=True)]

    def _source_tokens(self, sources: list[list[int]]) -> list[list[str]]:
        """Each source's pieces as CTranslate2 takes them: without </s>, which it appends
        (the export's add_source_eos), unless the model reads its language token after
        </s> (`SpecialIds.tag_after_eos`): then whole, as mtkit's encoder reads it."""
        specials = self.tokenizer.specials
        ended = (specials.source_input(ids) if specials.tag_after_eos else ids
                 for ids in sources)
        return [[self.src_pieces[i] for i in ids] for ids in ended]

    def _hypotheses(self, found: list[tuple[list[str], float]], lenpen: float, cap: int,
                    prefix_logprob: float, ranked: bool) -> list[Hypothesis]:
        """CTranslate2's (pieces, score) as Hypotheses. Its score is the log-probability of
        what it chose / length**lenpen, with mtkit's length (EOS counted when emitted),
        but a forced token counts 0 in it: the model's log-probability of the prefix is
        added, so that the score covers prefix and continuation, as mtkit's does."""
        hyps = []
        for pieces, score in found:
            ids = [self.tgt_ids[p] for p in pieces]
            length = len(ids) + (len(ids) < cap)  # below the cap it emitted EOS
            logprob = float(score) * length ** lenpen + prefix_logprob
            hyps.append(Hypothesis(ids, logprob / length ** lenpen, logprob))
        if ranked and prefix_logprob:  # with a length penalty the order may change
            hyps.sort(key=lambda h: -h.score)
        return hyps

    def _prefix_logprobs(self, tokens: list[list[str]], forced: list[list[str]]) -> list[float]:
        """The model's log-probability of each line's forced prefix (0 without one)."""
        rows = [i for i, prefix in enumerate(forced) if prefix]
        scored = self._score_pieces([tokens[i] for i in rows], [forced[i] for i in rows])
        out = [0.0] * len(forced)
        for i, logprobs in zip(rows, scored, strict=True):
            out[i] = sum(logprobs[: len(forced[i])])  # then EOS's: left out
        return out

    def score(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        return self._score_pieces(self._source_tokens(sources),
                                  [[self.tgt_pieces[i] for i in ids] for ids in targets])

    def _score_pieces(self, sources: list[list[str]], targets: list[list[str]]
                      ) -> list[list[float]]:
        """CTranslate2's score_batch: per target token, then EOS, a log-probability. It
        starts the decoder as its search does (the export's decoder_start_token, see
        _start_from_pad), so scores and search agree. Nothing truncated
        (max_input_length 0): the caller has checked the lengths."""
        scored = self.translator_for(len(sources)).score_batch(
            sources, targets, max_batch_size=0, max_input_length=0)
        return [[float(x) for x in result.log_probs] for result in scored]

    def _sample(self, tokens: list[list[str]], opts: DecodeConfig,
                common: dict) -> list[list[tuple[list[str], float]]]:
        """Samples, drawn by CTranslate2 from one random stream per call.

        CTranslate2 seeds a generator per worker thread once, when the thread first draws
        (set_random_seed later does not reseed it), so each call gets a fresh translator
        of one worker, made after set_random_seed(seed): a batch's samples repeat given
        the same seed, batch and order, but depend on the other lines of the batch (mtkit's
        engine keeps a stream per line). The lock keeps concurrent calls from seeding each
        other's. Pad and the start token are suppressed, as mtkit's search never emits
        them. Samples come ranked by score (CTranslate2's order), not in drawing order."""
        rule = opts.sampling
        topk = min(rule.k, len(self.tgt_ids)) if rule.kind == "topk" else 0  # 0: every token
        draws = 1 if topk == 1 else opts.nbest  # its argmax sampler gives one: copied
        intra = choose_threads(len(tokens), self.cores, self.threads)[1]
        never = [[self.tgt_pieces[i]] for i in self.tokenizer.specials.never_emitted]
        ctranslate2 = _ctranslate2()
        with _SEEDING:
            ctranslate2.set_random_seed(opts.seed)
            fresh = ctranslate2.Translator(str(self.model_dir), device=self.device,
                                           inter_threads=1, intra_threads=intra,
                                           compute_type=self.compute_type)
            results = fresh.translate_batch(
                tokens, beam_size=1, num_hypotheses=draws, sampling_topk=topk,
                sampling_topp=rule.p if rule.kind == "topp" else 1.0,
                sampling_temperature=opts.temperature, length_penalty=0.0,
                suppress_sequences=never or None, **common)
        found = [list(zip(r.hypotheses, r.scores, strict=True)) for r in results]
        return [hyps * (opts.nbest // draws) for hyps in found]


def load_exported_marker(model_dir: Path) -> dict:
    try:
        marker = json.loads((model_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        marker = None
    if not isinstance(marker, dict) or "recipe" not in marker:
        raise CheckpointError(f"{model_dir}: not an mtkit CTranslate2 export")
    return marker


def load_exported_recipe(model_dir: Path) -> Recipe:
    return recipe_from_dict(load_exported_marker(model_dir)["recipe"], where=str(model_dir))


def load_exported_tokenizer(model_dir: Path) -> Tokenizer:
    tgt, vocab = model_dir / "spm.tgt.model", model_dir / VOCAB_FILE
    return Tokenizer.from_files(model_dir / "spm.src.model", tgt if tgt.is_file() else None,
                                vocab if vocab.is_file() else None)
