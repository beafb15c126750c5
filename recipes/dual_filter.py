"""The two data steps of recipes/dual-filter.sh: corrupt a share of a parallel corpus (so
that the noise is known), and keep the pairs that two models' `mtkit score-pairs` rate
best by dual conditional cross-entropy (Junczys-Dowmunt 2018, "Dual Conditional
Cross-Entropy Filtering of Noisy Parallel Corpora").

    python recipes/dual_filter.py corrupt SRC TGT OUT --share 0.3 --seed 0
        writes OUT.src, OUT.tgt and OUT.noise (per pair: clean, misaligned, copied or
        truncated), a third of the corrupted pairs of each kind
    python recipes/dual_filter.py select SRC TGT FORWARD BACKWARD OUT --keep 0.7 [--noise F]
        FORWARD: score-pairs of the source -> target model on (SRC, TGT); BACKWARD: of the
        target -> source model on (TGT, SRC); writes OUT.src and OUT.tgt with the best
        `keep` share, in corpus order; with --noise, prints how much noise was removed

The score of a pair, lower is better: |H_f - H_b| + (H_f + H_b) / 2, with H the per-token
cross-entropy (minus score-pairs' second column) under each model: both models must find
the pair likely, and equally so.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

KINDS = ("misaligned", "copied", "truncated")


def read(path: str) -> list[str]:
    """The lines of a UTF-8 file as mtkit and `wc -l` count them: only a newline ends one
    (a CR before it is dropped). str.splitlines would also split at U+2028, NEL, a form
    feed or a lone CR, and every pair after such a line would be misaligned."""
    text = Path(path).read_bytes().decode("utf-8")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline ending the last line starts no line
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def write(path: str, lines: list[str]) -> None:
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def corrupt(src: list[str], tgt: list[str], share: float, seed: int
            ) -> tuple[list[str], list[str], list[str]]:
    """Sources, targets and each pair's noise kind: `share` of the pairs corrupted, the
    kinds in turn: another pair's target, the source copied as target, the target cut to
    its first third."""
    rng = random.Random(seed)
    chosen = rng.sample(range(len(src)), round(share * len(src)))
    noise = ["clean"] * len(src)
    given, tgt = tgt, list(tgt)
    for turn, i in enumerate(chosen):
        kind = KINDS[turn % len(KINDS)]
        noise[i] = kind
        if kind == "misaligned":
            tgt[i] = given[(i + rng.randrange(1, len(src))) % len(src)]
        elif kind == "copied":
            tgt[i] = src[i]
        else:
            words = tgt[i].split()
            tgt[i] = " ".join(words[: max(1, len(words) // 3)])
    return list(src), tgt, noise


def dual_scores(forward: list[str], backward: list[str]) -> list[float]:
    """Per pair, |H_f - H_b| + (H_f + H_b) / 2 from score-pairs' `total<TAB>per_token`;
    a pair either model could not read (`-inf`, score-pairs --skip-long) ranks last."""
    scores = []
    for f, b in zip(forward, backward, strict=True):
        h_f, h_b = -float(f.split("\t")[1]), -float(b.split("\t")[1])
        worst = math.isinf(h_f) or math.isinf(h_b)
        scores.append(math.inf if worst else abs(h_f - h_b) + (h_f + h_b) / 2)
    return scores


def select(scores: list[float], keep: float) -> list[int]:
    """The indices of the best `keep` share by score (lowest first), in corpus order."""
    ranked = sorted(range(len(scores)), key=lambda i: (scores[i], i))
    return sorted(ranked[: round(keep * len(scores))])


def noise_report(kept: list[int], noise: list[str]) -> str:
    kept_set = set(kept)
    lines = []
    for kind in ("clean", *KINDS):
        total = sum(n == kind for n in noise)
        stayed = sum(noise[i] == kind for i in kept_set)
        if total:
            lines.append(f"{kind}: {stayed} of {total} kept ({100 * stayed / total:.1f}%)")
    noisy_kept = sum(noise[i] != "clean" for i in kept_set)
    lines.append(f"noise in the kept pairs: {100 * noisy_kept / max(len(kept), 1):.1f}% "
                 f"(before: {100 * sum(n != 'clean' for n in noise) / len(noise):.1f}%)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    c = steps.add_parser("corrupt")
    c.add_argument("src"), c.add_argument("tgt"), c.add_argument("out")
    c.add_argument("--share", type=float, default=0.3)
    c.add_argument("--seed", type=int, default=0)
    s = steps.add_parser("select")
    for name in ("src", "tgt", "forward", "backward", "out"):
        s.add_argument(name)
    s.add_argument("--keep", type=float, default=0.7)
    s.add_argument("--noise")
    args = parser.parse_args(argv)
    src, tgt = read(args.src), read(args.tgt)
    if len(src) != len(tgt):
        print(f"dual_filter.py: {args.src} has {len(src)} lines, {args.tgt} {len(tgt)}",
              file=sys.stderr)
        return 2
    if args.step == "corrupt":
        src, tgt, noise = corrupt(src, tgt, args.share, args.seed)
        write(args.out + ".src", src), write(args.out + ".tgt", tgt)
        write(args.out + ".noise", noise)
        return 0
    forward, backward = read(args.forward), read(args.backward)
    if not len(forward) == len(backward) == len(src):
        print(f"dual_filter.py: {len(src)} pairs but {len(forward)} forward and "
              f"{len(backward)} backward scores", file=sys.stderr)
        return 2
    kept = select(dual_scores(forward, backward), args.keep)
    write(args.out + ".src", [src[i] for i in kept])
    write(args.out + ".tgt", [tgt[i] for i in kept])
    print(f"kept {len(kept)} of {len(src)} pairs")
    if args.noise:
        print(noise_report(kept, read(args.noise)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
