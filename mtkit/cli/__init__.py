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
from typing import NoReturn

import typer

try:  # typer 0.29 and later carry their own copy of click: its usage errors are these
    from typer._click import exceptions as click
except ImportError:  # earlier typers use click itself
    import click.exceptions as click

from mtkit.cli import reports, training, translation
from mtkit.cli.stdio import guard_standard_streams
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
COMMANDS = {
    "spm-train": training.spm_train, "binarize": training.binarize, "train": training.train,
    "average": training.average, "import": training.import_model, "info": reports.info,
    "translate": translation.translate, "score-pairs": translation.score_pairs,
    "export": translation.export, "plot": reports.plot, "attention": reports.attention,
    "serve": translation.serve,
    "score": reports.score,
}
for _name, _function in COMMANDS.items():
    # the docstring's first paragraph whole: click would cut it to fit one line
    _summary = " ".join((_function.__doc__ or "").split("\n\n")[0].split())
    app.command(_name, short_help=_summary)(_function)


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
    """Entry point: usage errors and mtkit's own errors become one line on stderr with
    exit code 2, a closed or full stdin/stdout too (stdio.py); a reader that stops reading
    early (`| head -1`) ends a streaming command quietly."""
    try:
        guard_standard_streams()  # a closed stdin/stdout or a failed write: an MtkitError
        code = app(standalone_mode=False)
        sys.stdout.flush()  # a write error here, not in the interpreter's exit, is reported
    except click.NoArgsIsHelpError as exc:
        exc.show()  # `mtkit` alone: the help, as click prints it
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # a usage error: an unknown option, a missing value
        sys.stderr.write(f"mtkit: error: {usage_error(exc, sys.argv[1:])}\n")
        sys.exit(exc.exit_code)
    except typer.Abort:  # end of input at a prompt
        sys.exit(1)
    except MtkitError as exc:
        if _debug:
            raise
        _fail(str(exc), exc.exit_code)
    except OSError as exc:
        # what the file system refused where no check of ours looked first (a run
        # directory under a file, a read-only disk); a broken pipe is the streaming
        # commands' own to end quietly
        if _debug or isinstance(exc, BrokenPipeError):
            raise
        path = f"{exc.filename}: " if exc.filename is not None else ""
        _fail(f"{path}{exc.strerror or exc}", 2)
    sys.exit(code if isinstance(code, int) else 0)  # --help and --version: 0


def _fail(message: str, exit_code: int) -> NoReturn:
    rank = os.environ.get("RANK", "0") if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "0"
    where = f"[rank {rank}] " if rank != "0" else ""  # under torchrun every rank may say it
    sys.stderr.write(f"{where}mtkit: error: {message}\n")
    sys.exit(exit_code)


# short flags that meant something else before every command agreed on them
MOVED = {("score", "-m"): "--metrics"}


def usage_error(exc: click.ClickException, argv: list[str]) -> str:
    """click's message on one line, after the command it is about, with where to look."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    command = next((arg for arg in argv if arg in COMMANDS), None)
    option = getattr(exc, "option_name", None)
    if (command, option) in MOVED:
        message += f" (use {MOVED[command, option]})"
    if command is None:
        return f"{message}; see mtkit --help"
    return f"{command}: {message}; see mtkit {command} --help"


if __name__ == "__main__":
    main()
