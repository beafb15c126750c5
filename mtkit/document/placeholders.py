"""Placeholders protected from translation: found by a documented list of rules (and a
user's regular expressions), masked in the source, put back in the translation exactly
as often as the source had them.

The rules (docs/guides/documents.md shows each with examples); `default` ones are on
unless protection is switched off, the others a user switches on by name:

    printf        %s %d %1$s %.2f %(name)s %@              on
    brace         {0} {name} {} {0:.2f} {{name}}          on
    dollar        $(NAME) ${NAME}                         on
    percent_name  %NAME% %PRODUCTNAME                     on
    url           https://host/path ftp://... www.host    on
    email         user@host.org                           on
    number        42 3.14 1,000                           off
    accelerator   ~ in ~Continue, Fo~rmat; & in &File     off

Where two matches overlap the longer wins. A match holding whitespace is not protected
(a mask has none, so that the masked line has the source's whitespace words and word
links still index them). Accelerator markers are taken out of their word and put back
before the first letter of the output word aligned to it.

Mask forms. `drop` (the default) takes each placeholder out of the source; `token`
puts a mask word (`X0`, `X1`, ...) in its place, for a model that copies such words.
Either way a placeholder missing from the output is put back at its aligned position:
glued to the output word linked to its own source word, or, when none is, as a word of
its own next to the output word linked to its nearest linked source neighbour. A mask
the output repeats is kept once; one in another case (`x0`) is repaired. Measured on the
Bible model the two forms are compared in docs/benchmarks.md.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from mtkit.errors import ConfigError

_END = r"[^\s<>\"'.,;:!?)\]}’”]"  # a URL does not end in punctuation around it


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: str
    default: bool  # on unless a user switches protection off
    marker: bool = False  # an accelerator marker, put back inside a word
    parens: bool = False  # takes a ')', ']' or '}' that closes one it opened (wiki/Luz_(x))


RULES: tuple[Rule, ...] = (
    Rule("printf", r"%(?:\d+\$)?[-+0#]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?"
                   r"[diouxXeEfFgGaAcspn@]|%\([A-Za-z_]\w*\)[-+0#]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]",
         True),
    Rule("brace", r"\{\{[\w.]*\}\}|\{\w*(?:[.\[][^{}\s]*)?(?:![rsa])?(?::[^{}\s]*)?\}", True),
    Rule("dollar", r"\$\([A-Za-z_]\w*\)|\$\{[A-Za-z_]\w*\}", True),
    Rule("percent_name", r"%[A-Z][A-Z0-9_]*%|%[A-Z][A-Z0-9_]{2,}", True),
    Rule("url", rf"\b(?:https?|ftp)://[^\s<>\"]*{_END}|\bwww\.[^\s<>\"]*{_END}", True,
         parens=True),
    # bounded as addresses are (RFC 5321: a local part of 64 characters, labels of 63), so
    # that a long run of such characters without an @ costs linear, not quadratic, time
    Rule("email", r"\b[\w.%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,16}"
                  r"\.[A-Za-z]{2,63}\b", True),
    Rule("number", r"\d+(?:[.,]\d+)*", False),
    Rule("accelerator", r"(?<!~)~(?=[^\W_])|(?<!&)&(?=[^\W_])(?![A-Za-z]+;)", False, True),
)
RULE_NAMES = tuple(rule.name for rule in RULES)
DEFAULT_RULES = tuple(rule.name for rule in RULES if rule.default)
MASK_FORMS = ("drop", "token")


@dataclass(frozen=True)
class Protection:
    """What to protect: rules by name and further regular expressions; `enabled` False
    protects nothing. Build it with `protection()`, which checks it."""

    enabled: bool = True
    rules: tuple[str, ...] = DEFAULT_RULES
    patterns: tuple[str, ...] = ()  # a user's regular expressions (Python's re syntax)
    mask: str = "drop"  # MASK_FORMS

    @property
    def active(self) -> bool:
        return self.enabled and bool(self.rules or self.patterns)


def protection(enabled: bool = True, add: tuple[str, ...] | list[str] = (),
               patterns: tuple[str, ...] | list[str] = (), mask: str = "drop",
               names: tuple[str, str] = ("--protect", "--protect-regex")) -> Protection:
    """The default rules, those `add` names (`all`: every rule) and `patterns`, checked:
    an unknown rule or an invalid regular expression is a ConfigError naming `names`."""
    for name in add:
        if name not in RULE_NAMES and name != "all":
            raise ConfigError(f"{names[0]} {name}: not a placeholder rule; expected "
                              f"{', '.join(RULE_NAMES)} or all")
    for pattern in patterns:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{names[1]} {pattern!r}: not a valid regular expression "
                              f"({exc}); fix it (Python's re syntax)") from None
        if compiled.match(""):
            raise ConfigError(f"{names[1]} {pattern!r}: matches empty text; give a pattern "
                              "that matches at least one character")
    if mask not in MASK_FORMS:
        raise ConfigError(f"placeholder mask {mask}: expected {' or '.join(MASK_FORMS)}")
    chosen = RULE_NAMES if "all" in add else tuple(
        r for r in RULE_NAMES if r in DEFAULT_RULES or r in add)
    return Protection(enabled, chosen, tuple(patterns), mask)


@lru_cache(maxsize=32)
def _compiled(protection: Protection) -> tuple[tuple[re.Pattern[str], bool, bool], ...]:
    rules = [(re.compile(rule.pattern), rule.marker, rule.parens) for rule in RULES
             if rule.name in protection.rules]
    return tuple(rules + [(re.compile(p), False, False) for p in protection.patterns])


_OPENING = {")": "(", "]": "[", "}": "{"}


def _closed(text: str, start: int, end: int) -> int:
    """The end of text[start:end] taken on over each ')', ']' or '}' after it that closes
    one it opened (a URL does not end in punctuation, but may in a balanced bracket:
    wiki/Luz_(física), users/{id})."""
    while end < len(text) and text[end] in _OPENING and \
            text.count(_OPENING[text[end]], start, end) > text.count(text[end], start, end):
        end += 1
    return end


def find(text: str, protection: Protection) -> list[tuple[int, int, bool]]:
    """The protected spans of `text`: (start, end, is a marker), in order, none
    overlapping (the longer of two that overlap; the first of two as long)."""
    if not protection.active:
        return []
    found = [(m.start(), _closed(text, m.start(), m.end()) if parens else m.end(), marker)
             for pattern, marker, parens in _compiled(protection)
             for m in pattern.finditer(text)
             if m.end() > m.start() and not any(c.isspace() for c in m.group())]
    found.sort(key=lambda span: (span[0], span[0] - span[1]))
    chosen: list[tuple[int, int, bool]] = []
    for span in found:
        if chosen and span[0] < chosen[-1][1]:
            if span[1] - span[0] <= chosen[-1][1] - chosen[-1][0]:
                continue
            chosen.pop()  # a longer one starting inside the last: it wins
        chosen.append(span)
    return chosen


@dataclass(frozen=True)
class Placeholder:
    text: str  # as the source has it
    word: int  # the source line's whitespace word it is in, from 0
    whole: bool  # the rest of that word has no letter or digit: it is a word of its own
    leads: bool  # it starts that word (put back before an aligned word, not after)
    marker: bool  # an accelerator marker (put back before a word's first letter)
    mask: str  # what the model sees in its place ("" when taken out)
    tail: str = ""  # punctuation after it to the end of its word (a whole one's)


@dataclass(frozen=True)
class Masked:
    """A line as the model is given it: `text`, with `placeholders` masked; `words`
    maps each whitespace word of `text` to the source line's word it comes from."""

    text: str
    placeholders: tuple[Placeholder, ...]
    words: tuple[int, ...]


def mask(line: str, protection: Protection) -> Masked | None:
    """`line` with its placeholders masked, or None when it has none."""
    spans = find(line, protection)
    if not spans:
        return None
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", line)]
    placeholders, pieces, at, word = [], [], 0, 0
    tokens = _free_masks(line)
    for start, end, marker in spans:
        while words[word][1] <= start:
            word += 1
        first, last = words[word]
        form = "" if marker or protection.mask == "drop" else next(tokens)
        rest = line[first:start] + line[end:last]
        whole = not marker and not any(c.isalnum() for c in rest)
        placeholders.append(Placeholder(line[start:end], word, whole, start == first, marker,
                                        form, line[end:last] if whole else ""))
        pieces += [line[at:start], form]
        at = end
    text = "".join(pieces) + line[at:]
    kept = []  # the source words with something left of them, in order
    for index, (first, last) in enumerate(words):
        inside = [(s, e) for s, e, _ in spans if first <= s < last]
        if sum(e - s for s, e in inside) < last - first or any(p.mask and p.word == index
                                                               for p in placeholders):
            kept.append(index)
    return Masked(text, tuple(placeholders), tuple(kept))


def _free_masks(line: str) -> Iterator[str]:
    """X0, X1, ... without those the line has in any case (a model name X1, a word
    x10): restoring would take them for masks."""
    lowered = line.lower()
    return (f"X{k}" for k in itertools.count() if f"x{k}" not in lowered)


# --------------------------------------------------------------------------- restoring

Links = tuple[tuple[int, int], ...]  # (source word i, output word j), as decode.align's


@dataclass
class _Output:
    """An output line as words, the whitespace after each, and links to the source
    line's words, edited in place while placeholders are put back."""

    words: list[str]
    gaps: list[str]
    links: set[tuple[int, int]]
    space: str  # what separates a word put in ("" for a target without spaces)
    fixed: set[int] = field(default_factory=set)  # words holding a placeholder put back

    def linked(self, source_word: int) -> list[int]:
        return sorted(j for i, j in self.links if i == source_word)

    def insert(self, at: int, word: str, source_word: int) -> None:
        self.links = {(i, j + (j >= at)) for i, j in self.links} | {(source_word, at)}
        self.fixed = {j + (j >= at) for j in self.fixed} | {at}
        if at == len(self.words) and self.words:
            self.gaps[-1] = self.gaps[-1] or self.space
        self.words.insert(at, word)
        self.gaps.insert(at, self.space if at < len(self.words) - 1 else "")

    def remove(self, at: int) -> None:
        del self.words[at], self.gaps[at]
        self.links = {(i, j - (j > at)) for i, j in self.links if j != at}
        self.fixed = {j - (j > at) for j in self.fixed if j != at}
        if self.gaps and at == len(self.words):
            self.gaps[-1] = ""

    def text(self) -> str:
        return "".join(word + gap for word, gap in zip(self.words, self.gaps))


def restore(masked: Masked, output: str, links: Links, no_space: bool = False
            ) -> tuple[str, Links]:
    """The output with every placeholder of `masked` in it exactly as often as in the
    source, and the links (to the masked line's words, as the model's) turned into links
    to the source line's words, kept right as words go in and out."""
    words = re.findall(r"\S+\s*", output.strip())
    out = _Output([w.rstrip() for w in words], [w[len(w.rstrip()):] for w in words],
                  {(masked.words[i], j) for i, j in links if i < len(masked.words)},
                  "" if no_space else " ")
    missing = [p for p in masked.placeholders if not (p.mask and _unmask(out, p))]
    for placeholder in missing:
        _put_back(out, placeholder)
    return out.text(), tuple(sorted(out.links))


def _unmask(out: _Output, placeholder: Placeholder) -> bool:
    """Put the placeholder where the output has its mask (any case), once; further
    copies of the mask go. False when the output lost the mask."""
    pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(placeholder.mask)}(?![0-9])", re.I)
    found = False
    j = 0
    while j < len(out.words):
        word = out.words[j]
        if not pattern.search(word):
            j += 1
            continue
        if not found:
            out.words[j] = pattern.sub(placeholder.text.replace("\\", "\\\\"), word, count=1)
            out.fixed.add(j)
            found = True
        rest = pattern.sub("", out.words[j])
        if not rest:
            out.remove(j)
            continue
        out.words[j] = rest
        j += 1
    return found


def _put_back(out: _Output, placeholder: Placeholder) -> None:
    """A placeholder the output lost, put back by the links: a marker before the first
    letter of the output word linked to its source word; a placeholder that was part of
    a word glued to the output word linked to that word; any other as a word of its own
    next to the output word linked to its nearest linked source neighbour (its own
    source word's, for a mask the output garbled), taking along the punctuation that
    followed it in the source when the word before it ends with that."""
    own = [j for j in out.linked(placeholder.word) if j not in out.fixed]
    if placeholder.marker:
        free = own or [j for j in range(len(out.words)) if j not in out.fixed]
        if not free:
            out.insert(len(out.words), placeholder.text, placeholder.word)
            return
        word = out.words[free[0]]
        first = next((k for k, c in enumerate(word) if c.isalnum()), 0)
        out.words[free[0]] = word[:first] + placeholder.text + word[first:]
        return
    if own and not placeholder.whole:
        word = out.words[own[0]]
        out.words[own[0]] = (placeholder.text + word if placeholder.leads
                             else word + placeholder.text)
        out.fixed.add(own[0])
        return
    rest = [j for j in own if placeholder.tail and out.words[j] == placeholder.tail]
    if rest:  # the punctuation left of its word, translated as it was: it goes after it
        out.words[rest[0]] = placeholder.text + placeholder.tail
        out.fixed.add(rest[0])
        return
    at = _place(out, placeholder.word, own if placeholder.mask else [])
    text, tail = placeholder.text, placeholder.tail
    if tail and at > 0 and at - 1 not in out.fixed and out.words[at - 1].endswith(tail) \
            and out.words[at - 1] != tail:
        out.words[at - 1] = out.words[at - 1][: -len(tail)]
        text += tail
    out.insert(at, text, placeholder.word)


def _place(out: _Output, source_word: int, own: list[int]) -> int:
    """Where a word for source word `source_word` goes: before the first output word in
    `own`, or after the last linked to the nearest source word before it, or before the
    first linked to the nearest after it; at the end when nothing is linked."""
    if own:
        return own[0]
    sources = sorted({i for i, _ in out.links} - {source_word})
    if not sources:
        return len(out.words)
    nearest = min(sources, key=lambda i: (abs(i - source_word), i > source_word))
    linked = out.linked(nearest)
    return linked[-1] + 1 if nearest < source_word else linked[0]
