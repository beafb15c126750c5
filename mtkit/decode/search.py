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
* Ensembles average the models' log-probabilities (log_softmax in fp32, mean over models).
* PAD and BOS are never produced.
* Beam search ends a sentence by one of three rules, `stop` = early, exact or top
  (`_sentence_done`); greedy ends it at EOS or at the cap.

Cost: each model encodes the batch once (in groups of similar length: encode_by_length);
with use_cache every step runs one new position per row; finished sentences leave the
batch, so no work is spent on them; beams and sentences keep their rows where they can
(`_parent_slots`, `_kept_in_place`), so the decoder cache copies few rows per step; the
one host-device synchronisation per step is the stop check. Models must be in eval mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

# Same ids as mtkit.tokenizer (PAD_ID, BOS_ID, EOS_ID); repeated so search depends only on
# the model interface. Every search function also takes them as arguments.
PAD, BOS, EOS = 0, 2, 3

NEG_INF = float("-inf")

STOP_RULES = ("early", "exact", "top")  # how beam search may end a sentence: _sentence_done


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


def source_lengths(src: Tensor, pad: int = PAD, bos: int = BOS, eos: int = EOS) -> Tensor:
    """(B, S) source ids -> (B,) real tokens per sentence: padding, BOS and EOS not counted."""
    special = (src == pad) | (src == bos) | (src == eos)
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
    # float64 and truncation reproduce Python's int(a * len + b) exactly
    caps = (lengths.double() * max_len_a + max_len_b).trunc().long()
    return caps.clamp(min=1, max=max_positions - 1)


def _caps(models: list[SearchModel], src: Tensor, a: float, b: int, bos: int, eos: int,
          pad: int) -> Tensor:
    max_positions = min(m.max_positions for m in models)
    return max_lengths(source_lengths(src, pad, bos, eos), a, b, max_positions).to(src.device)


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


def encode_by_length(model: SearchModel, src: Tensor, pad: int = PAD) -> tuple[Tensor, Tensor]:
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
        lprobs = [x.float().log_softmax(dim=-1) for x in logits]
        lprobs = lprobs[0] if len(lprobs) == 1 else torch.stack(lprobs).mean(dim=0)
        return lprobs.index_fill_(1, self.never, NEG_INF)

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
    use_cache: bool, bos: int, eos: int, pad: int
) -> tuple[Tensor, int, _Ensemble]:
    """What both searches begin with: per-sentence caps (B,), the step count, the ensemble
    with its encoder run once."""
    models = _as_list(models)
    caps = _caps(models, src, a, b, bos, eos, pad)  # (B,)
    steps = int(caps.max())
    return caps, steps, _Ensemble(models, src, steps, beam, use_cache, pad,
                                 never=(pad, bos))


# --------------------------------------------------------------------------- greedy


@torch.inference_mode()
def greedy_search(
    models: SearchModel | Sequence[SearchModel],
    src: Tensor,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    use_cache: bool = True,
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
) -> list[Hypothesis]:
    """The argmax translation of each sentence of src (B, S), in order."""
    batch = src.size(0)
    if batch == 0:
        return []
    caps, steps, dec = _start(models, src, max_len_a, max_len_b, 1, use_cache, bos, eos,
                              pad)

    # Live rows: sentence index, BOS + tokens so far, summed log-prob, cap.
    rows = torch.arange(batch, device=src.device)  # (N,)
    seqs = src.new_full((batch, steps + 1), pad)  # (N, steps+1)
    seqs[:, 0] = bos
    logprob = torch.zeros(batch, device=src.device)  # (N,)
    # Results by sentence, written when sentences finish.
    out_seqs, out_logprob = seqs.clone(), logprob.clone()
    out_len = torch.zeros(batch, dtype=torch.long, device=src.device)

    for t in range(steps):
        best_lp, best = dec.log_probs(seqs, t).max(dim=-1)  # (N,), (N,)
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


@dataclass
class _Finished:
    """The best `size` finished hypotheses per sentence, best first; empty slots score -inf.

    During the search size = nbest: a hypothesis outside the n-best is never returned.
    """

    score: Tensor  # (n, size)
    logprob: Tensor  # (n, size)
    seqs: Tensor  # (n, size, steps) tokens, pad after the end
    length: Tensor  # (n, size) tokens (EOS not counted)

    @classmethod
    def empty(cls, n: int, size: int, steps: int, device: torch.device) -> _Finished:
        return cls(
            score=torch.full((n, size), NEG_INF, device=device),
            logprob=torch.zeros(n, size, device=device),
            seqs=torch.zeros(n, size, steps, dtype=torch.long, device=device),
            length=torch.zeros(n, size, dtype=torch.long, device=device),
        )

    def merge(self, new: _Finished) -> _Finished:
        """The best of both, as many as this holds, best first."""
        score = torch.cat([self.score, new.score], dim=1)  # (n, size + beam)
        best = score.topk(self.score.size(1), dim=1).indices  # (n, size)

        def pick(a: Tensor, b: Tensor) -> Tensor:
            both = torch.cat([a, b], dim=1)
            index = best.view(*best.shape, *[1] * (both.dim() - 2)).expand(-1, -1, *both.shape[2:])
            return both.gather(1, index)

        return _Finished(score.gather(1, best), pick(self.logprob, new.logprob),
                         pick(self.seqs, new.seqs), pick(self.length, new.length))

    def select(self, keep: Tensor) -> _Finished:
        return _Finished(self.score[keep], self.logprob[keep], self.seqs[keep], self.length[keep])

    def store(self, rows: Tensor, other: _Finished) -> None:
        """Write `other` (one entry per live sentence) into this by-sentence table."""
        self.score[rows], self.logprob[rows] = other.score, other.logprob
        self.seqs[rows], self.length[rows] = other.seqs, other.length

    def hypotheses(self) -> list[list[Hypothesis]]:
        score, logprob = self.score.tolist(), self.logprob.tolist()
        seqs, length = self.seqs.tolist(), self.length.tolist()
        return [
            [Hypothesis(s[:n], sc, lp) for s, n, sc, lp in zip(*row, strict=True) if sc > NEG_INF]
            for row in zip(seqs, length, score, logprob, strict=True)
        ]


@dataclass
class _Beams:
    """The live hypotheses of the n unfinished sentences; row i*beam + j is beam j of i."""

    rows: Tensor  # (n,) sentence index in the input batch
    caps: Tensor  # (n,) token cap
    logprob: Tensor  # (n, beam) summed log-probs; -inf marks an unused beam
    seqs: Tensor  # (n*beam, steps+1) BOS + tokens so far
    finished: _Finished  # the sentences' n-best so far
    offsets: Tensor  # (n, 1) each sentence's first row: 0, beam, 2*beam, ...

    @classmethod
    def start(cls, caps: Tensor, beam: int, nbest: int, steps: int, bos: int,
              pad: int) -> _Beams:
        n, device = caps.numel(), caps.device
        logprob = torch.zeros(n, beam, device=device)
        logprob[:, 1:] = NEG_INF  # step 0 expands beam 0 only: the beams would be identical
        seqs = torch.full((n * beam, steps + 1), pad, dtype=torch.long, device=device)
        seqs[:, 0] = bos
        return cls(torch.arange(n, device=device), caps, logprob, seqs,
                   _Finished.empty(n, nbest, steps, device), _offsets(n, beam, device))

    def select(self, keep: Tensor) -> _Beams:
        beam = self.logprob.size(1)
        seqs = self.seqs.view(-1, beam, self.seqs.size(1))[keep].view(-1, self.seqs.size(1))
        return _Beams(self.rows[keep], self.caps[keep], self.logprob[keep], seqs,
                      self.finished.select(keep), _offsets(keep.numel(), beam, keep.device))


def _offsets(n: int, beam: int, device: torch.device) -> Tensor:
    return torch.arange(n, device=device).unsqueeze(1) * beam  # (n, 1)


def _top_candidates(logprob: Tensor, lprobs: Tensor, count: int) -> tuple[Tensor, Tensor, Tensor]:
    """Best `count` one-token extensions per sentence over all its beams, best first.

    logprob (n, beam), lprobs (n, beam, V) -> value, source beam, token, each (n, count).

    Each beam's best `count` tokens first, then the best of those beam x count sums: adding
    a beam's logprob keeps the order of its tokens, so these are the candidates of a top-k
    over all beam x V sums, with the same values, without writing the (n, beam*V) sums
    out: one pass fewer over a large batch's log-probs (README, "Bulk decoding on a
    slower machine").
    """
    n, beam, vocab = lprobs.shape
    per_beam = min(count, vocab)
    best_lp, best_token = lprobs.topk(per_beam, dim=2)  # (n, beam, per_beam)
    total = (logprob.unsqueeze(-1) + best_lp).view(n, -1)  # (n, beam*per_beam)
    value, index = total.topk(count, dim=1)
    return value, index // per_beam, best_token.view(n, -1).gather(1, index)


def _finishing(beams: _Beams, cand: tuple[Tensor, Tensor, Tensor], t: int, eos: int, pad: int,
               lenpen: float) -> _Finished | None:
    """The candidates that end at step t: by EOS, or by reaching the sentence's cap.

    Only the top `beam` candidates may end, as only they would be in the beam: an EOS
    ranked below the beam is ignored. So beam=1 walks the greedy path and, with lenpen=0,
    stops where greedy stops (with lenpen > 0 it may go on past greedy's EOS when a longer
    ending could still score better per term).

    None when on the CPU none ends (most steps of a short batch): merging a table of -inf
    scores changes nothing, and asking costs the CPU no wait, so the step skips the copy
    and the merge. (On a GPU the question would be a second wait per step.)
    """
    beam = beams.logprob.size(1)
    value, source, token = (x[:, :beam] for x in cand)  # (n, beam)
    ended = token == eos
    ends = (ended | (beams.caps <= t + 1).unsqueeze(1)) & value.isfinite()
    if _nothing_ends(ends):
        return None
    # Whether by EOS (t tokens + EOS) or at the cap (t + 1 tokens): t + 1 terms.
    score = torch.where(ends, value / (t + 1) ** lenpen, NEG_INF)
    # (n, beam, steps): the source beam's tokens (a copy, BOS dropped) + the new one
    seqs = beams.seqs[(beams.offsets + source).view(-1)].view(*source.shape, -1)[:, :, 1:]
    seqs[:, :, t] = torch.where(ended, pad, token)
    return _Finished(score, value, seqs, t + 1 - ended.long())


def _nothing_ends(ends: Tensor) -> bool:
    """True when it is known without waiting for a device that no candidate ends."""
    return ends.device.type == "cpu" and not bool(ends.any())


def _advance(beams: _Beams, cand: tuple[Tensor, Tensor, Tensor], t: int,
             eos: int) -> tuple[Tensor, Tensor, Tensor]:
    """The next live beams: the best `beam` candidates that do not end with EOS.

    Each beam has one EOS candidate, so at most `beam` of the 2*beam candidates are EOS and
    at least `beam` go on. They are placed as `_parent_slots` says, not best first. Returns
    logprob (n, beam), seqs (n*beam, steps+1) and the (n*beam,) rows they come from (for
    reordering the decoder state).
    """
    value, source, token = cand  # (n, 2*beam)
    beam = beams.logprob.size(1)
    # EOS candidates behind all others, the rest in their best-first order: a stable sort
    # of the EOS flags.
    pick = (token == eos).sort(dim=1, stable=True).indices[:, :beam]  # (n, beam)
    pick = pick.gather(1, _parent_slots(source.gather(1, pick)))  # into the parents' rows
    rows = (beams.offsets + source.gather(1, pick)).view(-1)  # (n*beam,) source rows
    seqs = beams.seqs[rows]
    seqs[:, t + 1] = token.gather(1, pick).view(-1)
    return value.gather(1, pick), seqs, rows


def _parent_slots(parent: Tensor) -> Tensor:
    """Where each new beam goes: (n, beam) parent of each, best first -> (n, beam) order,
    slot j of a sentence taking its new beam order[:, j].

    Each parent's best continuation takes the parent's own slot, so that its row of the
    decoder cache stays where it is; the other continuations fill, in rank order, the slots
    of parents that have none. The cache then copies only the rows that change
    (`DecoderCache.reorder`): on the Bible test set a fifth of them, against three fifths
    when the beams are kept best first. Nothing ranks beams by slot: the search takes the
    best by value wherever they are.
    """
    beam = parent.size(1)
    same = parent.unsqueeze(2) == parent.unsqueeze(1)  # (n, beam, beam): j, k share a parent
    earlier = torch.ones(beam, beam, dtype=torch.bool, device=parent.device).tril(-1)
    first = ~(same & earlier).any(dim=2)  # (n, beam): no better sibling
    has_child = torch.zeros_like(first).scatter_(1, parent, True)  # (n, beam) by slot
    free = has_child.long().sort(dim=1, stable=True).indices  # childless slots first
    nth_other = ((~first).long().cumsum(dim=1) - 1).clamp(min=0)  # among the non-first
    slot = torch.where(first, parent, free.gather(1, nth_other))  # (n, beam): a permutation
    return slot.argsort(dim=1)


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


def _score_bound(logprob: Tensor, shortest: int, longest: Tensor, lenpen: float) -> Tensor:
    """The best score any finished descendant of a live hypothesis could reach.

    A descendant adds terms that are all <= 0, so its logprob' <= logprob, and its length L
    lies in [shortest, longest] (longest = the cap). Its score logprob' / L**lenpen is then
    <= logprob / L**lenpen, which for logprob <= 0 is monotone in L (rising for lenpen > 0,
    so the bound is logprob / cap**lenpen; falling for lenpen < 0; flat for 0). The larger
    of the two ends is a bound in every case.
    """
    at_longest = logprob / longest.float() ** lenpen
    at_shortest = logprob / float(shortest) ** lenpen
    return torch.maximum(at_longest, at_shortest)


def _sentence_done(finished: _Finished, logprob: Tensor, caps: Tensor, t: int, lenpen: float,
                   stop: str) -> Tensor:
    """(n,) True where the search of a sentence is over.

    That is: the cap was reached; or no live beam is left; or `nbest` hypotheses have
    finished and the best live beam is not expected to beat the worst of them. A live beam
    now has t+1 terms, so its descendants have between t+2 and cap. By `stop`:

    * exact: expected = could, at any length up to the cap (_score_bound). Asking for
      `nbest` rather than `beam` finished hypotheses returns exactly the same n-best, only
      sooner: every later hypothesis descends from a beam live now, so it scores at most
      the bound, which cannot beat the n-best we hold.
    * early: expected = would, if it ended at the next step (t+2 terms). Exact for lenpen
      0, where longer can only be worse. With lenpen > 0 a beam that goes on with likely
      tokens raises its per-term score; the exact rule waits for those, which cost 30%
      more decoder row-steps on the Bible test set for +0.27 BLEU (README, "Stopping rules").
    * top: when the best finished hypothesis has at least the log-probability of every
      live beam, the length penalty aside: in effect CTranslate2's rule (a sentence ends
      once its top-ranked candidate has ended). Equal to exact for lenpen 0 and nbest 1;
      with lenpen > 0 it gives up longer hypotheses that would score better per term.
    """
    worst = finished.score[:, -1]  # -inf until `nbest` hypotheses have finished
    best_live = logprob.max(dim=1).values
    if stop == "top":
        # finished.logprob holds 0 in empty slots: take only those with a finite score
        best_finished = torch.where(finished.score.isfinite(), finished.logprob, NEG_INF)
        return ((caps <= t + 1) | best_live.isneginf()
                | (worst.isfinite() & (best_finished.max(dim=1).values >= best_live)))
    if stop == "exact":
        bound = _score_bound(best_live, t + 2, caps, lenpen)
    else:
        bound = best_live / float(t + 2) ** lenpen
    return (caps <= t + 1) | best_live.isneginf() | (worst.isfinite() & (bound <= worst))


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
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
) -> list[list[Hypothesis]]:
    """Up to `nbest` hypotheses per sentence of src (B, S), best score first.

    All sentences are searched together as (sentences x beam) rows. Each step extends every
    live beam by every token, keeps the 2*beam best, sets the ending ones aside (if within
    the top `beam`) and continues with the best `beam` others, until `stop` says the
    sentence is done (see _sentence_done).
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest ({nbest}) must be between 1 and beam ({beam})")
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {STOP_RULES}, got {stop!r}")
    batch = src.size(0)
    if batch == 0:
        return []
    caps, steps, dec = _start(models, src, max_len_a, max_len_b, beam, use_cache, bos, eos,
                              pad)
    beams = _Beams.start(caps, beam, nbest, steps, bos, pad)
    results = _Finished.empty(batch, nbest, steps, src.device)  # by sentence

    for t in range(steps):
        n = beams.rows.numel()
        lprobs = dec.log_probs(beams.seqs, t).view(n, beam, -1)  # (n, beam, V)
        cand = _top_candidates(beams.logprob, lprobs, 2 * beam)
        ending = _finishing(beams, cand, t, eos, pad, lenpen)
        finished = beams.finished if ending is None else beams.finished.merge(ending)
        logprob, seqs, rows = _advance(beams, cand, t, eos)
        done = _sentence_done(finished, logprob, beams.caps, t, lenpen, stop)
        beams = _Beams(beams.rows, beams.caps, logprob, seqs, finished, beams.offsets)
        keep = _kept_in_place(done)  # the step's one host-device sync
        if keep.numel() == n:
            dec.reorder(rows)
            continue
        results.store(beams.rows, finished)  # final for the done; live ones are rewritten
        if keep.numel() == 0:
            break
        beams = beams.select(keep)
        dec.reorder(rows.view(n, beam)[keep].view(-1), keep)
    return results.hypotheses()
