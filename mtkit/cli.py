"""The `mtkit` command: a thin typer layer over plain functions.

Every command parses its options, calls one function and maps an MtkitError to a
one-line message on stderr with exit code 2 (no traceback unless --debug). Data goes
to stdout, everything else to stderr. Commands import what they use inside their body,
so that `mtkit --help` and `mtkit score` start without loading torch.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import typer

from mtkit.errors import ConfigError, MtkitError
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
log = logging.getLogger("mtkit")
_debug = False

RecipeArg = typer.Argument(None, help="The recipe YAML file.", show_default=False)
RunDirOpt = typer.Option(None, "--run-dir", help="Run directory [default: runs/RECIPE_STEM].")
SetOpt = typer.Option(
    None, "--set", help="Override a recipe key, e.g. --set train.lr=0.001 (repeatable)."
)
DeviceOpt = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto.")
ThreadsOpt = typer.Option(0, "--threads", help="CPU threads for torch (0 = default).")


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


def _recipe(recipe: Path | None, overrides: list[str] | None, check_files: bool = True):
    from mtkit.config import load_recipe

    if recipe is None:
        raise ConfigError("a recipe file is required (or the flags that replace it; see --help)")
    return load_recipe(recipe, overrides or [], check_files=check_files)


def _run_dir(recipe_path: Path, run_dir: Path | None) -> Path:
    return run_dir if run_dir is not None else Path("runs") / recipe_path.stem


# --------------------------------------------------------------------------- commands


@app.command("spm-train")
def spm_train(
    recipe: Path | None = RecipeArg,
    run_dir: Path | None = RunDirOpt,
    overrides: list[str] | None = SetOpt,
    inputs: list[Path] | None = typer.Option(None, "--input", help="Text file (repeatable)."),
    model_prefix: Path | None = typer.Option(None, "--model-prefix", help="Writes PREFIX.model."),
    vocab_size: int = typer.Option(8000, "--vocab-size"),
    model_type: str = typer.Option("unigram", "--model-type", help="unigram or bpe."),
    character_coverage: float = typer.Option(0.9995, "--character-coverage"),
    input_sentence_size: int = typer.Option(1_000_000, "--input-sentence-size"),
) -> None:
    """Train the SentencePiece tokenizer (from a recipe or from flags)."""
    from mtkit.data.tokenizer import train_recipe_tokenizer, train_sentencepiece

    if recipe is not None:
        loaded = _recipe(recipe, overrides)
        out_dir = _run_dir(recipe, run_dir) / "tokenizer"
        out_dir.mkdir(parents=True, exist_ok=True)
        train_recipe_tokenizer(loaded, out_dir)
        log.info("tokenizer written to %s", out_dir)
        return
    if not inputs or model_prefix is None:
        raise ConfigError("spm-train: give a recipe, or --input FILE and --model-prefix PREFIX")
    if model_type not in ("unigram", "bpe"):
        raise ConfigError(f"--model-type {model_type}: expected unigram or bpe")
    path = train_sentencepiece(
        list(inputs),
        model_prefix,
        vocab_size,
        model_type,
        character_coverage,
        input_sentence_size,
    )
    log.info("tokenizer written to %s", path)


@app.command()
def binarize(
    recipe: Path | None = RecipeArg,
    run_dir: Path | None = RunDirOpt,
    overrides: list[str] | None = SetOpt,
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="SentencePiece model."),
    tgt_tokenizer: Path | None = typer.Option(
        None, "--tgt-tokenizer", help="Target-side model when vocabularies are separate."
    ),
    src: Path | None = typer.Option(None, "--src", help="Source text file."),
    tgt: Path | None = typer.Option(None, "--tgt", help="Target text file."),
    split: str = typer.Option("train", "--split", help="Split name for --src/--tgt."),
    out: Path | None = typer.Option(None, "--out", help="Output directory."),
    workers: int = typer.Option(0, "--workers", help="Encoding processes (0 = all cores)."),
    max_len: int = typer.Option(256, "--max-len", help="Drop training pairs longer than this."),
    max_ratio: float = typer.Option(3.0, "--max-ratio", help="Drop pairs with a larger ratio."),
) -> None:
    """Encode parallel text into memory-mapped token arrays."""
    from mtkit.data.binarize import binarize as binarize_files
    from mtkit.data.tokenizer import Tokenizer, load_recipe_tokenizer
    from mtkit.pipeline import binarize_recipe
    from mtkit.train.run import RunPaths

    if recipe is not None:
        loaded, paths = _recipe(recipe, overrides), RunPaths(_run_dir(recipe, run_dir))
        tok = load_recipe_tokenizer(paths.tokenizer, loaded.tokenizer.joint)
        binarize_recipe(loaded, paths, tok, workers)
        return
    if tokenizer is None or src is None or tgt is None or out is None:
        raise ConfigError("binarize: give a recipe, or --tokenizer, --src, --tgt and --out")
    tok = Tokenizer.from_files(tokenizer, tgt_tokenizer)
    binarize_files(tok, {split: (src, tgt)}, out, workers, max_len, max_ratio)
    log.info("binarised data written to %s", out)


@app.command()
def train(
    recipe: Path | None = RecipeArg,
    run_dir: Path | None = RunDirOpt,
    overrides: list[str] | None = SetOpt,
    restart: bool = typer.Option(False, "--restart", help="Discard the run's training state."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved recipe and exit."),
    until: str | None = typer.Option(
        None, "--until", help="Stop after this stage: tokenizer, binarize, train, average, eval."
    ),
    device: str = DeviceOpt,
    threads: int = ThreadsOpt,
    nproc: int = typer.Option(
        0, "--nproc", help="Train with N processes on this machine: the same as "
        "torchrun --standalone --nproc_per_node N -m mtkit train ..."
    ),
) -> None:
    """Run the recipe pipeline: tokenizer, binarise, train, average, evaluate."""
    from mtkit.pipeline import STAGES, run_pipeline
    from mtkit.runtime import distributed as dist
    from mtkit.runtime.devices import set_threads

    loaded = _recipe(recipe, overrides)
    if dry_run:
        sys.stdout.write(loaded.to_yaml())
        return
    if until is not None and until not in STAGES:
        raise ConfigError(f"--until {until}: expected one of {', '.join(STAGES)}")
    if nproc > 1 and not dist.launched():
        from mtkit.runtime.devices import resolve_device
        from mtkit.train.trainer import check_resumable_on, updates_per_step

        resolve_device(device)  # bad input ends here, before any process starts
        updates_per_step(loaded.train, nproc)
        if not restart:
            check_resumable_on(_run_dir(recipe, run_dir), loaded.train, nproc)
        _torchrun(nproc)
    set_threads(threads or loaded.train.threads)
    torch_device = dist.setup(device, loaded.train.dist_timeout, threads or loaded.train.threads)
    try:
        run_pipeline(loaded, _run_dir(recipe, run_dir), until=until, restart=restart,
                     device=torch_device)
        dist.wait_for_main()  # leave together: gloo aborts a rank that quits while in use
    finally:
        dist.shutdown()


def _torchrun(nproc: int) -> None:
    """Run this command as `torchrun --standalone --nproc_per_node N -m mtkit ...` and
    exit as its first failed rank did (2 for bad input, 130/143 for a signal), the
    ranks' own messages standing for the launcher's log."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg == "--nproc":
            skip = not skip
            continue
        if not arg.startswith("--nproc="):
            args.append(arg)
    logging.getLogger("torch.distributed").setLevel(logging.CRITICAL)
    # the thread count dist.setup gives each rank (and torchrun's warning without it)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // nproc)))
    try:
        run(parse_args(["--standalone", f"--nproc_per_node={nproc}", "-m", "mtkit", *args]))
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode > 0:
            sys.exit(failure.exitcode)  # the rank said why
        sys.stderr.write(f"mtkit: error: rank {rank} (pid {failure.pid}) was killed by "
                         f"{failure.signal_name()}; the job stopped: run the same command "
                         "to resume from checkpoint_last.pt\n")
        sys.exit(128 - failure.exitcode)
    except SignalException as exc:  # the job was asked to stop: the ranks saved and stopped
        sys.exit(128 + int(exc.sigval))


@app.command()
def average(
    checkpoints: list[Path] | None = typer.Argument(None, help="Checkpoints to average."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the average."),
    last: int = typer.Option(0, "--last", help="Average the last K step checkpoints of RUN_DIR."),
    best: bool = typer.Option(
        False, "--best", help="Average the best-K checkpoints RUN_DIR kept (train.average)."
    ),
) -> None:
    """Average the weights of several checkpoints into one model."""
    from mtkit.model.checkpoint import average_checkpoints, save_checkpoint
    from mtkit.train.run import RunPaths

    paths = list(checkpoints or [])
    if last and best:
        raise ConfigError("average: give --last K or --best, not both")
    if last or best:
        flag = "--last" if last else "--best"
        if len(paths) != 1 or not paths[0].is_dir():
            given = " ".join(map(str, paths)) or "nothing"
            raise ConfigError(f"average {flag} takes exactly one run directory, got {given}")
        run = RunPaths(paths[0])
        paths = run.step_checkpoints()[-last:] if last else run.top_checkpoints()
        if not paths:
            kind = "step checkpoints" if last else "best_N.pt checkpoints (train.average: best-K)"
            raise ConfigError(f"average: no {kind} in {run.checkpoints}")
    if not paths:
        raise ConfigError("average: give checkpoint files, --last K RUN_DIR or --best RUN_DIR")
    save_checkpoint(output, average_checkpoints(paths))
    log.info("averaged %d checkpoints into %s", len(paths), output)


@app.command()
def info(
    path: Path = typer.Argument(..., metavar="MODEL|RUN_DIR",
                                help="A model file, or a run directory (its model.pt)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Show what a model holds: architecture, vocabulary, training, and its run's scores."""
    from mtkit.report.info import model_info

    found = model_info(path)
    text = json.dumps(found.to_dict(), indent=1) if as_json else "\n".join(found.lines())
    sys.stdout.write(text + "\n")


@app.command()
def translate(
    models: list[Path] = typer.Option(..., "-m", "--model", help="Model file (repeat: ensemble)."),
    beam: int | None = typer.Option(None, "--beam", help="Beam size (1 = greedy)."),
    lenpen: float | None = typer.Option(None, "--lenpen", help="Length penalty exponent."),
    stop: str | None = typer.Option(
        None, "--stop", help="When beam search ends a sentence: early (no live hypothesis "
        "would beat the n-best by ending next), exact (none could, at any length) or top "
        "(none has a higher log-probability; CTranslate2's rule, in effect)."
    ),
    nbest: int | None = typer.Option(None, "--nbest", help="Hypotheses per input (TSV when > 1)."),
    max_len_a: float | None = typer.Option(None, "--max-len-a"),
    max_len_b: int | None = typer.Option(None, "--max-len-b"),
    max_tokens: int = typer.Option(4096, "--max-tokens", help="Source tokens per batch."),
    device: str = DeviceOpt,
    threads: int = typer.Option(
        0, "--threads", help="CPU threads. 0: chosen per batch (CTranslate2: one thread for "
        "small batches, all cores for large; torch: all cores). N: N intra-op threads."
    ),
    input_file: Path | None = typer.Option(None, "--input", help="Read this file, not stdin."),
    output_file: Path | None = typer.Option(None, "--output", help="Write here, not stdout."),
    scores: bool = typer.Option(False, "--scores", help="Append TAB + hypothesis score."),
    quiet: bool = typer.Option(False, "--quiet", help="No summary line on stderr."),
    quantize: str = typer.Option(
        "none", "--quantize", help="int8: dynamic int8 linear layers (CPU), or none."
    ),
    engine: str = typer.Option(
        "auto", "--engine", help="torch, ctranslate2, or auto (ctranslate2 for an export dir)."
    ),
    shard: str | None = typer.Option(
        None, "--shard", help="I/N: translate only share I (from 0) of N contiguous shares "
        "of --input's lines, e.g. one job of an array (torchrun shares by rank itself)."
    ),
    tag: str | None = typer.Option(
        None, "--tag", help="Start each line with this corpus tag, as training did for the "
        "corpus with `tag: NAME` (e.g. BT)."
    ),
) -> None:
    """Translate lines from stdin (or --input) to stdout (or --output).

    Under `torchrun --nproc_per_node N -m mtkit translate --input F`, each rank translates
    a contiguous share of F and rank 0 writes them all, in input order."""
    from mtkit.decode.shard import Shard, line_range, receive_shares, send_share
    from mtkit.decode.translate import OPTION_NAMES, Stats, Translator, translate_stream
    from mtkit.files.atomic import atomic_write
    from mtkit.files.textio import count_lines
    from mtkit.progress import on_terminal
    from mtkit.runtime import distributed as dist

    part = Shard.parse(shard) if shard is not None else None
    if part is not None and dist.launched():
        raise ConfigError("--shard: not under torchrun, whose ranks share the input already")
    if (part is not None or dist.launched()) and input_file is None:
        raise ConfigError(f"{'--shard' if part else 'torchrun'}: needs --input FILE "
                          "(a file's lines can be shared out; stdin's cannot)")
    device = str(dist.setup(device, timeout_s=600, threads=threads))
    if dist.launched():
        part = Shard(dist.rank(), dist.world_size())
    translator = Translator.load(
        models, device=device, threads=threads, quantize=quantize, engine=engine,
        max_tokens=max_tokens, option_names=OPTION_NAMES, beam=beam, lenpen=lenpen, stop=stop,
        nbest=nbest, max_len_a=max_len_a, max_len_b=max_len_b,
    )
    translator.tokenizer = translator.tokenizer.tagged(tag)  # a tag the model lacks: exit 2
    in_fd = _open_input(input_file)
    lines = line_range(input_file, part) if part is not None else None
    if lines is not None:
        os.lseek(in_fd, lines.start, os.SEEK_SET)
    # a bar only for a file (its length is known; interactive input needs none), and the
    # extra pass over the file only when a bar will be seen
    bar = input_file is not None and not quiet and on_terminal() and dist.is_main()
    total = None if not bar else count_lines(input_file) if lines is None else lines.count

    def translate_share(out) -> Stats:
        return translate_stream(
            translator, in_fd, out, scores=scores, total_lines=total, progress=bar,
            first_line=lines.first if lines is not None else 0,
            byte_limit=lines.end - lines.start if lines is not None else None,
        )

    def run(out) -> None:
        translate_share(out)
        if dist.launched():
            receive_shares(out, translator.stats)  # after rank 0's own, in rank order

    begun, main = time.perf_counter(), dist.is_main()  # (after shutdown every rank is "0")
    try:
        if not main:
            with tempfile.TemporaryFile() as spool:
                send_share(translate_share, spool)
        elif output_file is not None:
            atomic_write(output_file, run)
        else:
            try:
                run(sys.stdout.buffer)
            except BrokenPipeError:
                _quiet_broken_pipe()
        dist.wait_for_main()
    finally:
        dist.shutdown()
    if dist.launched():
        translator.stats.seconds = time.perf_counter() - begun  # the job's, not one share's
    if not quiet and main:
        sys.stderr.write(translator.stats.summary() + "\n")


@app.command()
def export(
    model: Path = typer.Option(..., "-m", "--model", help="The mtkit model to export."),
    output: Path = typer.Option(..., "-o", "--output", help="The directory to write."),
    fmt: str = typer.Option("ctranslate2", "--format", help="Export format: ctranslate2."),
    quantization: str = typer.Option(
        "int8", "--quantization", help="int8, int8_float32 or float32 weights."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing directory."),
) -> None:
    """Export a model for CTranslate2 (needs the extra: pip install 'mtkit[ct2]')."""
    from mtkit.decode import ct2

    if fmt != "ctranslate2":
        raise ConfigError(f"--format {fmt}: expected ctranslate2")
    ct2.export(model, output, quantization, force)
    log.info("exported %s to %s (%s)", model, output, quantization)


@app.command()
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories to compare."),
    output: Path = typer.Option(..., "-o", "--output", help="The PNG file to write."),
    metrics: list[str] | None = typer.Option(
        None, "--metric", help="Metric to draw, e.g. train.ppl (repeatable) "
        "[default: train.loss and valid.bleu]."
    ),
) -> None:
    """Plot runs' training curves into a PNG (needs the extra: pip install 'mtkit[plot]')."""
    from mtkit.report.plot import plot_runs

    plot_runs(list(run_dirs), output, tuple(metrics or ()))
    log.info("curves of %d run(s) written to %s", len(run_dirs), output)


@app.command()
def serve(
    models: list[Path] = typer.Option(
        ..., "-m", "--model", help="Model file (repeat: ensemble), or a directory that "
        "`mtkit export` wrote."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on "
                             "(0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port", help="Port (0: any free one; the log says which)."),
    beam: int | None = typer.Option(None, "--beam", help="Beam size (1 = greedy)."),
    lenpen: float | None = typer.Option(None, "--lenpen", help="Length penalty exponent."),
    max_tokens: int = typer.Option(4096, "--max-tokens", help="Source tokens per batch."),
    device: str = DeviceOpt,
    threads: int = ThreadsOpt,
    workers: int = typer.Option(
        1, "--workers", help="Model threads decoding batches side by side, each with "
        "--threads CPU threads (--threads 0: the cores shared out among them)."
    ),
    processes: int = typer.Option(
        1, "--processes", help="Server processes on the port, each with its own copy of "
        "the model and its own --workers (Linux; --threads 0: the cores shared out)."
    ),
    quantize: str = typer.Option(
        "none", "--quantize", help="int8: dynamic int8 linear layers (CPU), or none."
    ),
    engine: str = typer.Option(
        "auto", "--engine", help="torch, ctranslate2, or auto (ctranslate2 for an export dir)."
    ),
    batch_window_ms: float = typer.Option(
        5.0, "--batch-window-ms", help="A batch starts once no request has come for this "
        "long (waiting at most 10 times that for more)."
    ),
    max_body_bytes: int = typer.Option(1_000_000, "--max-body-bytes", help="Request body size."),
    max_lines: int = typer.Option(1000, "--max-lines", help="Lines per request."),
    max_chars: int = typer.Option(10_000, "--max-chars", help="Characters per line."),
    max_queue: int = typer.Option(
        4096, "--max-queue", help="Lines waiting for the model; a request beyond gets 503."
    ),
    max_beam: int = typer.Option(16, "--max-beam", help="The widest beam a request may ask for."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="MTKIT_API_KEY", show_envvar=True,
        help="Answer translation requests only with this key (api_key or Authorization: Bearer)."
    ),
) -> None:
    """Serve the model over HTTP: LibreTranslate's /translate, /v1/translate, a page at /
    (needs the extra: pip install 'mtkit[serve]')."""
    from mtkit.serve.api import Limits
    from mtkit.serve.server import ServeOptions
    from mtkit.serve.server import serve as serve_forever

    limits = Limits(max_body_bytes=max_body_bytes, max_lines=max_lines, max_chars=max_chars,
                    max_queue=max_queue, max_beam=max_beam)
    serve_forever(ServeOptions(
        models=tuple(models), host=host, port=port, beam=beam, lenpen=lenpen, quantize=quantize,
        device=device, threads=threads, workers=workers, processes=processes, engine=engine,
        max_tokens=max_tokens,
        batch_window_ms=batch_window_ms, limits=limits, api_key=api_key,
    ))


def _open_input(path: Path | None) -> int:
    if path is None:
        return sys.stdin.fileno()
    if path.is_dir():
        raise ConfigError(f"--input {path}: is a directory, expected a text file")
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"--input {path}: cannot read ({exc.strerror})") from None


@app.command()
def score(
    refs: list[Path] = typer.Option(..., "--ref", "-r", help="Reference file (repeatable)."),
    systems: list[Path] | None = typer.Option(
        None, "-s", "--system", help="System output to compare (repeat; the first is baseline)."
    ),
    hyp: Path | None = typer.Option(None, "--hyp", "-i", help="Hypotheses (default stdin)."),
    metrics: str = typer.Option("bleu,chrf", "--metrics", "-m", help="bleu, chrf, ter."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    tokenize: str | None = typer.Option(None, "--tokenize", help="sacrebleu tokenizer."),
    lowercase: bool = typer.Option(False, "--lowercase", "-lc"),
    tgt_lang: str | None = typer.Option(None, "--tgt-lang", help="Target language code."),
    paired_ar: bool = typer.Option(
        False, "--paired-ar", help="Approximate randomisation instead of bootstrap."
    ),
) -> None:
    """Score hypotheses against references with sacrebleu (BLEU, chrF, TER)."""
    from mtkit.evaluate.metrics import compare_systems, corpus_scores
    from mtkit.files.textio import read_lines

    names = tuple(m.strip().lower() for m in metrics.split(",") if m.strip())
    for name in names:
        if name not in ("bleu", "chrf", "ter"):
            raise ConfigError(f"--metrics {metrics}: unknown metric {name!r}; use bleu, chrf, ter")
    ref_lines = [list(read_lines(r)) for r in refs]
    ref_names = [str(r) for r in refs]
    if systems:
        system_lines = {str(s): list(read_lines(s)) for s in systems}
        rows = compare_systems(
            system_lines,
            ref_lines,
            names,
            method="ar" if paired_ar else "bootstrap",
            tokenize=tokenize,
            lowercase=lowercase,
            tgt_lang=tgt_lang,
            ref_names=ref_names,
        )
        _print_rows(rows, as_json)
        return
    hyps = list(read_lines(hyp)) if hyp is not None else _stdin_lines()
    results = corpus_scores(
        hyps,
        ref_lines,
        names,
        tokenize=tokenize,
        lowercase=lowercase,
        tgt_lang=tgt_lang,
        ref_names=ref_names,
        hyp_name=str(hyp) if hyp is not None else "<stdin>",
    )
    if as_json:
        payload = [{"name": s.name, "score": s.score, "signature": s.signature} for s in results]
        sys.stdout.write(json.dumps(payload, indent=1) + "\n")
    else:
        sys.stdout.write("".join(f"{s.text}\n" for s in results))


def _stdin_lines() -> list[str]:
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"<stdin>:{line}: invalid UTF-8 in the hypotheses") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _print_rows(rows: list[dict], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    for row in rows:
        ci = row.get("ci")
        ci_text = f" ± {ci:.2f}" if isinstance(ci, (int, float)) else ""
        p = row.get("p_value")
        p_text = f"  p = {p:.4f}" if p is not None else "  (baseline)"
        sys.stdout.write(f"{row['name']}\t{row['metric']}\t{row['score']:.2f}{ci_text}{p_text}\n")


# --------------------------------------------------------------------------- entry point


def _quiet_broken_pipe() -> None:
    """`mtkit translate ... | head -1`: stop quietly with SIGPIPE's status, as Unix tools do."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
    sys.exit(141)


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
