"""Teacher-forced passes: given targets run through the model whole, one pass per batch.

Two things read them: scoring given translations (the log-probability of each target
token) and word alignments (one decoder layer's cross-attention over the source, per
target token). The search does neither: it decodes step by step with attention kernels
that return no weights, and its hot path carries none; an alignment costs one extra
pass over each finished hypothesis instead.

Row t of a pass is the decoder position that reads target token t - 1 (the start token
for t = 0) and predicts token t; the last row predicts EOS. So the log-probability of
token t and the attention used to align token t come from the same position, the one at
which the search chose that token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mtkit.data.vocab import SpecialIds
from mtkit.model.transformer import CrossAttentionProbe, Transformer


@dataclass(frozen=True)
class Forced:
    """One pair's pass: the target's T tokens, then EOS."""

    token_logprobs: Tensor  # (T + 1,) fp32 natural-log probabilities, EOS last
    # the cross-attention of each layer asked for, over the source's S tokens (in the ids'
    # order, whatever order the encoder read them in) and its EOS:
    # (layers, T + 1, S + 1) heads averaged, or (layers, heads, T + 1, S + 1); None if none
    attention: Tensor | None

    @property
    def logprob(self) -> float:
        """The log-probability of the whole target, EOS included."""
        return float(self.token_logprobs.sum())


def pad_sources(sources: Sequence[Sequence[int]], specials: SpecialIds) -> Tensor:
    """End each source with eos (`SpecialIds.source_input`) and right-pad:
    (batch, longest + 1)."""
    return _padded([specials.source_input(ids) for ids in sources], specials.pad)


def _padded(rows: list[list[int]], pad: int) -> Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
    for i, ids in enumerate(rows):
        out[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


@torch.inference_mode()
def forced_pass(models: Sequence[Transformer], sources: Sequence[Sequence[int]],
                targets: Sequence[Sequence[int]], specials: SpecialIds,
                attention_layers: Sequence[int] = (), heads: bool = False) -> list[Forced]:
    """Each (source, target) pair of ids, without EOS, through the models. An ensemble
    averages the log-probabilities as the search does, and the attention weights.

    `attention_layers`: decoder layers (negative: from the end) whose cross-attention to
    return, heads averaged, or each head with `heads` (one model only). Every target must
    fit the models' positions (BOS + target tokens <= max_positions)."""
    if heads and len(models) > 1:
        raise ValueError("attention per head is one model's: give one model, not an ensemble")
    device = next(models[0].parameters()).device
    src = pad_sources(sources, specials).to(device)  # (B, S)
    tgt_in = _padded([[specials.start, *ids] for ids in targets], specials.pad).to(device)
    labels = _padded([[*ids, specials.eos] for ids in targets], specials.pad).to(device)
    real = torch.zeros_like(labels, dtype=torch.bool)  # (B, T) the positions scored
    for row, ids in enumerate(targets):
        real[row, : len(ids) + 1] = True
    logprobs, attention = [], []
    for model in models:
        with CrossAttentionProbe(model, attention_layers) as probe:
            logits = model(src, tgt_in, positions=real)  # (N, V)
        if attention_layers:
            weights = probe.weights().float()  # (layers, B, H, T, S)
            attention.append(weights if heads else weights.mean(dim=2))
        lprobs = logits.float().log_softmax(dim=-1)  # (N, V)
        logprobs.append(lprobs.gather(1, labels[real].unsqueeze(1)).squeeze(1))  # (N,)
    token_lps = logprobs[0] if len(logprobs) == 1 else torch.stack(logprobs).mean(dim=0)
    attn = None
    if attention:
        attn = attention[0] if len(attention) == 1 else torch.stack(attention).mean(dim=0)
    out, start = [], 0
    for row, (src_ids, ids) in enumerate(zip(sources, targets, strict=True)):
        count = len(ids) + 1
        columns = specials.source_positions(len(src_ids))  # (S + 1,) the ids' order, EOS
        pair_attn = None if attn is None else attn[:, row, ..., :count, columns]
        out.append(Forced(token_lps[start : start + count].cpu(),
                          None if pair_attn is None else pair_attn.cpu()))
        start += count
    return out
