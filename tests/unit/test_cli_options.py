"""The table of the CLI's options, read from typer's command objects: one meaning per
short flag, one short flag per long option, metavars in words, the decode options
`translate` and `serve` share, and the old spellings kept as hidden aliases."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
import typer.main

from mtkit.cli import app
from mtkit.cli.options import FROM_MODEL, MAX_THREADS

GROUP = typer.main.get_command(app)
COMMANDS = {name: GROUP.commands[name] for name in GROUP.commands}  # type: ignore[attr-defined]
DECODE = ("--beam", "--lenpen", "--stop", "--nbest", "--max-len-a", "--max-len-b", "--sampling",
          "--temperature", "--seed")
OLD_SPELLINGS = {("binarize", "--out"): "--output", ("score", "--hyp"): "--input",
                 ("export", "--quantization"): "--quantize"}


def options(command_name: str) -> dict[str, object]:
    """Every option of a command by its long name (hidden ones included)."""
    found = {}
    for param in COMMANDS[command_name].params:
        if param.param_type_name != "option":
            continue
        longs = [name for name in param.opts if name.startswith("--")]
        assert len(longs) == 1, f"{command_name}: {param.opts} should have one long name"
        found[longs[0]] = param
    return found


def short_flags(param) -> frozenset[str]:
    return frozenset(name for name in param.opts if not name.startswith("--"))


def test_a_short_flag_means_one_thing_and_a_long_option_has_one_short_flag():
    meanings: dict[str, set[str]] = defaultdict(set)  # short flag -> long options
    shorts: dict[str, set[frozenset[str]]] = defaultdict(set)  # long option -> short flags
    for name in COMMANDS:
        for long, param in options(name).items():
            shorts[long].add(short_flags(param))
            for flag in short_flags(param):
                meanings[flag].add(long)
    ambiguous = {flag: longs for flag, longs in meanings.items() if len(longs) > 1}
    assert not ambiguous, f"short flags with two meanings: {ambiguous}"
    uneven = {long: flags for long, flags in shorts.items() if len(flags) > 1}
    assert not uneven, f"long options with different short flags: {uneven}"


def test_the_common_short_flags():
    for name, long, flag in [("translate", "--model", "-m"), ("serve", "--model", "-m"),
                             ("export", "--model", "-m"), ("translate", "--input", "-i"),
                             ("score", "--input", "-i"), ("spm-train", "--input", "-i"),
                             ("translate", "--output", "-o"), ("binarize", "--output", "-o"),
                             ("export", "--output", "-o"), ("score", "--ref", "-r")]:
        assert short_flags(options(name)[long]) == {flag}, (name, long)
    assert "--metrics" in options("score")  # sacrebleu's long names stay


def test_one_quantisation_option():
    for name in ("translate", "serve", "export"):
        visible = [long for long, p in options(name).items() if "quant" in long and not p.hidden]
        assert visible == ["--quantize"], name


@pytest.mark.parametrize(("command", "old"), list(OLD_SPELLINGS))
def test_old_spellings_are_hidden_aliases(command, old):
    param = options(command)[old]
    assert param.hidden
    assert OLD_SPELLINGS[command, old] in options(command)


def test_metavars_are_words():
    for name, command in COMMANDS.items():
        ctx = command.make_context(name, [], resilient_parsing=True)
        for param in command.params:
            if param.param_type_name != "option" or param.is_flag or param.hidden:
                continue
            shown = param.get_help_record(ctx)[0]  # as --help shows it: "-m, --model MODEL"
            metavar = shown.rsplit(" ", 1)[1]
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*([=/|][A-Z0-9_]+)*", metavar), (
                f"{name} {param.opts}: metavar {metavar!r}")
            assert param.help, f"{name} {param.opts}: no help"


def test_serve_takes_every_decode_option_of_translate():
    engine = ("--model", "--max-tokens", "--device", "--threads", "--quantize", "--engine",
              "--tag")
    for long in DECODE + engine:
        assert long in options("serve"), long
        assert long in options("translate"), long


def test_decode_defaults_say_they_come_from_the_model():
    for name in ("translate", "serve"):
        for long in DECODE:
            assert options(name)[long].show_default == FROM_MODEL, (name, long)


def test_command_summaries_are_whole():
    for name, command in COMMANDS.items():
        summary = command.get_short_help_str(limit=45)
        assert not summary.endswith("..."), f"{name}: {summary}"
        assert summary.endswith((".", ")")), f"{name}: {summary}"


def test_every_threads_option_has_the_same_range():
    """--threads far above any machine's cores crashed torch (a segfault): every command
    that takes it refuses a number outside 0..MAX_THREADS as a usage error."""
    having = [name for name in COMMANDS if "--threads" in options(name)]
    assert set(having) >= {"train", "translate", "score-pairs", "serve"}
    for name in having:
        param = options(name)["--threads"]
        bounds = param if hasattr(param, "min") else param.type  # typer 0.29+ / click's IntRange
        assert (bounds.min, bounds.max) == (0, MAX_THREADS), name
