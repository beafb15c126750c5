"""The `mtkit` command: a thin typer layer over plain functions.

Every command parses its options, calls one function and maps an MtkitError to a
one-line message on stderr with exit code 2 (no traceback unless --debug). Data goes
to stdout, everything else to stderr. Commands import what they use inside their body,
so that `mtkit --help` and `mtkit score` start without loading torch. The commands live
in three modules by what they do: training.py (build a model), translation.py (use
one), reports.py (report on them).
"""

from __future__ import annotations

import logging
import os
import sys

import typer

from mtkit.cli import reports, training, translation
from mtkit.errors import MtkitError
from mtkit.runtime.logs import log_to_stderr
from mtkit.version import __version__

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="mtkit: neural machine translation from raw text to a scored model.",
)
_debug = False

# in the order `mtkit --help` lists them
app.command("spm-train")(training.spm_train)
app.command()(training.binarize)
app.command()(training.train)
app.command()(training.average)
app.command()(reports.info)
app.command()(translation.translate)
app.command()(translation.export)
app.command()(reports.plot)
app.command()(translation.serve)
app.command()(reports.score)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mtkit {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    quiet_logs: bool = typer.Option(False, "--quiet-logs", help="Only warnings on stderr."),
) -> None:
    global _debug
    _debug = debug
    log_to_stderr(logging.WARNING if quiet_logs else logging.INFO)


def main() -> None:
    """Entry point: click handles usage errors (exit 2) and a closed stdout (quiet exit);
    mtkit's own errors become one line on stderr."""
    try:
        app()
    except MtkitError as exc:
        if _debug:
            raise
        rank = os.environ.get("RANK", "0") if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "0"
        where = f"[rank {rank}] " if rank != "0" else ""  # under torchrun every rank may say it
        sys.stderr.write(f"{where}mtkit: error: {exc}\n")
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
