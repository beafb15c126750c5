"""User-facing errors: one line that says what is wrong and what to do.

The CLI catches MtkitError once, prints its message to stderr and exits with
``exit_code``; everything else is a bug and keeps its traceback.
"""


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
