"""The training loop: batches -> label-smoothed loss -> Adam update, with validation,
checkpoints and exact resume.

Resume is exact: a checkpoint is written only between updates and holds the optimiser,
the step, the sampler's position and every RNG state, so N steps in one go and N/2 + N/2
steps with a restart in between give bit-identical weights. The run's state outside the
loop (paths, stop rules, compatibility, metrics file, RNG, signals) is in run.py; what
validation measures is in evaluation.py.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from mtkit.config import Recipe, TrainConfig
from mtkit.data.batching import BatchSampler, make_batch
from mtkit.data.corpora import TrainingSet
from mtkit.data.dataset import ParallelData
from mtkit.data.tokenizer import PAD_ID, Tokenizer
from mtkit.errors import ConfigError, Interrupted, TrainingDiverged
from mtkit.evaluate.validation import Validator
from mtkit.model.checkpoint import (
    Bundle,
    Parent,
    Progress,
    Trained,
    TrainState,
    load_checkpoint,
    save_checkpoint,
)
from mtkit.model.loss import label_smoothed_nll
from mtkit.model.transformer import Transformer
from mtkit.progress import progress_bar
from mtkit.runtime import distributed as dist
from mtkit.runtime.devices import resolve_device
from mtkit.train.ema import WeightEMA
from mtkit.train.run import (
    MetricsLog,
    RunPaths,
    StopSignals,
    TrainMeter,
    check_same_run,
    restore_rng_states,
    rng_states,
    seed_everything,
    stop_reason,
)
from mtkit.train.schedule import estimate_horizon, learning_rate

log = logging.getLogger("mtkit")


# --------------------------------------------------------------------------- the trainer


class Trainer:
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
        self.cfg = recipe.train
        self.paths = RunPaths(run_dir)
        self.tokenizer = tokenizer
        self.data_fingerprints = data_fingerprints
        self.rank, self.world_size = dist.rank(), dist.world_size()
        self.device = resolve_device(device)  # under torchrun: this rank's (dist.setup)
        self.update_freq = updates_per_step(self.cfg, self.world_size)

        self.training = TrainingSet(data_dir, recipe, tokenizer, announce=self.rank == 0)
        valid_data = ParallelData(data_dir, "valid") if recipe.data.valid else None
        self.sampler = BatchSampler(self.training.epoch_items, self.cfg.max_tokens,
                                    seed=self.cfg.seed, shuffle=True)
        self.sampler.set_epoch(1)  # epochs count from 1, as users read them
        seed_everything(self.cfg.seed)  # before the model: its initial weights are random
        self.model = Transformer(
            recipe.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, PAD_ID
        ).to(self.device)
        self.train_model = self._wrap(self.model)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=self.cfg.lr,
            betas=self.cfg.adam_betas,
            eps=self.cfg.adam_eps,
            weight_decay=self.cfg.weight_decay,
            fused=True,  # one kernel for all parameters: the per-tensor loop cost 10% a step
        )
        self.max_len = recipe.model.max_positions - 1  # tokens per side before EOS/BOS
        self.metrics = MetricsLog(self.paths.metrics, enabled=self.rank == 0)
        self.validator = None if valid_data is None else Validator(
            recipe, tokenizer, valid_data, self.device)
        self.progress = Progress()
        self.bad_steps = 0
        self.parent: Parent | None = None  # the model train.init_from started the run from
        self.ema = WeightEMA(self.model, self.cfg.ema) if self.cfg.ema else None

    def _wrap(self, model: Transformer) -> torch.nn.Module:
        """What the update calls (DDP, compiled); self.model stays the plain module that
        checkpoints save."""
        if self.world_size > 1:
            model = _data_parallel(model)
        if self.cfg.compile:
            # batch shapes vary with every batch: compile for dynamic shapes from the start
            model = torch.compile(model, dynamic=True)
        return model

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
        self.model.load_state_dict(bundle.weights)
        self.parent = bundle.parent
        if self.ema is not None:
            if state.ema is not None:
                self.ema.load_state_dict(state.ema)
            else:  # train.ema switched on in a running run: the average starts here
                self.ema = WeightEMA(self.model, self.cfg.ema)
        self.optimizer.load_state_dict(state.optimizer)
        self.progress = state.progress
        self.progress.finished = ""
        self.sampler.load_state_dict(self.progress.sampler)
        # files of earlier versions may hold a sampler already moved on to the next epoch,
        # or (stopped by max_epochs) one still at the end of the epoch before
        self.progress.epoch = max(self.progress.epoch, self.sampler.epoch)
        self.sampler.set_epoch(self.progress.epoch)
        restore_rng_states(state.rng)
        check_world_size_change(self.progress, self.cfg, self.world_size, self.paths.run_dir)
        self.metrics.truncate(self.progress.step)
        log.info(
            "resuming from %s at step %d (epoch %d, %.0fs trained)",
            self.paths.last,
            self.progress.step,
            self.progress.epoch,
            self.progress.elapsed,
        )
        return True

    def start_from(self, parent: Bundle, lineage: Parent) -> None:
        """A new run's weights from a parent model (train.init_from); the optimiser and
        the schedule stay fresh."""
        self.model.load_state_dict(parent.weights)
        self.parent = lineage
        if self.ema is not None:
            self.ema = WeightEMA(self.model, self.cfg.ema)
        log.info("starting from the weights of %s (train.init_from)", lineage.path)

    def _bundle(self, with_train_state: bool) -> Bundle:
        train_state = None
        if with_train_state:
            self.progress.sampler = self.sampler.state_dict()
            train_state = TrainState(self.optimizer.state_dict(), self.progress, rng_states(),
                                     None if self.ema is None else self.ema.state_dict())
        return Bundle(
            weights={k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            recipe=self.recipe,
            spm_src=self.tokenizer.src_bytes,
            spm_tgt=self.tokenizer.tgt_bytes,
            data_fingerprints=self.data_fingerprints,
            train_state=train_state,
            trained=Trained.from_progress(self.progress),
            parent=self.parent,
        )

    def save(self, step_checkpoint: bool) -> None:
        if self.rank != 0:
            return
        self.paths.checkpoints.mkdir(parents=True, exist_ok=True)
        bundle = self._bundle(with_train_state=True)
        if step_checkpoint and self.cfg.keep_last > 0:
            save_checkpoint(self.paths.step(self.progress.step), bundle.without_train_state())
            for old in self.paths.step_checkpoints()[: -self.cfg.keep_last]:
                old.unlink(missing_ok=True)
        if self.ema is not None:  # the averaged weights, a candidate for model.pt
            with self.ema.swapped_in(self.model):
                save_checkpoint(self.paths.ema, self._bundle(with_train_state=False))
        save_checkpoint(self.paths.last, bundle)

    # ------------------------------------------------------------------ the loop

    def fit(self) -> Progress:
        cfg = self.cfg
        reason = stop_reason(self.cfg, self.progress)
        if reason:
            log.info("training already complete (%s)", reason)
            self.progress.finished = reason
            return self.progress
        self.paths.run_dir.mkdir(parents=True, exist_ok=True)
        self.progress.world_size = self.world_size
        if cfg.schedule == "inverse-sqrt":
            self.progress.horizon = 0
        elif cfg.max_steps:
            self.progress.horizon = cfg.max_steps
        self.progress.tokens_per_update = cfg.max_tokens * self.update_freq * self.world_size
        log.info("training on %s, %d process%s; tokens per update: %d x %d x %d = %d "
                 "(max_tokens x update_freq x processes)", self.device, self.world_size,
                 "es" if self.world_size > 1 else "", cfg.max_tokens, self.update_freq,
                 self.world_size, self.progress.tokens_per_update)
        start = time.monotonic() - self.progress.elapsed
        meter = TrainMeter()
        bar = progress_bar(cfg.max_steps, "step", initial=self.progress.step)
        self.metrics.open_tensorboard(self.paths.tensorboard, self.progress.step)
        try:
            with StopSignals() as signals:
                self._loop(start, meter, bar, signals)
        finally:
            self.metrics.close()
            if bar is not None:
                bar.close()
        log.info(
            "training stopped at step %d, epoch %d after %.0fs: %s",
            self.progress.step,
            self.progress.epoch,
            self.progress.elapsed,
            self.progress.finished,
        )
        return self.progress

    def _loop(self, start: float, meter: TrainMeter, bar: tqdm | None,
              signals: StopSignals) -> None:
        """Update until a stop rule or a signal; each step: log, validate, save."""
        cfg = self.cfg
        while True:
            group = self._next_group()
            if group is None:  # the last epoch ended
                self.progress.finished = stop_reason(cfg, self.progress)
                break
            self._update(group, meter)
            self.progress.elapsed = time.monotonic() - start
            step = self.progress.step
            if step % cfg.log_every == 0:
                self._log_train(meter, bar)
            if step % cfg.valid_every == 0:
                self._validate()
            # every rank decides on rank 0's clock and on a signal any rank received
            self.progress.elapsed, received = dist.agree(time.monotonic() - start,
                                                         signals.received, self.device)
            self._estimate_horizon()
            self.progress.finished = stop_reason(cfg, self.progress)
            if self.progress.finished:
                break
            if step % cfg.save_every == 0:
                self.save(step_checkpoint=True)
            if received:
                self.save(step_checkpoint=False)
                raise Interrupted(received)
        self._finish()

    def _estimate_horizon(self) -> None:
        """A max_time budget's horizon, once the warmup is over: at its first validation
        (so that validations weigh in the mean speed as they will to the end), from the
        speed so far (on every rank alike: the clock is rank 0's), stored in the progress."""
        cfg, progress = self.cfg, self.progress
        if (cfg.schedule == "inverse-sqrt" or progress.horizon or not cfg.max_time
                or progress.step < max(cfg.warmup_steps, 1)):
            return
        if self.validator is not None and progress.step % cfg.valid_every:
            return
        progress.horizon = estimate_horizon(progress.step, progress.elapsed, cfg.max_time)
        log.info("%s schedule: %d updates in the %gs budget at %.2fs an update so far; "
                 "the learning rate reaches %g there", cfg.schedule, progress.horizon,
                 cfg.max_time, progress.elapsed / progress.step, cfg.min_lr)

    def _finish(self) -> None:
        """Validate and save the final state unless the last step just did."""
        step = self.progress.step
        if self.validator is not None and step % self.cfg.valid_every != 0:
            self._validate()
        self.save(step_checkpoint=not self.paths.step(step).exists())

    def _next_group(self) -> list[tuple[int, list[int]]] | None:
        """The next update's batches, (position in the epoch, indices): update_freq x
        world_size of them for the whole job, fewer at an epoch's end (an update never
        spans two epochs); rolls over epochs; None when max_epochs is reached."""
        while True:
            group = self.sampler.take(self.update_freq * self.world_size)
            if group:
                return group
            self.progress.epoch += 1
            self.sampler.set_epoch(self.progress.epoch)  # saved so, even when stopping here
            if stop_reason(self.cfg, self.progress):
                return None

    def _autocast(self):
        if self.cfg.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _update(self, group: list[tuple[int, list[int]]], meter: TrainMeter) -> None:
        """One update on the job's `group` of batches: this rank takes every world_size-th
        one. Each batch's dropout is seeded by its position in the epoch, so the update
        computes the same whatever the number of ranks sharing it."""
        self.train_model.train()
        mine = group[self.rank :: self.world_size]
        weight = 1.0 if mine else 0.0  # a rank with none runs one for nothing: DDP needs it
        data = self.training.epoch(self.sampler.epoch)
        batches = [(position, make_batch(data, indices, self.max_len))
                   for position, indices in mine or group[:1]]
        ntokens = sum(b.ntokens for _, b in batches) if mine else 0
        (global_tokens,) = dist.all_reduce_sum((ntokens,), self.device)  # over all ranks
        scale = weight * self.world_size / global_tokens  # DDP averages over the ranks
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = nll_sum = 0.0
        for i, (position, batch) in enumerate(batches):
            sync = i == len(batches) - 1 or self.world_size == 1
            no_sync = nullcontext() if sync else self.train_model.no_sync()
            torch.manual_seed(batch_seed(self.cfg.seed, self.sampler.epoch, position))
            tgt_out = batch.tgt_out.to(self.device)
            real = tgt_out.ne(PAD_ID)  # (B, T): the loss reads only these positions
            with no_sync, self._autocast():
                logits = self.train_model(
                    batch.src.to(self.device), batch.tgt_in.to(self.device), real
                )  # (N, V)
            loss, nll, _ = label_smoothed_nll(
                logits, tgt_out[real], self.cfg.label_smoothing, PAD_ID
            )
            with no_sync:
                (loss * scale).backward()
            loss_sum += weight * loss.item()
            nll_sum += weight * nll.item()
        loss_sum, nll_sum = dist.all_reduce_sum((loss_sum, nll_sum), self.device)
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm).item()
        if not (math.isfinite(loss_sum) and math.isfinite(grad_norm)):
            self._skip_bad_update(loss_sum, grad_norm)
            return
        self.bad_steps = 0
        cfg = self.cfg
        lr = learning_rate(cfg.schedule, self.progress.step + 1, cfg.lr, cfg.warmup_steps,
                           self.progress.horizon, cfg.min_lr, cfg.decay_fraction)
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(self.model)
        self.progress.step += 1
        self.progress.tgt_tokens += global_tokens
        meter.add(loss_sum, nll_sum, global_tokens, grad_norm, lr)

    def _skip_bad_update(self, loss: float, grad_norm: float) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.bad_steps += 1
        log.warning(
            "step %d: non-finite loss %s or gradient norm %s; update skipped (%d in a row)",
            self.progress.step + 1,
            loss,
            grad_norm,
            self.bad_steps,
        )
        self.metrics.write({"event": "skipped", "step": self.progress.step, "loss": str(loss)})
        if self.bad_steps >= self.cfg.max_bad_steps:
            raise TrainingDiverged(
                f"training stopped: {self.bad_steps} updates in a row had a non-finite loss; "
                f"lower train.lr (now {self.cfg.lr:g}) or set train.clip_norm; "
                "checkpoint_last.pt holds the last good state"
            )

    # ------------------------------------------------------------------ reporting

    def _log_train(self, meter: TrainMeter, bar) -> None:
        record = meter.flush()
        record.update(
            event="train",
            step=self.progress.step,
            epoch=self.progress.epoch,
            elapsed=round(self.progress.elapsed, 1),
        )
        self.metrics.write(record)
        text = (
            f"step {record['step']} | epoch {record['epoch']} | loss {record['loss']:.3f} | "
            f"nll {record['nll']:.3f} | lr {record['lr']:.2e} | gnorm {record['grad_norm']:.2f} | "
            f"{record['tgt_tokens_per_s']:.0f} tgt tok/s"
        )
        if bar is not None:
            bar.n = self.progress.step
            bar.set_postfix_str(text.split(" | ", 1)[1], refresh=True)
        else:
            log.info(text)

    def _validate(self) -> None:
        """Dev loss (and BLEU); updates checkpoint_best.pt and the patience counter."""
        if self.validator is None:
            return
        # rank 0 validates; every rank then keeps the same best / patience bookkeeping
        result = dist.broadcast(self.validator(self.model) if self.rank == 0 else None)
        score = result.score(self.cfg.best_metric)
        improved = self.progress.record_validation(score)
        if improved:
            self._save_model(self.paths.best)
        if self.cfg.average.kind == "best":
            self._keep_if_among_best(score)
        averaged = {}
        if self.ema is not None and self.rank == 0:  # the average: recorded, not followed
            with self.ema.swapped_in(self.model):
                found = self.validator(self.model)
            averaged = {"ema_loss": found.loss, "ema_bleu": found.bleu}
        self.metrics.write({**result.record(), **averaged, "event": "valid",
                            "step": self.progress.step, "epoch": self.progress.epoch,
                            "elapsed": round(self.progress.elapsed, 1), "best": improved})
        bleu = "" if result.bleu is None else f" | bleu {result.bleu:.2f}"
        ema = "" if not averaged else f" | ema loss {averaged['ema_loss']:.3f}" + (
            "" if found.bleu is None else f" bleu {found.bleu:.2f}")
        log.info("valid step %d | loss %.3f | nll %.3f | ppl %.2f%s%s%s", self.progress.step,
                 result.loss, result.nll, result.ppl, bleu, ema, " | best" if improved else "")

    def _save_model(self, path: Path) -> None:
        if self.rank == 0:
            self.paths.checkpoints.mkdir(parents=True, exist_ok=True)
            save_checkpoint(path, self._bundle(with_train_state=False))

    def _keep_if_among_best(self, score: float) -> None:
        """Keep the K best-scoring validated models on disk for `train.average: best-K`."""
        k, top, step = self.cfg.average.k, self.progress.top, self.progress.step
        if len(top) >= k and score <= top[-1][0]:
            return
        self._save_model(self.paths.top(step))
        top.append((score, step))
        top.sort(key=lambda entry: -entry[0])  # stable: among equal scores the older stays
        if self.rank == 0:
            for _, dropped in top[k:]:
                self.paths.top(dropped).unlink(missing_ok=True)
        del top[k:]

    def drop_stale_top_checkpoints(self) -> None:
        """A run killed between saving best_N.pt and its next checkpoint_last.pt leaves
        files the resumed run does not know about; they would skew the best-K average."""
        if self.rank != 0:
            return
        kept = {self.paths.top(step) for _, step in self.progress.top}
        for path in self.paths.top_checkpoints():
            if path not in kept:
                path.unlink(missing_ok=True)


# --------------------------------------------------------------------------- helpers


def _data_parallel(model: Transformer) -> torch.nn.Module:
    """DDP without a broadcast of the buffers at every forward: the only buffer, the
    sinusoid table, is the same on every rank. (torch 2.13 renamed the option.)"""
    ddp = torch.nn.parallel.DistributedDataParallel
    try:
        return ddp(model, forward_sync_buffers=False)
    except TypeError:  # torch before 2.13
        return ddp(model, broadcast_buffers=False)


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
    if progress.world_size in (0, world_size) or progress.tokens_per_update == tokens:
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


def batch_seed(seed: int, epoch: int, position: int) -> int:
    """The RNG seed of one training batch (its dropout): a function of where the batch
    is in the data, not of which process runs it or how many ran before."""
    return int(np.random.SeedSequence([seed, epoch, position]).generate_state(1)[0])


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
    paths = trainer.paths
    if trainer.rank == 0:  # the one process that writes
        paths.remove_temporary_files()
        if restart:
            paths.clear_training()
    resumed = not restart and trainer.resume()
    if not resumed and parent is not None:
        trainer.start_from(*parent)
    trainer.drop_stale_top_checkpoints()
    run_dir.mkdir(parents=True, exist_ok=True)
    log_file = logging.FileHandler(paths.train_log, encoding="utf-8")
    log_file.setFormatter(logging.Formatter("%(asctime)s | %(message)s"))
    if trainer.rank == 0:
        log.addHandler(log_file)
    if log.level == logging.NOTSET:  # used as a library: still log progress to train.log
        log.setLevel(logging.INFO)
    try:
        return trainer.fit()
    finally:
        log.removeHandler(log_file)
        log_file.close()


