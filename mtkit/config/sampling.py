"""The value type of `decode.sampling`: how a search draws its tokens, written as one YAML
scalar (none, full, topk:K, topp:P) and read by `Sampling.parse`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_SAMPLING = re.compile(r"(none|full)|topk:(\S+)|topp:(\S+)")


@dataclass(frozen=True)
class Sampling:
    """How a search draws tokens: "none" (beam or greedy search), "full" (from the whole
    distribution), "topk:K" (from the K most probable tokens) or "topp:P" (from the smallest
    set of most probable tokens whose mass is at least P)."""

    kind: Literal["none", "full", "topk", "topp"] = "none"
    k: int = 0  # topk's K
    p: float = 1.0  # topp's P

    @classmethod
    def parse(cls, text: str) -> Sampling:
        match = _SAMPLING.fullmatch(text.strip()) if isinstance(text, str) else None
        if not match:
            raise ValueError(f"expected none, full, topk:K or topp:P, got {text!r}")
        if match[1]:
            return cls(match[1])
        if match[2]:
            k = match[2]
            if not re.fullmatch(r"-?\d+", k) or int(k) < 1:
                raise ValueError(f"topk:K needs a whole number K >= 1, got {k}")
            return cls("topk", k=int(k))
        try:
            p = float(match[3])
        except ValueError:
            p = float("nan")
        if not 0 < p <= 1:  # NaN fails too
            raise ValueError(f"topp:P needs a number 0 < P <= 1, got {match[3]}")
        return cls("topp", p=p)

    def __str__(self) -> str:
        extra = {"topk": f":{self.k}", "topp": f":{self.p!r}"}.get(self.kind, "")
        return self.kind + extra


SAMPLING_KEYS = ("sampling", "temperature", "seed")  # the decode keys only sampling reads
UNSCORED_KEYS = ("alignment_layer",)  # decode keys that change no translation


def decode_stamp(decode: dict, sampling: Sampling) -> dict:
    """A decode section as an up-to-date check compares it: without the keys that change
    no translation, and without the sampling keys when it does not sample (they change
    nothing then); older stamps lack both."""
    unused = UNSCORED_KEYS + (SAMPLING_KEYS if sampling.kind == "none" else ())
    return {key: value for key, value in decode.items() if key not in unused}
