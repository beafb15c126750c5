"""Beam search's bookkeeping: the live beams, the finished n-best, and the rules of one
step (which candidates extend, which end, where the new beams go, when a sentence is
done). `search.beam_search` drives them; its conventions (lengths, scores) are search's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mtkit.decode.topk import top_k
from mtkit.model.cache import gather_rows
from mtkit.runtime.compiled import compiled_function

NEG_INF = float("-inf")

STOP_RULES = ("early", "exact", "top")  # how beam search may end a sentence: sentence_done

FinishedParts = tuple[Tensor, Tensor, Tensor, Tensor]  # Finished's fields, in order


@dataclass
class Finished:
    """The best `size` finished hypotheses per sentence, best first; empty slots score -inf.

    During the search size = nbest: a hypothesis outside the n-best is never returned.
    """

    score: Tensor  # (n, size)
    logprob: Tensor  # (n, size)
    seqs: Tensor  # (n, size, steps) tokens, pad after the end
    length: Tensor  # (n, size) tokens (EOS not counted)

    @classmethod
    def empty(cls, n: int, size: int, steps: int, device: torch.device) -> Finished:
        return cls(
            score=torch.full((n, size), NEG_INF, device=device),
            logprob=torch.zeros(n, size, device=device),
            seqs=torch.zeros(n, size, steps, dtype=torch.long, device=device),
            length=torch.zeros(n, size, dtype=torch.long, device=device),
        )

    @property
    def parts(self) -> FinishedParts:
        """The fields as a tuple, as the compiled beam step takes and gives them."""
        return self.score, self.logprob, self.seqs, self.length

    def select(self, keep: Tensor) -> Finished:
        return Finished(self.score[keep], self.logprob[keep], self.seqs[keep], self.length[keep])

    def store(self, rows: Tensor, other: Finished) -> None:
        """Write `other` (one entry per live sentence) into this by-sentence table."""
        self.score[rows], self.logprob[rows] = other.score, other.logprob
        self.seqs[rows], self.length[rows] = other.seqs, other.length


def merge(held: FinishedParts, new: FinishedParts) -> FinishedParts:
    """The best of both, as many as `held` holds, best first."""
    score = torch.cat([held[0], new[0]], dim=1)  # (n, size + beam)
    _, best = score.topk(held[0].size(1), dim=1)  # (n, size)
    return (score.gather(1, best), _pick(held[1], new[1], best), _pick(held[2], new[2], best),
            _pick(held[3], new[3], best))


def _pick(a: Tensor, b: Tensor, best: Tensor) -> Tensor:
    """Entries `best` (n, size) of a and b side by side along dim 1; a, b (n, ., [steps])."""
    both = torch.cat([a, b], dim=1)
    if both.dim() == 3:
        return both.gather(1, best.unsqueeze(-1).expand(-1, -1, both.size(2)))
    return both.gather(1, best)


@dataclass
class Beams:
    """The live hypotheses of the n unfinished sentences; row i*beam + j is beam j of i."""

    rows: Tensor  # (n,) sentence index in the input batch
    caps: Tensor  # (n,) token cap
    logprob: Tensor  # (n, beam) summed log-probs; -inf marks an unused beam
    seqs: Tensor  # (n*beam, steps+1) BOS + tokens so far
    finished: Finished  # the sentences' n-best so far
    offsets: Tensor  # (n, 1) each sentence's first row: 0, beam, 2*beam, ...

    @classmethod
    def start(cls, caps: Tensor, beam: int, nbest: int, steps: int, bos: int,
              pad: int) -> Beams:
        n, device = caps.numel(), caps.device
        logprob = torch.zeros(n, beam, device=device)
        logprob[:, 1:] = NEG_INF  # step 0 expands beam 0 only: the beams would be identical
        seqs = torch.full((n * beam, steps + 1), pad, dtype=torch.long, device=device)
        seqs[:, 0] = bos
        return cls(torch.arange(n, device=device), caps, logprob, seqs,
                   Finished.empty(n, nbest, steps, device), offsets(n, beam, device))

    @property
    def live(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """What beam_step reads of the live beams, in its order."""
        return self.logprob, self.seqs, self.offsets, self.caps

    def select(self, keep: Tensor) -> Beams:
        beam = self.logprob.size(1)
        seqs = self.seqs.view(-1, beam, self.seqs.size(1))[keep].view(-1, self.seqs.size(1))
        return Beams(self.rows[keep], self.caps[keep], self.logprob[keep], seqs,
                      self.finished.select(keep), offsets(keep.numel(), beam, keep.device))


def offsets(n: int, beam: int, device: torch.device) -> Tensor:
    return torch.arange(n, device=device).unsqueeze(1) * beam  # (n, 1)


def top_candidates(logprob: Tensor, lprobs: Tensor, count: int) -> tuple[Tensor, Tensor, Tensor]:
    """Best `count` one-token extensions per sentence over all its beams, best first.

    logprob (n, beam), lprobs (n, beam, V) -> value, source beam, token, each (n, count).

    Each beam's best `count` tokens first, then the best of those beam x count sums: adding
    a beam's logprob keeps the order of its tokens, so these are the candidates of a top-k
    over all beam x V sums, with the same values, without writing the (n, beam*V) sums
    out: one pass fewer over a large batch's log-probs.
    """
    n, vocab = lprobs.size(0), lprobs.size(2)
    per_beam = min(count, vocab)
    best_lp, best_token = top_k(lprobs, per_beam)  # (n, beam, per_beam)
    total = (logprob.unsqueeze(-1) + best_lp).view(n, -1)  # (n, beam*per_beam)
    value, index = total.topk(count, dim=1)
    return value, index // per_beam, best_token.view(n, -1).gather(1, index)


def finishing(value: Tensor, source: Tensor, token: Tensor, seqs: Tensor, offsets: Tensor,
              caps: Tensor, t: int, eos: int, pad: int, lenpen: float
              ) -> FinishedParts | None:
    """The candidates that end at step t: by EOS, or by reaching the sentence's cap.

    value, source, token: the top `beam` candidates (n, beam), as only they would be in
    the beam: an EOS ranked below the beam is ignored. So beam=1 walks the greedy path
    and, with lenpen=0, stops where greedy stops (with lenpen > 0 it may go on past
    greedy's EOS when a longer ending could still score better per term). seqs, offsets:
    the live beams' (Beams).

    None when on the CPU none ends (most steps of a short batch): merging a table of -inf
    scores changes nothing, and asking costs the CPU no wait, so the step skips the copy
    and the merge. (On a GPU the question would be a second wait per step.)
    """
    ended = token == eos
    at_cap = caps <= t + 1  # (n,)
    if nothing_ends(ended) and nothing_ends(at_cap):  # most steps: fewer operators
        return None
    ends = (ended | at_cap.unsqueeze(1)) & value.isfinite()
    if nothing_ends(ends):
        return None
    # Whether by EOS (t tokens + EOS) or at the cap (t + 1 tokens): t + 1 terms.
    score = torch.where(ends, value / float(t + 1) ** lenpen, float("-inf"))
    # (n, beam, steps): the source beam's tokens (a copy, BOS dropped) + the new one
    ending = seqs[(offsets + source).view(-1)].view(source.size(0), source.size(1), -1)
    ending = ending[:, :, 1:]
    ending[:, :, t] = torch.where(ended, pad, token)
    return score, value, ending, t + 1 - ended.long()


def nothing_ends(ends: Tensor) -> bool:
    """True when it is known without waiting for a device that no candidate ends."""
    return ends.device.type == "cpu" and not bool(ends.any())


def advance(value: Tensor, source: Tensor, token: Tensor, seqs: Tensor, offsets: Tensor,
            t: int, eos: int) -> tuple[Tensor, Tensor, Tensor]:
    """The next live beams: the best `beam` candidates (n, 2*beam) that do not end with
    EOS.

    Each beam has one EOS candidate, so at most `beam` of the 2*beam candidates are EOS and
    at least `beam` go on. They are placed as `parent_slots` says, not best first. Returns
    logprob (n, beam), seqs (n*beam, steps+1) and the (n*beam,) rows they come from (for
    reordering the decoder state).
    """
    beam = value.size(1) // 2
    # EOS candidates behind all others, the rest in their best-first order: a stable sort
    # of the EOS flags.
    _, order = torch.sort(token == eos, dim=1, stable=True)
    pick = order[:, :beam]  # (n, beam)
    pick = pick.gather(1, parent_slots(source.gather(1, pick)))  # into the parents' rows
    rows = (offsets + source.gather(1, pick)).view(-1)  # (n*beam,) source rows
    seqs = seqs[rows]
    seqs[:, t + 1] = token.gather(1, pick).view(-1)
    return value.gather(1, pick), seqs, rows


def parent_slots(parent: Tensor) -> Tensor:
    """Where each new beam goes: (n, beam) parent of each, best first -> (n, beam) order,
    slot j of a sentence taking its new beam order[:, j].

    Each parent's best continuation takes the parent's own slot, so that its row of the
    decoder cache stays where it is; the other continuations fill, in rank order, the slots
    of parents that have none. The cache then copies only the rows that change
    (`DecoderCache.reorder`), far fewer than when the beams are kept best first. Nothing
    ranks beams by slot: the search takes the best by value wherever they are.
    """
    beam = parent.size(1)
    rank = torch.arange(beam, device=parent.device).expand_as(parent)  # (n, beam)
    # by slot: the rank of its first (best) child; `beam` where it has none
    first_child = torch.full_like(parent, beam).scatter_reduce_(1, parent, rank, "amin")
    is_first = first_child.gather(1, parent) == rank  # (n, beam) by rank
    childless = first_child == beam  # (n, beam) by slot
    # the other children in rank order (a row has as many of them as childless slots)
    others = is_first.to(torch.uint8).argsort(dim=1, stable=True)
    before = childless.cumsum(dim=1) - childless.long()  # childless slots before each slot
    return torch.where(childless, others.gather(1, before), first_child)


def score_bound(logprob: Tensor, shortest: int, longest: Tensor, lenpen: float) -> Tensor:
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


def sentence_done(finished_score: Tensor, finished_logprob: Tensor, logprob: Tensor,
                  caps: Tensor, t: int, lenpen: float, stop: str) -> Tensor:
    """(n,) True where the search of a sentence is over, given its n-best so far (score and
    logprob, as in Finished) and its live beams' logprob (n, beam).

    That is: the cap was reached; or no live beam is left; or `nbest` hypotheses have
    finished and the best live beam is not expected to beat the worst of them. A live beam
    now has t+1 terms, so its descendants have between t+2 and cap. By `stop`:

    * exact: expected = could, at any length up to the cap (score_bound). Asking for
      `nbest` rather than `beam` finished hypotheses returns exactly the same n-best, only
      sooner: every later hypothesis descends from a beam live now, so it scores at most
      the bound, which cannot beat the n-best we hold.
    * early: expected = would, if it ended at the next step (t+2 terms). Exact for lenpen
      0, where longer can only be worse. With lenpen > 0 a beam that goes on with likely
      tokens raises its per-term score; the exact rule waits for those, at the cost of
      more decoder row-steps (the trade-off: docs/benchmarks.md).
    * top: when the best finished hypothesis has at least the log-probability of every
      live beam, the length penalty aside: in effect CTranslate2's rule (a sentence ends
      once its top-ranked candidate has ended). Equal to exact for lenpen 0 and nbest 1;
      with lenpen > 0 it gives up longer hypotheses that would score better per term.
    """
    worst = finished_score[:, -1]  # -inf until `nbest` hypotheses have finished
    best_live = logprob.amax(dim=1)
    if stop == "top":
        # finished logprobs hold 0 in empty slots: take only those with a finite score
        best_finished = torch.where(finished_score.isfinite(), finished_logprob,
                                    float("-inf"))
        return ((caps <= t + 1) | best_live.isneginf()
                | (worst.isfinite() & (best_finished.amax(dim=1) >= best_live)))
    if stop == "exact":
        bound = score_bound(best_live, t + 2, caps, lenpen)
    else:
        bound = best_live / float(t + 2) ** lenpen
    return (caps <= t + 1) | best_live.isneginf() | (worst.isfinite() & (bound <= worst))


def beam_step(lprobs: Tensor, logprob: Tensor, seqs: Tensor, offsets: Tensor, caps: Tensor,
              finished: FinishedParts, t: int, eos: int, pad: int, lenpen: float, stop: str
              ) -> tuple[Tensor, Tensor, Tensor, Tensor, FinishedParts]:
    """One step's bookkeeping, after the decoder: lprobs (n, beam, V) extend the live
    beams (logprob, seqs, offsets, caps: Beams'); the ending candidates join `finished`.
    Returns the new live logprob and seqs, the rows they come from, which sentences are
    done (n,), and the n-best so far. In the Python TorchScript compiles
    (`compiled_beam_step`):
    its few dozen small operators are most of what a step of one sentence costs besides
    the decoder."""
    beam = logprob.size(1)
    value, source, token = top_candidates(logprob, lprobs, 2 * beam)
    ending = finishing(value[:, :beam], source[:, :beam], token[:, :beam], seqs, offsets,
                       caps, t, eos, pad, lenpen)
    if ending is not None:
        finished = merge(finished, ending)
    logprob, seqs, rows = advance(value, source, token, seqs, offsets, t, eos)
    done = sentence_done(finished[0], finished[1], logprob, caps, t, lenpen, stop)
    return logprob, seqs, rows, done, finished


def log_probs(logits: Tensor, never: Tensor) -> Tensor:
    """(N, V) one model's logits -> fp32 log-probabilities, -inf at the ids in `never`
    (tokens the search must not produce)."""
    return logits.float().log_softmax(dim=-1).index_fill_(1, never, float("-inf"))


def cached_beam_step(logits: Tensor, never: Tensor, logprob: Tensor, seqs: Tensor,
                     offsets: Tensor, caps: Tensor, finished: FinishedParts, t: int, eos: int,
                     pad: int, lenpen: float, stop: str, self_kv: Tensor, spare_kv: Tensor,
                     used: int) -> tuple[Tensor, Tensor, Tensor, Tensor, FinishedParts, int]:
    """One model's step after its decoder, in one compiled call: its log-probs
    (`log_probs`), `beam_step`, and, when no sentence is done, its decoder cache's reorder
    to the new rows (`gather_rows` on the cache's K/V buffers, `used` positions filled).
    The last value: 0 when a sentence is done (the cache is left to the caller), 1 when
    the rows moved in place, 2 when they were gathered into spare_kv (the caller swaps the
    buffers: `DecoderCache.gathered`)."""
    lprobs = log_probs(logits, never).view(logprob.size(0), logprob.size(1), -1)
    logprob, seqs, rows, done, finished = beam_step(lprobs, logprob, seqs, offsets, caps,
                                                    finished, t, eos, pad, lenpen, stop)
    moved = 0
    if not bool(done.any()):
        moved = 2 if gather_rows(self_kv, spare_kv, rows, used) else 1
    return logprob, seqs, rows, done, finished, moved


# compiled by TorchScript, once a process (the Python functions where they cannot be)
compiled_beam_step = compiled_function(beam_step)
compiled_cached_beam_step = compiled_function(cached_beam_step)
