"""TensorBoard event files that mirror metrics.jsonl (the optional extra mtkit[tensorboard]).

`RUN_DIR/tensorboard/` gets the same scalars as the metrics file, x = update, wall time as
TensorBoard's own. A resumed run opens its writer with `purge_step` = the first step it
will log again: TensorBoard then drops what a killed process had logged past the
checkpoint, as `MetricsLog.truncate` cuts metrics.jsonl, so no step is shown twice.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mtkit.errors import OutputError

# metrics.jsonl event -> the fields shown, as "event/field" (e.g. train/loss, valid/bleu)
SCALARS = {
    "train": ("loss", "nll", "ppl", "lr", "grad_norm", "tgt_tokens_per_s", "align_loss"),
    "valid": ("loss", "nll", "ppl", "bleu"),
}


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardLog:
    def __init__(self, log_dir: Path, resume_step: int):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self.writer = SummaryWriter(str(log_dir), purge_step=resume_step + 1)

    def write(self, record: dict[str, Any]) -> None:
        fields = SCALARS.get(record.get("event", ""), ())
        with self._named_errors():
            for name in fields:
                if name in record:
                    self.writer.add_scalar(f"{record['event']}/{name}", record[name],
                                           record["step"])
            if fields:
                # flushed with the metrics line: a checkpoint written after it never runs
                # ahead of the event file, so the purge on resume leaves no gap
                self.writer.flush()

    def close(self) -> None:
        with self._named_errors():
            self.writer.close()

    @contextmanager
    def _named_errors(self) -> Iterator[None]:
        """The writer's thread hands a failed write (a full disk) to the next call, as an
        OSError without a file name: say which directory."""
        try:
            yield
        except OSError as exc:
            raise OutputError(f"{self.log_dir}: cannot write TensorBoard events "
                              f"({exc.strerror or exc})") from None
