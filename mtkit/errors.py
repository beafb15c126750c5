"""User-facing errors: one line that says what is wrong and what to do.

The CLI catches MtkitError once, prints its message to stderr and exits with
``exit_code``; everything else is a bug and keeps its traceback.
"""

import signal


class MtkitError(Exception):
    exit_code = 2


class ConfigError(MtkitError):
    """A recipe or a command-line option is wrong."""


class DataError(MtkitError):
    """An input file is missing, unreadable or inconsistent."""


class CheckpointError(MtkitError):
    """A model file is missing, truncated, foreign or from a newer mtkit."""


class OutputError(MtkitError):
    """An output file or directory cannot be written (disk full, permissions)."""


class Interrupted(MtkitError):
    """SIGINT/SIGTERM during training: the run was checkpointed and can be resumed."""

    def __init__(self, signum: int):
        name = signal.Signals(signum).name
        super().__init__(
            f"{name} received: training state saved to checkpoint_last.pt; "
            "run the same command again to resume"
        )
        self.exit_code = 128 + signum  # what a shell reports for a process the signal ended


class TrainingDiverged(MtkitError):
    """Too many non-finite losses in a row; checkpoint_last.pt holds the last good state."""

    exit_code = 1


class RankGone(MtkitError):
    """Under torchrun, a collective failed because another rank's process ended: that
    rank's own error line says why; this one only says that it stopped with it."""

    exit_code = 1

    def __init__(self) -> None:
        super().__init__("another rank ended the job (its own error says why); this rank "
                         "stops too; the run resumes from its last checkpoint")
