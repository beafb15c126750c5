"""A forced target prefix: the search emits given tokens first, then goes on freely.

Row i of a batch is forced to `tokens[i, :lengths[i]]` at steps 0..lengths[i]-1; its
log-probability counts those tokens as the model scores them (the model's own
log-probabilities, so a prefix the model would not have chosen costs what it costs), and
its length cap counts the tokens after the prefix (`search.target_caps`). Both searches
ask a prefix only for its first `width` steps, so a batch without one pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

NEG_INF = float("-inf")


@dataclass(frozen=True)
class ForcedPrefix:
    tokens: Tensor  # (B, width) target ids, pad after each row's prefix
    lengths: Tensor  # (B,) tokens to force per row (0: none)
    width: int  # the longest prefix: the steps at which anything is forced

    @classmethod
    def of(cls, prefixes: Sequence[Sequence[int]] | None, pad: int,
           device: torch.device | str = "cpu") -> ForcedPrefix | None:
        """The prefixes of a batch's rows (empty: none), or None when no row has one."""
        if not prefixes or not any(prefixes):
            return None
        width = max(len(p) for p in prefixes)
        tokens = torch.full((len(prefixes), width), pad, dtype=torch.long)
        for row, ids in enumerate(prefixes):
            tokens[row, : len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        lengths = torch.tensor([len(p) for p in prefixes], dtype=torch.long)
        return cls(tokens.to(device), lengths.to(device), width)

    def repeat(self, times: int) -> ForcedPrefix:
        """Each row `times` times in a row (a sentence's samples)."""
        return ForcedPrefix(self.tokens.repeat_interleave(times, 0),
                            self.lengths.repeat_interleave(times, 0), self.width)

    def force_rows(self, lprobs: Tensor, token: Tensor, token_lp: Tensor, t: int,
                   rows: Tensor) -> tuple[Tensor, Tensor]:
        """Greedy and sampling, step t: the chosen token (N,) and its log-prob (N,),
        replaced by the forced token and the model's log-prob of it in rows still inside
        their prefix. lprobs (N, V); rows (N,): each live row's index in the batch."""
        forcing = self.lengths[rows] > t  # (N,)
        forced = self.tokens[rows, t]  # (N,) pad where not forcing: gathered, then unused
        forced_lp = lprobs.gather(1, forced.unsqueeze(1)).squeeze(1)
        return torch.where(forcing, forced, token), torch.where(forcing, forced_lp, token_lp)

    def force_beams(self, lprobs: Tensor, logprob: Tensor, t: int, rows: Tensor) -> Tensor:
        """Beam search, step t: lprobs (n, beam, V) with, for each sentence still inside
        its prefix, every candidate but the forced token of its one live beam at -inf.

        One live beam: at step 0 only beam 0 is (beam.Beams.start), and with one finite
        candidate per step it stays the only one; the beams fill once the prefix ends, as
        at step 0 without one. logprob (n, beam): the beams' sums, -inf where unused."""
        forcing = self.lengths[rows] > t  # (n,)
        live = logprob.argmax(dim=1)  # (n,) the live beam (the only finite one)
        forced = self.tokens[rows, t].unsqueeze(1)  # (n, 1)
        n, beam, vocab = lprobs.shape
        live_lp = lprobs[torch.arange(n, device=lprobs.device), live]  # (n, V)
        only = torch.full_like(live_lp, NEG_INF).scatter_(1, forced, live_lp.gather(1, forced))
        masked = torch.full_like(lprobs, NEG_INF)
        masked[torch.arange(n, device=lprobs.device), live] = only
        return torch.where(forcing.view(n, 1, 1), masked, lprobs)
