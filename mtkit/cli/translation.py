"""Commands that use a model: translate, score-pairs, export, serve."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer

from mtkit.cli.options import (
    MAX_THREADS,
    AlignmentLayerOpt,
    AlignmentsOpt,
    AlignmentUnitOpt,
    BeamOpt,
    DeviceOpt,
    EngineOpt,
    FormatOpt,
    InputOpt,
    LenpenOpt,
    MaxLenAOpt,
    MaxLenBOpt,
    MaxTokensOpt,
    ModelsOpt,
    NbestOpt,
    NoProtectOpt,
    OutputOpt,
    PrefixOpt,
    ProtectOpt,
    ProtectRegexOpt,
    QuantizeOpt,
    SamplingOpt,
    SeedOpt,
    SplitOpt,
    SrcLangOpt,
    StopOpt,
    TagOpt,
    TemperatureOpt,
    TgtLangOpt,
    WholeFileOpt,
    one_of,
    std_stream,
)
from mtkit.errors import ConfigError

log = logging.getLogger("mtkit")

# serve's own
HostOpt = typer.Option("127.0.0.1", "--host", metavar="ADDRESS",
                       help="Address to listen on (0.0.0.0: every interface).")
PortOpt = typer.Option(8000, "--port", metavar="N",
                       help="Port (0: any free one; the log says which).")
MaxBodyBytesOpt = typer.Option(1_000_000, "--max-body-bytes", metavar="N",
                               help="Request body size.")
MaxLinesOpt = typer.Option(1000, "--max-lines", metavar="N", help="Lines per request.")
MaxCharsOpt = typer.Option(10_000, "--max-chars", metavar="N", help="Characters per line.")
MaxQueueOpt = typer.Option(4096, "--max-queue", metavar="N",
                           help="Lines waiting for the model; a request beyond gets 503.")
MaxBeamOpt = typer.Option(16, "--max-beam", metavar="N",
                          help="The widest beam a request may ask for.")
RequestRegexOpt = typer.Option(
    False, "--request-regex",
    help="Take regular expressions in requests (protect_regex). Off: a pattern can be "
    "written to hold the server for minutes; allow it only for trusted clients.")
CorsOriginOpt = typer.Option(
    None, "--cors-origin", metavar="ORIGIN",
    help="Let web pages of this origin (e.g. https://app.example.org; '*': any) call the "
    "API from the browser; repeat for several. Default: none.")
ApiKeyOpt = typer.Option(
    None, "--api-key", metavar="KEY", envvar="MTKIT_API_KEY", show_envvar=True,
    help="Answer translation requests only with this key (api_key or Authorization: Bearer).")
TranslateThreadsOpt = typer.Option(
    0, "--threads", metavar="N", min=0, max=MAX_THREADS, help="CPU threads. 0: chosen per "
    "batch (CTranslate2: one thread for small batches, all cores for large; torch: all "
    "cores). N: N intra-op threads."
)
ServeThreadsOpt = typer.Option(
    0, "--threads", metavar="N", min=0, max=MAX_THREADS, help="CPU threads of each worker "
    "(0: the cores shared out among the workers and processes; a CTranslate2 export: chosen "
    "per batch).")
ShardOpt = typer.Option(
    None, "--shard", metavar="I/N", help="Translate only share I (from 0) of N contiguous "
    "shares of --input's lines, e.g. one job of an array (torchrun shares by rank itself)."
)
# serve's
WorkersOpt = typer.Option(
    1, "--workers", metavar="N", help="Model threads decoding batches side by side, each with "
    "--threads CPU threads (--threads 0: the cores shared out among them)."
)
ProcessesOpt = typer.Option(
    1, "--processes", metavar="N", help="Server processes on the port, each with its own "
    "copy of the model and its own --workers (Linux; --threads 0: the cores shared out)."
)
BatchWindowOpt = typer.Option(
    5.0, "--batch-window-ms", metavar="MS", help="A batch starts once no request has come "
    "for this long (waiting at most 10 times that for more)."
)


def translate(
    models: list[Path] = ModelsOpt,
    beam: int | None = BeamOpt,
    lenpen: float | None = LenpenOpt,
    stop: str | None = StopOpt,
    nbest: int | None = NbestOpt,
    max_len_a: float | None = MaxLenAOpt,
    max_len_b: int | None = MaxLenBOpt,
    sampling: str | None = SamplingOpt,
    temperature: float | None = TemperatureOpt,
    seed: int | None = SeedOpt,
    prefix: Path | None = PrefixOpt,
    alignments: bool = AlignmentsOpt,
    alignment_unit: str | None = AlignmentUnitOpt,
    alignment_layer: int | None = AlignmentLayerOpt,
    split: bool | None = SplitOpt,
    no_protect: bool = NoProtectOpt,
    protect: list[str] | None = ProtectOpt,
    protect_regex: list[str] | None = ProtectRegexOpt,
    text_format: str = FormatOpt,
    whole_file: bool = WholeFileOpt,
    max_tokens: int = MaxTokensOpt,
    device: str = DeviceOpt,
    threads: int = TranslateThreadsOpt,
    input_file: Path | None = InputOpt,
    output_file: Path | None = OutputOpt,
    scores: bool = typer.Option(False, "--scores", help="Append TAB + hypothesis score."),
    quiet: bool = typer.Option(False, "--quiet", help="No summary line on stderr."),
    quantize: str = QuantizeOpt,
    engine: str = EngineOpt,
    shard: str | None = ShardOpt,
    tag: str | None = TagOpt,
    src_lang: str | None = SrcLangOpt,
    tgt_lang: str | None = TgtLangOpt,
) -> None:
    """Translate lines from stdin (or -i FILE) to stdout (or -o FILE).

    Under `torchrun --nproc_per_node N -m mtkit translate --input F`, each rank translates
    a contiguous share of F and rank 0 writes them all, in input order."""
    from mtkit.decode.choices import DecodeChoices
    from mtkit.decode.job import TranslateJob, translate_job
    from mtkit.decode.shard import Shard

    if alignment_unit is not None and not alignments:
        raise ConfigError("--alignment-unit: give --alignments too")
    job = TranslateJob(
        models=tuple(models), input_file=std_stream(input_file),
        output_file=std_stream(output_file),
        shard=Shard.parse(shard) if shard is not None else None,
        decode=DecodeChoices(beam, lenpen, stop, nbest, max_len_a, max_len_b, sampling,
                             temperature, seed, alignment_layer,
                             **_document_choices(split, no_protect, protect, protect_regex)),
        max_tokens=max_tokens, device=device, threads=threads, quantize=quantize,
        engine=engine, tag=tag, scores=scores, quiet=quiet, prefix_file=prefix,
        alignments=(alignment_unit or "word") if alignments else None,
        langs=(src_lang, tgt_lang), format=text_format, whole_file=whole_file,
    )
    _run_and_summarise(lambda: translate_job(job), quiet)


def score_pairs(
    models: list[Path] = ModelsOpt,
    src_file: Path = typer.Option(..., "--src", metavar="FILE",
                                  help="Source lines (plain or .gz; -: stdin)."),
    tgt_file: Path = typer.Option(..., "--tgt", metavar="FILE",
                                  help="Their translations, one per source line (-: stdin)."),
    output_file: Path | None = OutputOpt,
    tag: str | None = TagOpt,
    max_tokens: int = typer.Option(4096, "--max-tokens", metavar="N", min=1,
                                   help="Tokens per batch (a pair's longer side, padded)."),
    device: str = DeviceOpt,
    threads: int = TranslateThreadsOpt,
    quantize: str = QuantizeOpt,
    engine: str = EngineOpt,
    quiet: bool = typer.Option(False, "--quiet", help="No summary line on stderr."),
    skip_long: bool = typer.Option(
        False, "--skip-long", help="A pair longer than the model reads scores -inf "
        "(a filter drops it first) instead of stopping the run."),
) -> None:
    """Score given translations: one line per pair, the natural-log probability of the
    target given the source and that divided by its tokens (EOS counted), TAB-separated."""
    from mtkit.decode.score_job import ScoreJob, score_job

    if str(src_file) == str(tgt_file) == "-":
        raise ConfigError("--src - and --tgt -: only one side can be read from stdin")
    src_file, tgt_file = (Path("/dev/stdin") if str(p) == "-" else p for p in (src_file, tgt_file))
    job = ScoreJob(models=tuple(models), src_file=src_file, tgt_file=tgt_file,
                   output_file=std_stream(output_file), tag=tag, max_tokens=max_tokens,
                   device=device, threads=threads, quantize=quantize, engine=engine,
                   quiet=quiet, skip_long=skip_long)
    _run_and_summarise(lambda: score_job(job), quiet)


def _run_and_summarise(run: Callable[[], Any], quiet: bool) -> None:
    """Run a job that writes lines to stdout (or a file); its stats' summary on stderr
    unless `quiet` (or a rank that wrote nothing returned None)."""
    try:
        stats = run()
    except BrokenPipeError:
        _quiet_broken_pipe()
    if stats is not None and not quiet:
        sys.stderr.write(stats.summary() + "\n")


def _quiet_broken_pipe() -> NoReturn:
    """`mtkit translate ... | head -1`: stop quietly with SIGPIPE's status, as Unix tools do."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
    sys.exit(141)


def export(
    model: Path = typer.Option(..., "-m", "--model", metavar="MODEL",
                               help="The mtkit model to export."),
    output: Path = typer.Option(..., "-o", "--output", metavar="DIR",
                                help="The directory to write."),
    fmt: str = typer.Option("ctranslate2", "--format", metavar="FORMAT",
                            help="Export format: ctranslate2."),
    quantize: str | None = typer.Option(
        None, "--quantize", metavar="TYPE", show_default="int8",
        help="int8, int8_float32 or float32 weights."
    ),
    old_quantization: str | None = typer.Option(None, "--quantization", hidden=True),
    alignment_layer: int | None = AlignmentLayerOpt,
    force: bool = typer.Option(False, "--force", help="Replace an existing directory."),
) -> None:
    """Export a model for CTranslate2 (needs the extra: pip install 'mtkit[ct2]')."""
    from mtkit.decode import ct2

    quantization = one_of("--quantize", quantize, "--quantization", old_quantization) or "int8"
    if fmt != "ctranslate2":
        raise ConfigError(f"--format {fmt}: expected ctranslate2")
    ct2.export(model, output, quantization, force, alignment_layer)
    log.info("exported %s to %s (%s)", model, output, quantization)


def serve(
    models: list[Path] = ModelsOpt,
    host: str = HostOpt,
    port: int = PortOpt,
    beam: int | None = BeamOpt,
    lenpen: float | None = LenpenOpt,
    stop: str | None = StopOpt,
    nbest: int | None = NbestOpt,
    max_len_a: float | None = MaxLenAOpt,
    max_len_b: int | None = MaxLenBOpt,
    sampling: str | None = SamplingOpt,
    temperature: float | None = TemperatureOpt,
    seed: int | None = SeedOpt,
    alignment_layer: int | None = AlignmentLayerOpt,
    split: bool | None = SplitOpt,
    no_protect: bool = NoProtectOpt,
    protect: list[str] | None = ProtectOpt,
    protect_regex: list[str] | None = ProtectRegexOpt,
    tag: str | None = TagOpt,
    src_lang: str | None = SrcLangOpt,
    tgt_lang: str | None = TgtLangOpt,
    max_tokens: int = MaxTokensOpt,
    device: str = DeviceOpt,
    threads: int = ServeThreadsOpt,
    workers: int = WorkersOpt,
    processes: int = ProcessesOpt,
    quantize: str = QuantizeOpt,
    engine: str = EngineOpt,
    batch_window_ms: float = BatchWindowOpt,
    max_body_bytes: int = MaxBodyBytesOpt,
    max_lines: int = MaxLinesOpt,
    max_chars: int = MaxCharsOpt,
    max_queue: int = MaxQueueOpt,
    max_beam: int = MaxBeamOpt,
    request_regex: bool = RequestRegexOpt,
    cors_origin: list[str] | None = CorsOriginOpt,
    api_key: str | None = ApiKeyOpt,
) -> None:
    """Serve the model over HTTP: LibreTranslate's /translate, /v1/translate, a page at /
    (needs the extra: pip install 'mtkit[serve]')."""
    from mtkit.decode.choices import DecodeChoices
    from mtkit.serve.api import Limits
    from mtkit.serve.server import ServeOptions
    from mtkit.serve.server import serve as serve_forever

    limits = Limits(max_body_bytes=max_body_bytes, max_lines=max_lines, max_chars=max_chars,
                    max_queue=max_queue, max_beam=max_beam, request_regex=request_regex)
    serve_forever(ServeOptions(
        models=tuple(models), host=host, port=port,
        decode=DecodeChoices(beam, lenpen, stop, nbest, max_len_a, max_len_b, sampling,
                             temperature, seed, alignment_layer,
                             **_document_choices(split, no_protect, protect, protect_regex)),
        tag=tag,
        src_lang=src_lang, tgt_lang=tgt_lang, quantize=quantize,
        device=device, threads=threads, workers=workers, processes=processes, engine=engine,
        max_tokens=max_tokens, batch_window_ms=batch_window_ms, limits=limits,
        # click reads an empty MTKIT_API_KEY as unset: given on, it is refused, not no key
        api_key=os.environ.get("MTKIT_API_KEY") if api_key is None else api_key,
        cors_origins=tuple(cors_origin or ()),
    ))


def _document_choices(split: bool | None, no_protect: bool, protect: list[str] | None,
                      protect_regex: list[str] | None) -> dict[str, Any]:
    """The document flags as DecodeChoices' fields (None: the model's recipe's)."""
    for given, flag in ((protect, "--protect"), (protect_regex, "--protect-regex")):
        if no_protect and given:  # (protection off would drop what they add, unsaid)
            raise ConfigError(f"--no-protect: not with {flag} (it adds placeholders to "
                              "protect); leave one of them out")
    return {"split": split, "protect": False if no_protect else None,
            "protect_rules": tuple(protect) if protect else None,
            "protect_regex": tuple(protect_regex) if protect_regex else None}
