"""Translation of text: lines in -> bounded buffers -> length-sorted token batches ->
engine -> lines out, in input order. `Translator` is also mtkit's Python API.

The line contract: exactly one output line per input line (or `nbest` lines, see
`stream.output_lines`), in input order, always. Empty input lines give empty output lines
without running the model; over-long inputs are truncated (counted, warned), never
dropped; invalid UTF-8 is replaced with U+FFFD and counted.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

from mtkit.config import DecodeConfig, replace_checked
from mtkit.data.batching import token_batches
from mtkit.data.tokenizer import Tokenizer
from mtkit.decode.align import UNITS, Aligned, Links, align
from mtkit.decode.ct2 import is_exported_model
from mtkit.decode.engine import Engine, load_engine
from mtkit.decode.scoring import PairScore, score_texts
from mtkit.decode.search import Hypothesis
from mtkit.decode.stats import Stats
from mtkit.decode.texts import checked_lines, checked_texts
from mtkit.document.formats import check_format
from mtkit.document.pipeline import DocumentOptions, Translated, finish, prepare
from mtkit.document.placeholders import protection
from mtkit.errors import CheckpointError, ConfigError
from mtkit.runtime.devices import resolve_device, set_threads

log = logging.getLogger("mtkit")


# --------------------------------------------------------------------------- translating

class Translator:
    """Text lines in, translations out, through any `engine.Engine`.

    The engine sees only non-empty, token-bounded batches of encoded sources; this class
    keeps the line contract around it. Python use:

        translator = Translator.load("runs/demo", beam=5)   # or a model file
        translator.translate(["Hola.", "¿Qué tal?"])  # -> two English lines
        translator.translate("Hola.")                 # -> one English string
        translator.translate_aligned("Hola.")         # -> Aligned(text, links to the source)
        translator.document = DocumentOptions(split=True)  # lines of several sentences

    `tag`: a corpus tag the model was trained with, put before every source line.
    `src_lang`, `tgt_lang`: a multilingual model's pair (M2M100, NLLB; None: the model's
    default), also chosen per call:

        translator.translate("Hola.", src_lang="es", tgt_lang="fr")

    `document` (DocumentOptions, from the decode settings `split`, `protect`,
    `protect_rules`, `protect_regex`; `Translator.load("model.pt", split=True)`): sentence
    splitting (off by default) and placeholder protection (on by default) for the best
    translation without prefixes (with `nbest` > 1 or prefixes, lines go as they are).
    """

    def __init__(self, engine: Engine, settings: DecodeConfig | None = None,
                 max_tokens: int = 4096, tag: str | None = None,
                 src_lang: str | None = None, tgt_lang: str | None = None):
        self.engine = engine
        self.tag = tag
        # a tag the model lacks: DataError
        self.tokenizer = engine.tokenizer if tag is None else engine.tokenizer.tagged(tag)
        settings = settings if settings is not None else engine.recipe.decode
        if settings.stop not in engine.stop_rules:
            log.warning("this engine stops %s: decode.stop %s does not apply",
                        engine.stop_rules[0], settings.stop)
            settings = dataclasses.replace(settings, stop=engine.stop_rules[0])
        self.settings = settings
        self.max_tokens = max_tokens
        self.max_source = engine.max_source
        self.stats = Stats()
        self.lines_done = 0  # input lines so far (stats.sentences counts sentences)
        langs = engine.recipe.data.langs
        self.document = DocumentOptions(
            split=settings.split, src_lang=langs.src, tgt_lang=langs.tgt,
            protection=protection(settings.protect, settings.protect_rules,
                                  settings.protect_regex))
        self.choose_langs(src_lang, tgt_lang)

    def choose_langs(self, src_lang: str | None, tgt_lang: str | None,
                     names: tuple[str, str] = ("src_lang", "tgt_lang")) -> None:
        """A multilingual model's pair for the calls that name none, from now on (None
        keeps that side's); DataError for a code the model lacks, or any code for a model
        of one pair, naming the options `names`."""
        if src_lang is None and tgt_lang is None:
            return
        self.tokenizer = self.tokenizer.with_langs(src_lang, tgt_lang, names)
        self.document = dataclasses.replace(
            self.document, src_lang=src_lang or self.document.src_lang,
            tgt_lang=tgt_lang or self.document.tgt_lang)

    @property
    def chosen_langs(self) -> tuple[str | None, str | None]:
        """`choose_langs`'s pair ((None, None) for a model of one pair)."""
        return self.tokenizer.langs or (None, None)

    @property
    def langs(self) -> tuple[str, str]:
        """The pair a call that names none translates: the chosen one, else the model's."""
        langs = self.engine.recipe.data.langs
        return self.tokenizer.langs or (langs.src, langs.tgt)

    @classmethod
    def load(
        cls,
        models: str | Path | Sequence[str | Path],
        *,
        device: str = "auto",
        threads: int = 0,
        quantize: str = "none",
        engine: str = "auto",
        max_tokens: int = 4096,
        option_names: dict[str, str] | None = None,
        tag: str | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        **decode: Any,
    ) -> Translator:
        """Load model file(s) (an ensemble), run directories (their model.pt) or a
        CTranslate2 export; `decode` overrides the recipe's decode settings (beam, lenpen,
        stop, nbest, max_len_a, max_len_b; None keeps the recipe's). `option_names` lets
        errors name command-line flags."""
        paths = [models] if isinstance(models, (str, Path)) else list(models)
        set_threads(threads)
        loaded = load_engine([model_file(Path(p)) for p in paths], engine, quantize,
                             resolve_device(device), threads)
        settings = _checked_settings(loaded, decode, option_names)
        translator = cls(loaded, settings, max_tokens, tag)
        names = {"src_lang": "src_lang", "tgt_lang": "tgt_lang", **(option_names or {})}
        translator.choose_langs(src_lang, tgt_lang, (names["src_lang"], names["tgt_lang"]))
        return translator

    @overload
    def translate(self, lines: str, prefixes: str | None = None, src_lang: str | None = None,
                  tgt_lang: str | None = None, format: str | None = None) -> str: ...
    @overload
    def translate(self, lines: Sequence[str], prefixes: Sequence[str] | None = None,
                  src_lang: str | None = None, tgt_lang: str | None = None,
                  format: str | None = None) -> list[str]: ...

    def translate(self, lines: str | Sequence[str], prefixes: str | Sequence[str] | None = None,
                  src_lang: str | None = None, tgt_lang: str | None = None,
                  format: str | None = None) -> str | list[str]:
        """The translation of each line (the beam's best, or with sampling the first sample
        drawn), one output per input line; for one string, its translation (a string with
        line breaks is one line here, as in a request).
        `prefixes`: the start each translation must have, one per line ("" for none).
        `src_lang`, `tgt_lang`: a multilingual model's pair for this call (None: the
        translator's). `format`: "html" for lines that are HTML fragments (None:
        `document.format`, "text" by default)."""
        if isinstance(lines, str):
            return self.translate([lines], None if prefixes is None else [prefixes],
                                  src_lang, tgt_lang, format)[0]
        lines, prefixes = checked_lines(lines, prefixes)
        format = self.checked_format(format, prefixes)
        if format != "text" or self.documents_apply(prefixes):
            return [r.text for r in self.translate_documents(
                lines, src_lang=src_lang, tgt_lang=tgt_lang, format=format)]
        hyps = self.search(lines, prefixes=prefixes, src_lang=src_lang, tgt_lang=tgt_lang)
        return self.texts([h[0] for h in hyps])

    @overload
    def translate_aligned(self, lines: str, unit: str = "word", prefixes: str | None = None,
                          src_lang: str | None = None, tgt_lang: str | None = None
                          ) -> Aligned: ...
    @overload
    def translate_aligned(self, lines: Sequence[str], unit: str = "word",
                          prefixes: Sequence[str] | None = None, src_lang: str | None = None,
                          tgt_lang: str | None = None) -> list[Aligned]: ...

    def translate_aligned(self, lines: str | Sequence[str], unit: str = "word",
                          prefixes: str | Sequence[str] | None = None,
                          src_lang: str | None = None, tgt_lang: str | None = None
                          ) -> Aligned | list[Aligned]:
        """As `translate`, each translation with its links to the source (`align`)."""
        if isinstance(lines, str):
            return self.translate_aligned([lines], unit,
                                          None if prefixes is None else [prefixes],
                                          src_lang, tgt_lang)[0]
        lines, prefixes = checked_lines(lines, prefixes)
        if self.checked_format(None, prefixes) != "text":
            raise ConfigError("translate_aligned: HTML comes back with its tags, not links; "
                              "use translate, or document.format text")
        if unit == "word" and self.documents_apply(prefixes):
            return [Aligned(r.text, r.links) for r in
                    self.translate_documents(lines, True, src_lang=src_lang, tgt_lang=tgt_lang)]
        found = self.search(lines, prefixes=prefixes, src_lang=src_lang, tgt_lang=tgt_lang)
        links = self.align(lines, found, unit, src_lang, tgt_lang)
        return [Aligned(text, line_links[0]) for text, line_links in
                zip(self.texts([hyps[0] for hyps in found]), links, strict=True)]

    def documents_apply(self, prefixes: object = None) -> bool:
        """Whether `document`'s splitting and protection apply: they act on the best
        translation of a line without a prefix."""
        return self.document.active and self.settings.nbest == 1 and not prefixes

    def checked_format(self, format: str | None, prefixes: object = None) -> str:
        """The call's format (None: `document.format`): HTML gets each text's best
        translation, placed in its markup, so not with nbest > 1 nor prefixes."""
        chosen = check_format(format or self.document.format, "format")
        if chosen == "html" and (self.settings.nbest > 1 or prefixes):
            raise ConfigError("format html: each text's best translation goes into the "
                              "markup; leave out nbest (or give 1) and prefixes")
        return chosen

    def translate_documents(self, lines: Sequence[str], links: bool = False,
                            first_line: int | None = None, src_lang: str | None = None,
                            tgt_lang: str | None = None, format: str | None = None
                            ) -> list[Translated]:
        """Each line through `document`'s order of work (mtkit.document.pipeline): one
        Translated per line, its text, its score (a line of several sentences: none) and,
        with `links` (or where placeholders needed them), its links to the line's
        whitespace words. A line with nothing to split or protect costs one search, as in
        `translate`; a sentence is numbered (`search`'s `numbers`) by its line. An HTML
        line (`format` html) comes back as HTML, without links."""
        lines = checked_texts(lines, "lines")
        options = dataclasses.replace(
            self.document, links=links or self.document.links,
            src_lang=src_lang or self.document.src_lang,
            tgt_lang=tgt_lang or self.document.tgt_lang,
            format=format or self.document.format)
        prepared = prepare(lines, options)
        first_line = self.lines_done if first_line is None else first_line
        numbers = [first_line + plan.line for plan in prepared.plans for _ in plan.pieces]
        sentences = list(prepared.sentences)
        found = self.search(sentences, numbers=numbers, src_lang=src_lang, tgt_lang=tgt_lang)
        self.lines_done += len(lines) - len(sentences)  # lines, not their sentences
        wanted = [k for k, want in enumerate(prepared.want_links) if want]
        found_links = self.align([sentences[k] for k in wanted], [found[k][:1] for k in wanted],
                                 "word", src_lang, tgt_lang) if wanted else []
        links_of = {k: each[0] for k, each in zip(wanted, found_links, strict=True)}
        texts = self.texts([hyps[0] for hyps in found])
        return finish(prepared, [Translated(text, links_of.get(k, ()), hyps[0].score)
                                 for k, (text, hyps) in enumerate(zip(texts, found))], options)

    def align(self, lines: Sequence[str], found: list[list[Hypothesis]], unit: str = "word",
              src_lang: str | None = None, tgt_lang: str | None = None) -> list[list[Links]]:
        """The links of every hypothesis `search` found for `lines` (with the same
        `src_lang`, `tgt_lang`), from one teacher-forced pass over each (align.py): (i, j)
        pairs, i counting the source line's whitespace words (unit "word") or its pieces
        ("subword"; a tag or language token excluded), j the hypothesis's; every output word
        gets at least one. An empty line or hypothesis has none."""
        if unit not in UNITS:
            raise ConfigError(f"alignment unit {unit}: expected {' or '.join(UNITS)}")
        layer = self.settings.alignment_index(depth := self.engine.recipe.model.dec_layers)
        if layer is None:
            raise ConfigError(self.settings.alignment_layer_error(depth))
        tokenizer = _pair_tokenizer(self.tokenizer, src_lang, tgt_lang)
        todo = [i for i, line in enumerate(lines) if line.strip()]
        encoded = tokenizer.encode_src([lines[i] for i in todo]) if todo else []
        pairs = [(i, k) for i in todo for k in range(len(found[i]))]
        sources = dict(zip(todo, (ids[: self.max_source] for ids in encoded)))
        links = align(self.engine.cross_attention, tokenizer, [lines[i] for i, _ in pairs],
                      [sources[i] for i, _ in pairs], [found[i][k].tokens for i, k in pairs],
                      layer, unit, self.max_tokens)
        out: list[list[Links]] = [[() for _ in hyps] for hyps in found]
        for (i, k), pair_links in zip(pairs, links, strict=True):
            out[i][k] = pair_links
        return out

    def search(self, lines: Sequence[str], first_line: int | None = None,
               prefixes: Sequence[str] | None = None, numbers: Sequence[int] | None = None,
               src_lang: str | None = None, tgt_lang: str | None = None
               ) -> list[list[Hypothesis]]:
        """n-best hypotheses per line (empty lines get one empty hypothesis).

        `prefixes`: target text each line's hypotheses start with, one per line ("" for
        none; an empty line stays empty whatever its prefix), encoded as the target's
        pieces (so a prefix that ends inside a word is forced as those pieces, and the
        search goes on from there). `numbers`: each line's number in its input (0-based),
        which keys its samples' random streams and names it in warnings; default: from
        `first_line` on (default: the lines translated so far). A multilingual model's
        target language token leads each hypothesis (forced, before the prefix)."""
        tokenizer = _pair_tokenizer(self.tokenizer, src_lang, tgt_lang)
        lines, prefixes = checked_lines(lines, prefixes)
        first_line = self.lines_done if first_line is None else first_line
        numbers = range(first_line, first_line + len(lines)) if numbers is None else numbers
        for given, what in ((prefixes, "prefixes"), (numbers, "line numbers")):
            if given is not None and len(given) != len(lines):
                raise ConfigError(f"{len(given)} {what} for {len(lines)} lines: give one per "
                                  "line")
        results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0)] for _ in lines]
        todo = [i for i, line in enumerate(lines) if line.strip()]
        encoded = tokenizer.encode_src([lines[i] for i in todo]) if todo else []
        for k, ids in enumerate(encoded):
            if len(ids) > self.max_source:
                encoded[k] = ids[: self.max_source]
                self.stats.truncation(numbers[todo[k]] + 1, len(ids), self.max_source)
        forced = encode_prefixes(tokenizer, prefixes, todo, numbers, self.max_source,
                                 self.stats)
        for batch in token_batches([len(ids) + 1 for ids in encoded], self.max_tokens):
            found = self.engine.search(
                [encoded[k] for k in batch], self.settings,
                prefixes=None if forced is None else [forced[k] for k in batch],
                lines=[numbers[todo[k]] for k in batch])
            for k, hyps in zip(batch, found):
                results[todo[k]] = hyps
        self.stats.sentences += len(lines)
        self.lines_done += len(lines)
        self.stats.tokens += sum(len(r[0].tokens) for r in results)
        return results

    @overload
    def score(self, sources: str, targets: str) -> PairScore: ...
    @overload
    def score(self, sources: Sequence[str], targets: Sequence[str]) -> list[PairScore]: ...

    def score(self, sources: str | Sequence[str], targets: str | Sequence[str],
              first_line: int = 0, names: tuple[str, str] = ("source", "target"),
              skip_long: bool = False) -> PairScore | list[PairScore]:
        """The model's log-probability of each given target after its source (one pair:
        one score), EOS included: `PairScore.total`, `.per_token`, `.token_logprobs`.

        Empty lines are pairs like any other. A source or target over the model's
        `max_source` tokens is a DataError naming `names[side]` and the line (counted
        from `first_line`, 0-based), not a truncated score; with `skip_long`, its pair
        scores `scoring.UNSCORED` (-inf) instead."""
        if isinstance(sources, str) and isinstance(targets, str):
            return self.score([sources], [targets], first_line, names, skip_long)[0]
        sources, targets = checked_texts(sources, names[0]), checked_texts(targets, names[1])
        if len(sources) != len(targets):
            raise ConfigError("Translator.score: give as many targets as sources (two "
                              "strings, or two lists of one length)")
        return score_texts(self.engine, self.tokenizer, (sources, targets), self.max_tokens,
                           (first_line, names), skip_long)

    def texts(self, hyps: list[Hypothesis]) -> list[str]:
        """The text of each hypothesis, as `translate` prints it (never a line break; a
        multilingual model's language tokens left out)."""
        texts = self.tokenizer.decode_tgt([h.tokens for h in hyps])
        return [t.replace("\r", " ").replace("\n", " ") for t in texts]


def _pair_tokenizer(tokenizer: Tokenizer, src_lang: str | None, tgt_lang: str | None
                    ) -> Tokenizer:
    """The tokenizer for a multilingual model's pair of one call (None: the translator's
    own); an unknown code: DataError."""
    if src_lang is None and tgt_lang is None:
        return tokenizer
    return tokenizer.with_langs(src_lang, tgt_lang)


def _checked_settings(engine: Engine, decode: dict[str, Any],
                      option_names: dict[str, str] | None) -> DecodeConfig:
    """The engine's recipe's decode settings with `decode` over them, checked; the errors
    name `option_names`' flags where given (Translator.load)."""
    unknown = sorted(set(decode) - {f.name for f in dataclasses.fields(DecodeConfig)})
    if unknown:
        raise ConfigError(f"Translator.load: unknown decode setting(s) {', '.join(unknown)}")
    where = "command line" if option_names else "Translator.load"
    settings = replace_checked(engine.recipe.decode, decode, option_names, where=where)
    depth = engine.recipe.model.dec_layers
    if settings.alignment_index(depth) is None:  # given here: the recipe's was checked
        flag = (option_names or {}).get("alignment_layer", "alignment_layer")
        raise ConfigError(settings.alignment_layer_error(depth).replace(
            "decode.alignment_layer", flag))
    if decode.get("stop") is not None and settings.stop not in engine.stop_rules:
        flag = (option_names or {}).get("stop", "stop")
        raise ConfigError(f"{flag} {settings.stop}: this engine stops only "
                          f"{' or '.join(engine.stop_rules)}; for {settings.stop}, "
                          "translate with the mtkit model file (the torch engine)")
    return settings  # a recipe's stop the engine lacks: a warning (Translator())


def encode_prefixes(tokenizer: Tokenizer, prefixes: Sequence[str] | None, todo: list[int],
                    numbers: Sequence[int], limit: int, stats: Stats
                    ) -> list[list[int]] | None:
    """The target ids of the prefixes of the lines `todo` (empty: none; a multilingual
    model's: its language token), or None when none has one; one longer than the model's
    `limit` is truncated (counted and warned in `stats`)."""
    texts = [prefixes[i] for i in todo] if prefixes is not None else []
    given = [k for k, text in enumerate(texts) if text.strip()]
    if not given and not tokenizer.target_start:
        return None
    forced: list[list[int]] = [list(tokenizer.target_start) for _ in todo]
    for k, ids in zip(given, tokenizer.encode_tgt([texts[k] for k in given])):
        if len(ids) > limit:
            stats.truncation(numbers[todo[k]] + 1, len(ids), limit, "a prefix of ")
        forced[k] = ids[:limit]
    return forced


def model_file(path: Path) -> Path:
    """The file to load for a `-m` path: a run directory's model.pt; a model file, an
    export or a Hugging Face directory as it is (the loader words the errors of those)."""
    if not path.is_dir() or is_exported_model(path) or (path / "config.json").is_file():
        return path
    model = path / "model.pt"
    if model.is_file():
        return model
    last = path / "checkpoints" / "checkpoint_last.pt"
    if last.is_file():
        raise CheckpointError(f"{path}: the run has no model.pt yet (training has not "
                              f"finished); give -m {last} to use its latest weights")
    raise CheckpointError(f"{path}: a directory without model.pt; give a model file, a run "
                          "directory or a directory `mtkit export` wrote")
