"""The training loop: batches -> label-smoothed loss -> Adam update, with validation,
checkpoints and exact resume.

Resume is exact: a checkpoint is written only between updates and holds the optimiser,
the step, the sampler's position and every RNG state, so N steps in one go and N/2 + N/2
steps with a restart in between give bit-identical weights. Around the loop: the batches
of each update and each rank's share (stream.py), what each rank decides (ranks.py), the
checkpoint files kept (keeper.py), the run's paths, stop rules, metrics file, RNG and
signals (run.py), the log lines (lines.py); what validation measures is in
evaluate/validation.py.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import torch
from tqdm import tqdm

from mtkit.config import Recipe, TrainConfig
from mtkit.data.corpora import TrainingSet
from mtkit.data.dataset import ParallelData
from mtkit.data.tokenizer import Tokenizer
from mtkit.errors import ConfigError, Interrupted
from mtkit.evaluate.validation import Validator
from mtkit.model.checkpoint import (
    Bundle,
    Parent,
    Progress,
    Trained,
    TrainState,
    load_checkpoint,
)
from mtkit.model.loss import guided_alignment_loss, label_smoothed_nll
from mtkit.model.transformer import CrossAttentionProbe, Transformer
from mtkit.progress import progress_bar
from mtkit.runtime.devices import bound_kernel_caches, resolve_device, resolve_precision
from mtkit.runtime.logs import RunLogFile
from mtkit.train.ema import WeightEMA
from mtkit.train.keeper import CheckpointKeeper
from mtkit.train.lines import show_train, show_valid
from mtkit.train.meter import TrainMeter
from mtkit.train.ranks import Ranks
from mtkit.train.run import (
    BadUpdates,
    MetricsLog,
    RunPaths,
    StopSignals,
    check_same_run,
    record_job,
    restore_rng_states,
    rng_states,
    seed_everything,
    stop_reason,
)
from mtkit.train.schedule import revise_horizon_when_due, scheduled_lr
from mtkit.train.stream import BatchStream, Group, RankShare

log = logging.getLogger("mtkit")


# --------------------------------------------------------------------------- the trainer


class Trainer:
    """One run's training: the model, its optimiser and the loop that updates them."""

    def __init__(
        self,
        recipe: Recipe,
        run_dir: Path,
        tokenizer: Tokenizer,
        data_dir: Path,
        data_fingerprints: dict[str, str],
        device: str | torch.device = "auto",
    ):
        self.recipe = recipe
        self.cfg = cfg = recipe.train
        self.paths = RunPaths(run_dir)
        self.tokenizer = tokenizer
        self.pad = tokenizer.specials.pad  # the loss's ignore index
        self.data_fingerprints = data_fingerprints
        # under torchrun: this rank's device (dist.setup)
        self.ranks = Ranks.of_this_job(resolve_device(device))
        self.device = self.ranks.device
        self.update_freq = updates_per_step(cfg, self.ranks.world_size)
        bound_kernel_caches()  # before the probe's bf16 matmul, the first oneDNN call
        # rank 0's answer for every rank: a probe's timing could differ between ranks
        self.precision, why = self.ranks.writers(
            lambda: resolve_precision(cfg.precision, self.device))
        log.info("training in %s (%s)", self.precision, why)
        training = TrainingSet(data_dir, recipe, tokenizer, announce=self.ranks.writes)
        max_len = recipe.model.max_positions - 1  # tokens per side before EOS/BOS
        self.batches = BatchStream(training, cfg, self.update_freq, self.ranks, max_len,
                                   tokenizer.specials)
        seed_everything(cfg.seed)  # before the model: its initial weights are random
        self.model = Transformer(
            recipe.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, self.pad,
            tokenizer.specials.start).to(self.device)
        self.train_model = for_training(self.model, cfg.compile, self.ranks.several)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=cfg.adam_betas, eps=cfg.adam_eps,
            weight_decay=cfg.weight_decay,
            fused=True,  # one kernel for all parameters instead of a loop over tensors
        )
        self.metrics = MetricsLog(self.paths.metrics, enabled=self.ranks.writes)
        self.validator = None if not recipe.data.valid else Validator(
            recipe, tokenizer, ParallelData(data_dir, "valid"), self.device)
        self.keeper = CheckpointKeeper(self.paths, cfg, self.ranks.writes, self)
        self.progress = Progress()
        self.bad_updates = BadUpdates(cfg, self.metrics)
        self.parent: Parent | None = None  # the model train.init_from started the run from
        self.ema = WeightEMA(self.model, cfg.ema) if cfg.ema else None
        # guided alignment: the cross-attention that alignments read, caught each pass
        self.probe = None if not self.batches.links else CrossAttentionProbe(
            self.model, [recipe.decode.alignment_layer])

    # ------------------------------------------------------------------ state

    def resume(self) -> bool:
        """Load checkpoint_last.pt if there is one; refuse when the run is incompatible."""
        if not self.paths.last.is_file():
            return False
        bundle = load_checkpoint(self.paths.last, map_location="cpu")
        check_same_run(bundle, self.recipe, self.tokenizer, self.data_fingerprints,
                       self.paths.run_dir)
        state = bundle.train_state
        if state is None:
            return False  # a model file put there by hand: nothing to resume
        check_world_size_change(state.progress, self.cfg, self.ranks.world_size,
                                self.paths.run_dir)
        self.model.load_state_dict(bundle.weights)
        self.parent = bundle.parent
        if self.ema is not None:
            if state.ema is not None:
                self.ema.load_state_dict(state.ema)
            else:  # train.ema switched on in a running run: the average starts here
                self.ema = WeightEMA(self.model, self.cfg.ema)
        self.optimizer.load_state_dict(state.optimizer)
        if self.cfg.precision == "auto":  # a run goes on as it trained: exact resume
            self.precision = state.progress.precision or "fp32"  # "": an earlier version's
            log.info("training in %s, as this run did (train.precision auto)", self.precision)
        self.progress = state.progress
        self.progress.finished = ""
        self.batches.load_state_dict(self.progress.sampler)
        restore_rng_states(state.rng)
        self.metrics.truncate(self.progress.step)
        log.info("resuming from %s at step %d (epoch %d, %.0fs trained)", self.paths.last,
                 self.progress.step, self.progress.epoch, self.progress.elapsed)
        return True

    def start_from(self, parent: Bundle, lineage: Parent) -> None:
        """A new run's weights from a parent model (train.init_from); the optimiser and
        the schedule stay fresh."""
        self.model.load_state_dict(parent.weights)
        self.parent = lineage
        if self.ema is not None:
            self.ema = WeightEMA(self.model, self.cfg.ema)
        log.info("starting from the weights of %s (train.init_from)", lineage.path)

    def bundle(self, with_train_state: bool) -> Bundle:
        """The model as a bundle, resumable with `with_train_state`."""
        train_state = None
        if with_train_state:
            self.progress.sampler = self.batches.state_dict()
            train_state = TrainState(self.optimizer.state_dict(), self.progress, rng_states(),
                                     None if self.ema is None else self.ema.state_dict())
        return Bundle(
            weights={k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            recipe=self.recipe,
            spm_src=self.tokenizer.src_bytes,
            spm_tgt=self.tokenizer.tgt_bytes,
            vocab=self.tokenizer.vocab_bytes,
            data_fingerprints=self.data_fingerprints,
            train_state=train_state,
            trained=Trained.from_progress(self.progress),
            parent=self.parent,
        )

    @contextmanager
    def averaged(self) -> Iterator[Bundle | None]:
        """The bundle of train.ema's weights, while they are in the model."""
        if self.ema is None:
            yield None
            return
        with self.ema.swapped_in(self.model):
            yield self.bundle(with_train_state=False)

    # ------------------------------------------------------------------ the loop

    def fit(self) -> Progress:
        reason = stop_reason(self.cfg, self.progress)
        if reason:
            log.info("training already complete (%s)", reason)
            self.progress.finished = reason
            return self.progress
        self.paths.run_dir.mkdir(parents=True, exist_ok=True)
        record_job(self.progress, self.cfg, self.update_freq, self.ranks.world_size,
                   self.device)
        self.progress.precision = self.precision
        start = time.monotonic() - self.progress.elapsed
        bar = progress_bar(self.cfg.max_steps, "step", initial=self.progress.step)
        self.metrics.open_tensorboard(self.paths.tensorboard, self.progress.step)
        try:
            with StopSignals() as signals:
                self._loop(start, bar, signals)
        finally:
            self.metrics.close()
            if bar is not None:
                bar.close()
        log.info("training stopped at step %d, epoch %d after %.0fs: %s", self.progress.step,
                 self.progress.epoch, self.progress.elapsed, self.progress.finished)
        return self.progress

    def _loop(self, start: float, bar: tqdm | None, signals: StopSignals) -> None:
        """Update until a stop rule or a signal; each step: log, validate, save."""
        cfg, progress = self.cfg, self.progress
        meter = TrainMeter.resumed(progress)
        while True:
            group = self.batches.next_group(progress)
            if group is None:  # the last epoch ended
                progress.finished = stop_reason(cfg, progress)
                break
            self._update(group, meter)
            progress.elapsed = time.monotonic() - start
            if progress.step % cfg.log_every == 0:
                record = meter.record(progress)
                self.metrics.write(record)
                show_train(record, bar)
                meter = TrainMeter(since=progress.elapsed)
            progress.log_window = meter.window()  # what a checkpoint saved now carries
            if progress.step % cfg.valid_every == 0:
                self._validate()
            progress.elapsed, received = self.ranks.agree(time.monotonic() - start,
                                                          signals.received)
            validated = self.validator is None or progress.step % cfg.valid_every == 0
            revise_horizon_when_due(cfg, progress, validated)
            progress.finished = stop_reason(cfg, progress)
            if progress.finished:
                break
            if progress.step % cfg.save_every == 0:
                self.keeper.save(progress.step, step_checkpoint=True)
            if received:
                self.keeper.save(progress.step, step_checkpoint=False)
                raise Interrupted(received)
        if self.validator is not None and progress.step % cfg.valid_every != 0:
            self._validate()
        self.keeper.save_final(progress.step)

    # ------------------------------------------------------------------ one update

    def _update(self, group: Group, meter: TrainMeter) -> None:
        """One update on the job's `group` of batches, the same whatever the ranks."""
        share = self.batches.share(group)
        (job_tokens,) = self.ranks.total(share.ntokens)
        loss, nll, align = self.ranks.total(*self._forward_backward(share, job_tokens))
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm).item()
        if not (math.isfinite(loss + align) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.bad_updates.skipped(self.progress.step, loss, grad_norm)
            return
        self.bad_updates.passed()
        lr = self._optimiser_step()
        self.progress.step += 1
        self.progress.tgt_tokens += job_tokens
        meter.add(loss, nll, job_tokens, grad_norm, lr, align if self.probe else None)

    def _forward_backward(self, share: RankShare, job_tokens: int
                          ) -> tuple[float, float, float]:
        """Gradients of this rank's batches, scaled to the job's mean loss per token;
        returns this rank's summed loss, nll and guided-alignment loss (0 without)."""
        self.train_model.train()
        self.optimizer.zero_grad(set_to_none=True)
        scale = share.weight * self.ranks.world_size / job_tokens  # DDP averages the ranks
        loss_sum = nll_sum = align_sum = 0.0
        for i, (position, batch) in enumerate(share.batches):
            last = i == len(share.batches) - 1 or not self.ranks.several
            no_sync = nullcontext() if last else self.train_model.no_sync()
            torch.manual_seed(self.batches.batch_seed(position))
            tgt_out = batch.tgt_out.to(self.device)
            real = tgt_out.ne(self.pad)  # (B, T): the loss reads only these positions
            with no_sync, self._autocast():
                with self.probe or nullcontext():
                    logits = self.train_model(
                        batch.src.to(self.device), batch.tgt_in.to(self.device), real
                    )  # (N, V)
                align = None if self.probe is None else guided_alignment_loss(
                    self.probe.weights()[0], batch.links.to(self.device))
            loss, nll, _ = label_smoothed_nll(
                logits, tgt_out[real], self.cfg.label_smoothing, self.pad
            )
            total = loss if align is None else loss + self.cfg.alignment_weight * align
            with no_sync:
                (total * scale).backward()
            loss_sum += share.weight * loss.item()
            nll_sum += share.weight * nll.item()
            align_sum += 0.0 if align is None else share.weight * align.item()
        return loss_sum, nll_sum, align_sum

    def _autocast(self) -> AbstractContextManager:
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _optimiser_step(self) -> float:
        """Adam at the schedule's learning rate for the next step; returns that rate."""
        lr = scheduled_lr(self.cfg, self.progress, self.progress.step + 1)
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(self.model)
        return lr

    # ------------------------------------------------------------------ reporting

    def _validate(self) -> None:
        """Dev loss (and BLEU); updates checkpoint_best.pt, best-K and the patience count."""
        if self.validator is None:
            return
        validator, progress = self.validator, self.progress
        result = self.ranks.writers(lambda: validator(self.model))
        score = result.score(self.cfg.best_metric)
        improved = progress.record_validation(score)
        if improved:
            self.keeper.save_model(self.paths.best)
        if self.cfg.average.kind == "best":
            self.keeper.keep_if_among_best(progress, score)
        averaged = None  # the average's scores: recorded, not followed
        if self.ema is not None and self.ranks.writes:
            with self.ema.swapped_in(self.model):
                averaged = validator(self.model)
        ema = {} if averaged is None else {"ema_loss": averaged.loss, "ema_bleu": averaged.bleu}
        self.metrics.write({**result.record(), **ema, "event": "valid", "step": progress.step,
                            "epoch": progress.epoch, "elapsed": round(progress.elapsed, 1),
                            "best": improved})
        show_valid(progress.step, result, averaged, improved)


# --------------------------------------------------------------------------- helpers


def for_training(model: Transformer, compile: bool, data_parallel: bool) -> torch.nn.Module:
    """What the update calls (DDP, compiled); the plain module stays what checkpoints
    save. DDP without a broadcast of the buffers at every forward: the only buffer, the
    sinusoid table, is the same on every rank. (torch 2.13 renamed the option.)"""
    if data_parallel:
        ddp = torch.nn.parallel.DistributedDataParallel
        try:
            model = ddp(model, forward_sync_buffers=False)
        except TypeError:  # torch before 2.13
            model = ddp(model, broadcast_buffers=False)
    if compile:
        # batch shapes vary with every batch: compile for dynamic shapes from the start
        model = torch.compile(model, dynamic=True)
    return model


def updates_per_step(cfg: TrainConfig, world_size: int) -> int:
    """Batches each rank accumulates per update: train.update_freq, or what makes
    train.tokens_per_update = max_tokens x update_freq x world_size."""
    if not cfg.tokens_per_update:
        return cfg.update_freq
    per_round = cfg.max_tokens * world_size
    if cfg.tokens_per_update % per_round:
        raise ConfigError(
            f"train.tokens_per_update ({cfg.tokens_per_update}) must be a multiple of "
            f"train.max_tokens x world size ({cfg.max_tokens} x {world_size} = {per_round})"
        )
    return cfg.tokens_per_update // per_round


def check_world_size_change(progress: Progress, cfg: TrainConfig, world_size: int,
                            run_dir: Path) -> None:
    """Refuse to resume where a different number of processes would silently change the
    effective batch (the learning rate and warmup were chosen for it)."""
    tokens = cfg.max_tokens * updates_per_step(cfg, world_size) * world_size
    if progress.world_size == world_size or progress.tokens_per_update == tokens:
        return
    before = progress.tokens_per_update
    per_round = cfg.max_tokens * world_size
    fix = (f"set train.tokens_per_update={before} to resume on any number of processes"
           if before % per_round == 0 else
           f"{before} is not a multiple of max_tokens x processes ({per_round}): resume on "
           f"{progress.world_size} process{'es' if progress.world_size > 1 else ''}")
    raise ConfigError(
        f"{run_dir}: this run trained on {progress.world_size} process"
        f"{'es' if progress.world_size > 1 else ''} with {before} tokens per update; on "
        f"{world_size} it would take {tokens} (max_tokens x update_freq x processes): "
        f"{fix}, or use --restart"
    )


def check_resumable_on(run_dir: Path, cfg: TrainConfig, world_size: int) -> None:
    """Whether a job of `world_size` processes could resume the run in run_dir: the check
    its ranks make on start, made before any process starts."""
    last = RunPaths(run_dir).last
    if last.is_file():
        state = load_checkpoint(last, map_location="cpu").train_state
        if state is not None:
            check_world_size_change(state.progress, cfg, world_size, run_dir)


def train(
    recipe: Recipe,
    run_dir: Path,
    tokenizer: Tokenizer,
    data_dir: Path,
    data_fingerprints: dict[str, str],
    device: str | torch.device = "auto",
    restart: bool = False,
    parent: tuple[Bundle, Parent] | None = None,
) -> Progress:
    """Train (or resume) the run in run_dir, a new run from `parent`'s weights if given;
    returns where it stopped."""
    trainer = Trainer(recipe, run_dir, tokenizer, data_dir, data_fingerprints, device)
    paths, writes = trainer.paths, trainer.ranks.writes
    if writes:
        paths.remove_temporary_files()
        if restart:
            paths.clear_training()
    resumed = not restart and trainer.resume()
    if not resumed and parent is not None:
        trainer.start_from(*parent)
    trainer.keeper.drop_stale_top(trainer.progress)
    run_dir.mkdir(parents=True, exist_ok=True)
    log_file = RunLogFile(paths.train_log)
    log_file.setFormatter(logging.Formatter("%(asctime)s | %(message)s"))
    if writes:
        log.addHandler(log_file)
    if log.level == logging.NOTSET:  # used as a library: still log progress to train.log
        log.setLevel(logging.INFO)
    try:
        return trainer.fit()
    finally:
        log.removeHandler(log_file)
        log_file.close()


