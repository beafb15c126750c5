"""Benchmark: documents through a sentence-level model (mtkit.document).

(a) Paragraphs: consecutive test verses, 3 to 6 at a time (lengths drawn with --seed),
each paragraph given as one line. BLEU and length ratio (output / reference length) of
the paragraphs translated whole, with sentence splitting (`--split`), and of the same
verses translated one by one and joined (the reference point).

(b) Software strings: --strings test verses (drawn with --seed), each with one to three
placeholders (printf, brace, $(NAME), %NAME%, URLs, e-mail addresses) put between its
words at random. Translated with protection off, and on with each mask form (drop: the
placeholder taken out of the source; token: a mask word in its place). BLEU is computed
after taking the placeholders out of the output (by the same rules), against the verses'
plain references; survival: the share of placeholders that come out exactly as often as
they went in (counted per line and placeholder), and the share of lines with all of them.
The clean verses' BLEU is recorded beside it.

    python bench/documents.py --model MODEL --data DIR   # DIR: test.es and test.en
"""

from __future__ import annotations

import dataclasses
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIBLE, decoding_parser, record  # noqa: E402

PLACEHOLDERS = ("%s", "%d", "%1$s", "%.2f", "{0}", "{1}", "{name}", "$(ARG1)",
                "%PRODUCTNAME", "%NAME%", "https://example.org/help/index.html",
                "soporte@example.com")


def paragraphs(sources: list[str], refs: list[str], count: int, rng: random.Random
               ) -> list[tuple[list[str], list[str]]]:
    out, at = [], 0
    while len(out) < count and at < len(sources):
        size = rng.randint(3, 6)
        out.append((sources[at : at + size], refs[at : at + size]))
        at += size
    return out


def with_placeholders(line: str, rng: random.Random) -> str:
    words = line.split()
    for _ in range(rng.randint(1, 3)):
        words.insert(rng.randint(0, len(words)), rng.choice(PLACEHOLDERS))
    return " ".join(words)


def bleu(hyps: list[str], refs: list[str]) -> dict:
    import sacrebleu

    score = sacrebleu.corpus_bleu(hyps, [refs])
    return {"bleu": round(score.score, 2), "length_ratio": round(score.sys_len / score.ref_len, 3)}


def timed(translate, lines: list[str]) -> tuple[list[str], float]:
    start = time.perf_counter()
    out = translate(lines)
    return out, round(time.perf_counter() - start, 1)


def measure_paragraphs(translator, options, paras) -> dict:
    whole_src = [" ".join(src) for src, _ in paras]
    refs = [" ".join(ref) for _, ref in paras]
    found = {}
    for name, split in (("whole", False), ("split", True)):
        translator.document = dataclasses.replace(options, split=split)
        hyps, seconds = timed(translator.translate, whole_src)
        found[name] = {**bleu(hyps, refs), "seconds": seconds}
    translator.document = options
    verses = [verse for src, _ in paras for verse in src]
    hyps, seconds = timed(translator.translate, verses)
    joined, at = [], 0
    for src, _ in paras:
        joined.append(" ".join(hyps[at : at + len(src)]))
        at += len(src)
    found["verse_by_verse"] = {**bleu(joined, refs), "seconds": seconds}
    return {"paragraphs": len(paras), "verses": len(verses), **found}


def survival(sources: list[str], outputs: list[str], finder) -> dict:
    kept = total = lines_whole = 0
    for source, output in zip(sources, outputs, strict=True):
        wanted = [source[s:e] for s, e, _ in finder(source)]
        counts = {text: wanted.count(text) for text in wanted}
        exact = {text: output.count(text) == n for text, n in counts.items()}
        kept += sum(n for text, n in counts.items() if exact[text])
        total += len(wanted)
        lines_whole += all(exact.values())
    return {"placeholders_kept": round(kept / total, 4),
            "lines_all_kept": round(lines_whole / len(sources), 4)}


def measure_strings(translator, options, sources, refs) -> dict:
    from mtkit.document.placeholders import find, protection

    rules = protection()
    finder = lambda text: find(text, rules)  # noqa: E731

    def strip(text: str) -> str:
        for start, end, _ in reversed(finder(text)):
            text = text[:start] + text[end:]
        return re.sub(r"\s+", " ", text).strip()

    found = {}
    plain, seconds = timed(translator.translate, [strip(s) for s in sources])
    found["clean_verses"] = {**bleu(plain, refs), "seconds": seconds}
    for name, chosen in (("off", protection(enabled=False)), ("drop", protection(mask="drop")),
                         ("token", protection(mask="token"))):
        translator.document = dataclasses.replace(options, protection=chosen)
        hyps, seconds = timed(translator.translate, sources)
        found[name] = {**bleu([strip(h) for h in hyps], refs),
                       **survival(sources, hyps, finder), "seconds": seconds}
    translator.document = options
    return {"strings": len(sources), "placeholders": sum(len(finder(s)) for s in sources),
            **found}


def main() -> None:
    parser = decoding_parser(__doc__)
    parser.add_argument("--data", type=Path, default=BIBLE,
                        help="a directory with test.es and test.en")
    parser.add_argument("--paragraphs", type=int, default=60)
    parser.add_argument("--strings", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--beam", type=int, default=None)
    args = parser.parse_args()
    from mtkit import Translator

    translator = Translator.load(args.model, threads=args.threads, beam=args.beam)
    options = translator.document
    sources = (args.data / "test.es").read_text(encoding="utf-8").splitlines()
    refs = (args.data / "test.en").read_text(encoding="utf-8").splitlines()
    rng = random.Random(args.seed)
    paras = measure_paragraphs(translator, options,
                               paragraphs(sources, refs, args.paragraphs, rng))
    print(paras, flush=True)
    chosen = rng.sample(range(len(sources)), min(args.strings, len(sources)))
    strings = measure_strings(translator, options,
                              [with_placeholders(sources[i], rng) for i in chosen],
                              [refs[i] for i in chosen])
    print(strings, flush=True)
    record("documents", {"model": str(args.model), "data": str(args.data), "seed": args.seed,
                         "beam": translator.settings.beam, "threads": args.threads,
                         "paragraph_results": paras, "string_results": strings},
           "bench/documents.py")


if __name__ == "__main__":
    main()
