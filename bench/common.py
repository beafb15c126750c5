"""Shared by the bench scripts: machine facts, the Bible data, and the record each writes
(to bench/work/results.jsonl, untracked; the schema is bench/records.py's)."""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from records import SCHEMA, UNKNOWN, WORK_RESULTS, this_cpu, without_machine_paths

HERE = Path(__file__).resolve().parent


def shipped_bible() -> Path:
    """The Bible corpus shipped in recipes/data/, unpacked once into bench/work/ as the
    plain SPLIT.LANG files the scripts read (the text of ../shared/data/bible-es-en)."""
    out = HERE / "work" / "bible-es-en"
    if not (out / "test.en").exists():  # written last: the others are there too
        out.mkdir(parents=True, exist_ok=True)
        for split in ("train", "dev", "test"):
            for lang in ("es", "en"):
                packed = HERE.parent / "recipes" / "data" / f"bible.{split}.{lang}.gz"
                partial = out / f"{split}.{lang}.partial"
                partial.write_bytes(gzip.decompress(packed.read_bytes()))
                partial.replace(out / f"{split}.{lang}")
    return out


# the shipped corpus, or where MTKIT_BIBLE_DATA says (a directory of SPLIT.LANG files)
BIBLE = (Path(os.environ["MTKIT_BIBLE_DATA"]) if "MTKIT_BIBLE_DATA" in os.environ
         else shipped_bible())
WORK = HERE / "work"  # cached tokenizer / binarised data / models (git-ignored)
if "MTKIT_BIBLE_DATA" in os.environ:  # another corpus: caches of its own
    WORK = WORK / (BIBLE.name + "-" + hashlib.blake2b(str(BIBLE.resolve()).encode(),
                                                       digest_size=4).hexdigest())


def decoding_parser(doc: str) -> argparse.ArgumentParser:
    """The options every decoding benchmark takes: --model (a Bible model) and --threads."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("runs/bible-es-en/model.pt"))
    parser.add_argument("--threads", type=int, default=2)
    return parser


# Environment variables that cap the instruction sets the kernels use. With AVX2_ONLY set,
# an AVX-512 machine runs every engine on the kernels of an AVX2-only CPU (such as the AMD
# EPYC of the development machine), and CTranslate2 multiplies with oneDNN, as it does on
# any CPU that is not Intel's: `env $AVX2_ONLY python bench/engines.py ...`. The cache
# sizes and the memory of the machine stay its own. Records say which of them were set.
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA",
              "CT2_FORCE_CPU_ISA", "CT2_USE_MKL")
AVX2_ONLY = ("ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 "
             "CT2_FORCE_CPU_ISA=AVX2 CT2_USE_MKL=0")


def machine() -> dict:
    import numpy
    import sentencepiece
    import torch

    return {
        "cpu": this_cpu(),
        "isa_limits": {name: os.environ[name] for name in ISA_LIMITS if name in os.environ},
        "cpu_count": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "sentencepiece": sentencepiece.__version__,
    }


@functools.cache
def mtkit_code() -> str | None:
    """The commit of the mtkit package this process imported (a checkout or a work tree),
    with "+changes" when its files differ from it; None outside git. Once per process:
    the package imported does not change while it runs."""
    import subprocess

    import mtkit

    package = Path(mtkit.__file__).resolve().parent
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(package), *args], capture_output=True,
                                  text=True, check=True).stdout.strip()

        changed = git("status", "--porcelain", "--", ".")
        return git("rev-parse", "--short", "HEAD") + ("+changes" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def record(figure: str, values: dict, script: str) -> dict:
    """Print one JSON line and append it to bench/work/results.jsonl (untracked: the
    records the docs cite are promoted from there with bench/promote.py)."""
    entry = without_machine_paths({
        "schema": SCHEMA,
        "figure": figure,
        **values,
        "mtkit_code": mtkit_code() or UNKNOWN,
        "machine": machine(),
        "command": shlex.join(["python", script, *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })
    line = json.dumps(entry)
    print(line, flush=True)
    WORK_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(WORK_RESULTS, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    return entry


def bible_run(vocab_size: int = 8000) -> tuple[Path, object]:
    """A joint SentencePiece model and binarised train/valid data of the Bible corpus,
    built once under bench/work/ and reused; returns (data dir, tokenizer)."""
    from mtkit.data.binarize import binarize
    from mtkit.data.manifest import load_manifest
    from mtkit.data.tokenizer import Tokenizer, train_sentencepiece

    WORK.mkdir(parents=True, exist_ok=True)
    prefix = WORK / f"spm{vocab_size}"
    model = prefix.with_suffix(".model")
    if not model.is_file():
        train_sentencepiece([BIBLE / "train.es", BIBLE / "train.en"], prefix, vocab_size)
    tokenizer = Tokenizer.from_files(model)
    data = WORK / f"bin{vocab_size}"
    if load_manifest(data) is None:
        splits = {"train": (BIBLE / "train.es", BIBLE / "train.en"),
                  "valid": (BIBLE / "dev.es", BIBLE / "dev.en")}
        binarize(tokenizer, splits, data, max_len=255)
    return data, tokenizer
