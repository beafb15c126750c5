"""The training batches, update by update: the job's group of batches from the sampler,
and the share of it this rank computes.

An update takes update_freq x world_size batches for the whole job (fewer at an epoch's
end: an update never spans two epochs). Each batch's dropout is seeded by its position in
the epoch (`batch_seed`), so an update computes the same whatever the number of ranks
sharing it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mtkit.config import TrainConfig
from mtkit.data.batching import Batch, BatchSampler, make_batch
from mtkit.data.corpora import TrainingSet
from mtkit.data.tokenizer import SpecialIds
from mtkit.model.checkpoint import Progress
from mtkit.train.ranks import Ranks
from mtkit.train.run import stop_reason

Group = list[tuple[int, list[int]]]  # (position in the epoch, pair indices) per batch


@dataclass
class RankShare:
    """What one rank computes of an update."""

    batches: list[tuple[int, Batch]]  # (position in the epoch, batch)
    # 0.0 for a rank left without a batch: it runs the group's first one for nothing,
    # since DDP needs a backward from every rank
    weight: float
    ntokens: int  # target tokens this rank's loss counts (0 with weight 0)


class BatchStream:
    def __init__(self, training: TrainingSet, cfg: TrainConfig, update_freq: int,
                 ranks: Ranks, max_len: int, specials: SpecialIds):
        self.training = training
        self.cfg = cfg
        self.ranks = ranks
        self.per_update = update_freq * ranks.world_size
        self.max_len = max_len  # tokens per side before EOS/BOS
        self.specials = specials
        # guided alignment: the batches bring their pairs' piece links
        self.links = training.has_links and cfg.alignment_weight > 0
        self.sampler = BatchSampler(training.epoch_items, cfg.max_tokens, seed=cfg.seed,
                                    shuffle=True)
        self.sampler.set_epoch(1)  # epochs count from 1, as users read them

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def next_group(self, progress: Progress) -> Group | None:
        """The next update's batches for the whole job; rolls over epochs (counted in
        `progress`); None when max_epochs is reached."""
        while True:
            group = self.sampler.take(self.per_update)
            if group:
                return group
            progress.epoch += 1
            self.sampler.set_epoch(progress.epoch)  # saved so, even when stopping here
            if stop_reason(self.cfg, progress):
                return None

    def share(self, group: Group) -> RankShare:
        """This rank's batches of the job's `group`, padded into tensors."""
        mine = self.ranks.share(group)
        data = self.training.epoch(self.sampler.epoch)
        batches = [(position, make_batch(data, indices, self.specials, self.max_len, self.links))
                   for position, indices in mine or group[:1]]
        ntokens = sum(batch.ntokens for _, batch in batches) if mine else 0
        return RankShare(batches, 1.0 if mine else 0.0, ntokens)

    def batch_seed(self, position: int) -> int:
        return batch_seed(self.cfg.seed, self.sampler.epoch, position)

    def state_dict(self) -> dict[str, int]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.sampler.load_state_dict(state)


def batch_seed(seed: int, epoch: int, position: int) -> int:
    """The RNG seed of one training batch (its dropout): a function of where the batch
    is in the data, not of which process runs it or how many ran before."""
    return int(np.random.SeedSequence([seed, epoch, position]).generate_state(1)[0])
