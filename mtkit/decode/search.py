"""Greedy and beam search over one model or an ensemble, with incremental decoding.

Conventions shared by both searches:

* A sentence's hypotheses hold at most `cap` tokens (see `max_lengths`); EOS is never part
  of `tokens`. A hypothesis ends when it emits EOS or when it reaches its cap; at the cap it
  is kept as it is (no EOS is forced), so its logprob has no EOS term.
* `logprob` sums the log-probabilities of every symbol the search chose: the tokens, plus
  EOS when the hypothesis emitted it.
* The length used by the length penalty is the number of terms in that sum: len(tokens) + 1
  for a hypothesis that emitted EOS (fairseq's convention: EOS counts), len(tokens) for one
  cut at its cap. Search step t (0-based) adds the (t+1)-th term, so every hypothesis that
  ends at step t has length t + 1, and no length exceeds the cap.
* beam score = logprob / length**lenpen; greedy ranks nothing, so its score = logprob
  (which is what beam_search reports with lenpen=0).
* A forced target prefix (prefix.py) is part of `tokens`, of `logprob` (the model's
  log-probabilities of its tokens) and of the length; the cap counts the tokens after it.
* Ensembles average the models' log-probabilities (log_softmax in fp32, mean over models).
* The special ids come from the model's tokenizer (`specials`): the search starts every
  row from `start`, ends on `eos`, pads with `pad`, and never produces pad or the start
  token (unless the start token is eos, as in models whose decoder starts from </s>).
* Beam search ends a sentence by one of three rules, `stop` = early, exact or top
  (beam.sentence_done); greedy ends it at EOS or at the cap.

Cost: each model encodes the batch once (in groups of similar length: encode_by_length);
with use_cache every step runs one new position per row; finished sentences leave the
batch, so no work is spent on them; beams and sentences keep their rows where they can
(beam.parent_slots, `_kept_in_place`), so the decoder cache copies few rows per step; the
one host-device synchronisation per step is the stop check. Models must be in eval mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from mtkit.data.tokenizer import SpecialIds
from mtkit.decode.beam import (
    NEG_INF,
    STOP_RULES,
    Beams,
    Finished,
    FinishedParts,
    beam_step,
    compiled_beam_step,
    compiled_cached_beam_step,
    log_probs,
)
from mtkit.decode.prefix import ForcedPrefix
from mtkit.model.cache import DecoderCache

# How a search may pick each row's next token instead of the argmax (sampling.py):
# (lprobs (N, V), step t, rows (N,): each live row's index in the batch) -> the tokens (N,)
# and their log-probabilities (N,), as the search records them.
Choose = Callable[[Tensor, int, Tensor], tuple[Tensor, Tensor]]


class DecoderState(Protocol):
    """A model's per-search state (mtkit's `cache.DecoderCache`), kept row-aligned."""

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Row i becomes old row rows[i]; `sentences`: the kept sentences when some leave."""


class SearchModel(Protocol):
    """What the searches drive: mtkit's Transformer, or a scripted stand-in in the tests."""

    @property
    def max_positions(self) -> int:
        """Target positions the model can embed (BOS included)."""

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S) source ids -> memory (B, S, ...) and src_pad_mask (B, S)."""

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int,
                   beam: int) -> DecoderState:
        """State for up to `max_len` decode_step calls, `beam` rows per sentence."""

    def decode_step(self, prev_tokens: Tensor, cache: Any) -> Tensor:
        """(N,) latest token per row -> (N, V) logits of the next one; advances cache."""

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor) -> Tensor:
        """(N, T) whole prefixes -> (N, T, V) logits: the uncached reference."""


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, without BOS and EOS
    score: float  # what the search ranks by: logprob / length**lenpen (greedy: logprob)
    logprob: float  # sum of the log-probs of the tokens, and of EOS when it was emitted


# --------------------------------------------------------------------------- lengths


def source_lengths(src: Tensor, specials: SpecialIds) -> Tensor:
    """(B, S) source ids -> (B,) real tokens per sentence: pad, start and eos not counted."""
    special = (src == specials.pad) | (src == specials.start) | (src == specials.eos)
    return (~special).sum(dim=1)


def max_lengths(
    src_lengths: Tensor | Sequence[int], max_len_a: float, max_len_b: int, max_positions: int
) -> Tensor:
    """Per-sentence cap on hypothesis tokens (EOS not counted):

        min(int(max_len_a * src_len + max_len_b), max_positions - 1), and at least 1,

    with src_len the real source tokens, without padding or EOS (`source_lengths`).
    max_positions - 1 because a target of n tokens is trained as BOS + n decoder inputs;
    the floor of 1 lets even a degenerate a = b = 0 run one step (and emit EOS).
    """
    lengths = torch.as_tensor(src_lengths)
    # float64 and truncation reproduce Python's int(a * len + b) exactly; clamped before
    # the int64 conversion, which would turn a cap beyond it (--max-len-b 1e20) negative
    caps = lengths.double() * max_len_a + float(max_len_b)
    return caps.clamp(min=1, max=max_positions - 1).trunc().long()


def target_caps(models: SearchModel | Sequence[SearchModel], src: Tensor, a: float, b: int,
                specials: SpecialIds, prefix: ForcedPrefix | None = None) -> Tensor:
    """(B,) tokens each hypothesis may hold: `max_lengths`, counted after a forced prefix
    (the prefix's tokens come on top), and never more than max_positions - 1."""
    max_positions = min(m.max_positions for m in _as_list(models))
    caps = max_lengths(source_lengths(src, specials), a, b, max_positions).to(src.device)
    if prefix is None:
        return caps
    return (caps + prefix.lengths.to(src.device)).clamp(max=max_positions - 1)


# --------------------------------------------------------------------------- encoding

# How much padding one encoder batch may carry, in source tokens: this many, plus this
# share of its real tokens (see encode_by_length).
PAD_SLACK_TOKENS = 64
PAD_SLACK_SHARE = 0.25


def length_groups(lengths: Sequence[int]) -> list[list[int]]:
    """Sentence indices in groups of similar length, each one padded encoder batch.

    Shortest first; a group takes the next sentence while its padding (size x longest -
    real tokens) stays within PAD_SLACK_TOKENS + PAD_SLACK_SHARE x real tokens. One group
    of all sentences, in their order, when the whole batch is already within that.
    """
    def fits(count: int, longest: int, total: int) -> bool:
        return count * longest - total <= PAD_SLACK_TOKENS + PAD_SLACK_SHARE * total

    if not lengths:
        return []
    if fits(len(lengths), max(lengths), sum(lengths)):
        return [list(range(len(lengths)))]
    groups: list[list[int]] = []
    total = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if groups and fits(len(groups[-1]) + 1, lengths[i], total + lengths[i]):
            groups[-1].append(i)
            total += lengths[i]
        else:
            groups.append([i])
            total = lengths[i]
    return groups


def encode_by_length(model: SearchModel, src: Tensor, pad: int) -> tuple[Tensor, Tensor]:
    """model.encode(src), with sentences of very different lengths encoded apart.

    A batch whose lines arrived in no order (a server's, from many clients) pads every
    sentence to the longest: with lengths from 1 to 80 most of the encoder's work would
    be padding. Each `length_groups` group is encoded on its own, trimmed to its own
    longest sentence, and the outputs are put back in the batch's order, zero-padded to
    (B, S, ...) and masked there as before. A batch already of similar lengths (translate
    sorts its input) is one group, encoded exactly as before.
    """
    lengths = src.ne(pad).sum(dim=1).tolist()  # (B,) EOS included
    groups = length_groups(lengths)
    if len(groups) == 1:
        return model.encode(src)
    parts = []
    for group in groups:
        rows = torch.tensor(group, device=src.device)
        width = max(lengths[i] for i in group)
        parts.append((rows, model.encode(src[rows, :width])))
    sample = parts[0][1][0]  # memory (b, s, ...)
    memory = sample.new_zeros((src.size(0), src.size(1), *sample.shape[2:]))
    pad_mask = torch.ones(src.shape, dtype=torch.bool, device=src.device)
    for rows, (part_memory, part_mask) in parts:
        width = part_mask.size(1)
        memory[rows, :width] = part_memory
        pad_mask[rows, :width] = part_mask
    return memory, pad_mask


# --------------------------------------------------------------------------- the ensemble


class _Ensemble:
    """Steps all models together, row-aligned, and averages their log-probabilities.

    Rows are sentences x `beam` hypotheses (row i*beam + j is hypothesis j of sentence i).
    Cached: each model has its own DecoderCache and sees one new token per step.
    Uncached: each model re-decodes the whole prefix against its encoder output; this is
    the reference the cache is tested against, and the uncached benchmark.
    """

    def __init__(self, models: list[SearchModel], src: Tensor, steps: int, beam: int,
                 use_cache: bool, pad: int, never: tuple[int, ...]) -> None:
        self.models = models
        # token ids the search must not produce, as one index tensor: masking them is one op
        self.never = torch.tensor(never, dtype=torch.long, device=src.device)
        # [(memory (B,S,D), src_pad_mask (B,S))]
        encoded = [encode_by_length(m, src, pad) for m in models]
        if use_cache:
            # The caches keep what decoding needs of the source (the projected memory).
            self.caches = [m.init_cache(mem, mask, steps, beam) for m, (mem, mask) in zip(
                models, encoded, strict=True)]
            self.encoded = None
        else:
            self.caches = None
            self.encoded = [(mem.repeat_interleave(beam, 0), mask.repeat_interleave(beam, 0))
                            for mem, mask in encoded]  # one copy per row

    def log_probs(self, seqs: Tensor, t: int) -> Tensor:
        """seqs (N, > t): BOS then t tokens per row -> (N, V) fp32 log-probs of the next one."""
        if self.caches is not None:
            logits = [m.decode_step(seqs[:, t], cache)
                      for m, cache in zip(self.models, self.caches, strict=True)]
        else:
            logits = [m.decode(seqs[:, : t + 1], mem, mask)[:, -1]
                      for m, (mem, mask) in zip(self.models, self.encoded, strict=True)]
        if len(logits) == 1:
            return log_probs(logits[0], self.never)
        lprobs = torch.stack([x.float().log_softmax(dim=-1) for x in logits]).mean(dim=0)
        return lprobs.index_fill_(1, self.never, NEG_INF)

    def one_cache(self) -> DecoderCache | None:
        """The cache of the one model when one model steps with mtkit's DecoderCache (the
        case beam.cached_beam_step serves)."""
        caches = self.caches or []
        return caches[0] if len(caches) == 1 and isinstance(caches[0], DecoderCache) else None

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Row i becomes old row rows[i] in every model's state; `sentences` lists the
        sentences kept when some leave, None when all stay (beam re-ranking)."""
        if self.caches is not None:
            for cache in self.caches:
                cache.reorder(rows, sentences)
        elif sentences is not None:
            self.encoded = [(mem.index_select(0, rows), mask.index_select(0, rows))
                            for mem, mask in self.encoded]


def _as_list(models: SearchModel | Sequence[SearchModel]) -> list[SearchModel]:
    return list(models) if isinstance(models, (list, tuple)) else [models]


def _start(
    models: SearchModel | Sequence[SearchModel], src: Tensor, a: float, b: int, beam: int,
    use_cache: bool, specials: SpecialIds, prefix: ForcedPrefix | None
) -> tuple[Tensor, int, _Ensemble]:
    """What both searches begin with: per-sentence caps (B,), the step count, the ensemble
    with its encoder run once."""
    models = _as_list(models)
    caps = target_caps(models, src, a, b, specials, prefix)  # (B,)
    steps = int(caps.max())
    return caps, steps, _Ensemble(models, src, steps, beam, use_cache, specials.pad,
                                 never=specials.never_emitted)


# --------------------------------------------------------------------------- greedy


@torch.inference_mode()
def greedy_search(
    models: SearchModel | Sequence[SearchModel],
    src: Tensor,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    use_cache: bool = True,
    *,
    specials: SpecialIds,
    prefix: ForcedPrefix | None = None,
    choose: Choose | None = None,
) -> list[Hypothesis]:
    """The argmax translation of each sentence of src (B, S), in order. `prefix`: tokens
    to force first (prefix.py); `choose`: picks each row's token instead of the argmax
    (sampling.py), and the search is otherwise the same."""
    batch = src.size(0)
    if batch == 0:
        return []
    caps, steps, dec = _start(models, src, max_len_a, max_len_b, 1, use_cache, specials,
                              prefix)
    eos = specials.eos

    # Live rows: sentence index, start + tokens so far, summed log-prob, cap.
    rows = torch.arange(batch, device=src.device)  # (N,)
    seqs = src.new_full((batch, steps + 1), specials.pad)  # (N, steps+1)
    seqs[:, 0] = specials.start
    logprob = torch.zeros(batch, device=src.device)  # (N,)
    # Results by sentence, written when sentences finish.
    out_seqs, out_logprob = seqs.clone(), logprob.clone()
    out_len = torch.zeros(batch, dtype=torch.long, device=src.device)

    for t in range(steps):
        lprobs = dec.log_probs(seqs, t)  # (N, V)
        if choose is None:
            best_lp, best = lprobs.max(dim=-1)  # (N,), (N,)
        else:
            best, best_lp = choose(lprobs, t, rows)
        if prefix is not None and t < prefix.width:
            best, best_lp = prefix.force_rows(lprobs, best, best_lp, t, rows)
        seqs[:, t + 1] = best
        logprob = logprob + best_lp
        ended = best == eos
        done = ended | (caps <= t + 1)
        keep = _kept_in_place(done)  # the step's one host-device sync
        if keep.numel() == rows.numel():
            continue
        # Store every live row; rows that go on are overwritten when they finish.
        out_seqs[rows], out_logprob[rows] = seqs, logprob
        out_len[rows] = t + 1 - ended.long()  # the EOS is not a token
        if keep.numel() == 0:
            break
        rows, seqs, logprob, caps = rows[keep], seqs[keep], logprob[keep], caps[keep]
        dec.reorder(keep, keep)

    tokens, lengths, logprobs = out_seqs[:, 1:].tolist(), out_len.tolist(), out_logprob.tolist()
    return [Hypothesis(seq[:n], lp, lp) for seq, n, lp in zip(tokens, lengths, logprobs,
                                                              strict=True)]


# --------------------------------------------------------------------------- beam
def _kept_in_place(done: Tensor) -> Tensor:
    """(n,) True where a sentence leaves the batch -> the kept sentences' indices, in the
    order they take the first rows: each one already among those rows stays, and the
    places of the leaving ones there are filled from the end, so that the decoder state
    moves one sentence per leaving one, not every sentence after it. (On a GPU, a step
    where sentences leave waits a second time, for the places.)"""
    keep = (~done).nonzero().squeeze(1)  # ascending
    kept = keep.numel()
    if kept == done.numel():
        return keep
    order = keep.clone()
    stay = keep[keep < kept]
    order[stay] = stay
    order[done[:kept].nonzero().squeeze(1)] = keep[keep >= kept]
    return order



@torch.inference_mode()
def beam_search(
    models: SearchModel | Sequence[SearchModel],
    src: Tensor,
    beam: int = 5,
    lenpen: float = 1.0,
    nbest: int = 1,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    use_cache: bool = True,
    stop: str = "early",
    *,
    specials: SpecialIds,
    prefix: ForcedPrefix | None = None,
) -> list[list[Hypothesis]]:
    """Up to `nbest` hypotheses per sentence of src (B, S), best score first.

    All sentences are searched together as (sentences x beam) rows. Each step extends every
    live beam by every token, keeps the 2*beam best, sets the ending ones aside (if within
    the top `beam`) and continues with the best `beam` others, until `stop` says the
    sentence is done (see sentence_done). `prefix`: tokens to force first, on one live
    beam per sentence (prefix.py).
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest ({nbest}) must be between 1 and beam ({beam})")
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {STOP_RULES}, got {stop!r}")
    batch = src.size(0)
    if batch == 0:
        return []
    caps, steps, dec = _start(models, src, max_len_a, max_len_b, beam, use_cache, specials,
                              prefix)
    eos, pad = specials.eos, specials.pad
    beams = Beams.start(caps, beam, nbest, steps, specials.start, pad)
    results = Finished.empty(batch, nbest, steps, src.device)  # by sentence

    one = dec.one_cache() if src.device.type == "cpu" else None
    for t in range(steps):
        n = beams.rows.numel()
        logprob, seqs, rows, done, finished, moved = _beam_step(
            dec, one, beams, prefix, (t, eos, pad, lenpen, stop))
        beams = Beams(beams.rows, beams.caps, logprob, seqs, Finished(*finished),
                      beams.offsets)
        if moved:  # every sentence goes on, and the one cache has its new rows
            one.gathered(moved == 2)
            continue
        keep = _kept_in_place(done)  # the step's one host-device sync
        if keep.numel() == n:
            dec.reorder(rows)
            continue
        results.store(beams.rows, beams.finished)  # final for the done; live ones rewritten
        if keep.numel() == 0:
            break
        beams = beams.select(keep)
        dec.reorder(rows.view(n, beam)[keep].view(-1), keep)
    return _hypotheses(results)


def _beam_step(dec: _Ensemble, one: DecoderCache | None, beams: Beams,
               prefix: ForcedPrefix | None, rule: tuple[int, int, int, float, str]
               ) -> tuple[Tensor, Tensor, Tensor, Tensor, FinishedParts, int]:
    """Step t of beam search (rule: t, eos, pad, lenpen, stop): beam.beam_step's values
    and whether the decoder cache was reordered too (beam.cached_beam_step; 0: not)."""
    t = rule[0]
    if one is not None and (prefix is None or t >= prefix.width):
        # one model on the CPU: its log-probs, the bookkeeping and, when every sentence
        # goes on, the cache's reorder, in one compiled call
        logits = dec.models[0].decode_step(beams.seqs[:, t], one)
        return compiled_cached_beam_step()(logits, dec.never, *beams.live,
                                           beams.finished.parts, *rule, one.self_kv,
                                           one.spare_kv, one.step)
    n, beam = beams.logprob.shape
    lprobs = dec.log_probs(beams.seqs, t).view(n, beam, -1)  # (n, beam, V)
    if prefix is not None and t < prefix.width:
        lprobs = prefix.force_beams(lprobs, beams.logprob, t, beams.rows)
    step = compiled_beam_step() if lprobs.device.type == "cpu" else beam_step
    return *step(lprobs, *beams.live, beams.finished.parts, *rule), 0


def _hypotheses(finished: Finished) -> list[list[Hypothesis]]:
    """The by-sentence table as lists of hypotheses, best first, empty slots left out."""
    score, logprob = finished.score.tolist(), finished.logprob.tolist()
    seqs, length = finished.seqs.tolist(), finished.length.tolist()
    return [
        [Hypothesis(s[:n], sc, lp) for s, n, sc, lp in zip(*row, strict=True) if sc > NEG_INF]
        for row in zip(seqs, length, score, logprob, strict=True)
    ]
