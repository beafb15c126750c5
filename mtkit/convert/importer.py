"""`mtkit import`: a Hugging Face model directory as an mtkit bundle, by its config's
model_type (marian.py: Marian / OPUS-MT; m2m.py: M2M100 and NLLB).

Everything is read and checked before anything is written; the bundle is written
atomically, so a failure leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path

from mtkit.convert.hf import model_config
from mtkit.convert.m2m import read_m2m
from mtkit.convert.marian import read_marian
from mtkit.errors import CheckpointError, ConfigError
from mtkit.files.atomic import make_parent_dirs
from mtkit.model.checkpoint import Bundle, save_checkpoint

SUPPORTED = {"marian": "Marian, OPUS-MT", "m2m_100": "M2M100, NLLB"}  # config's model_type


def import_model(model_dir: Path, out_path: Path, force: bool = False,
                 src_lang: str | None = None, tgt_lang: str | None = None) -> Bundle:
    """Read the directory, check it whole, then write the bundle to out_path. `src_lang`,
    `tgt_lang`: a multilingual model's default pair."""
    if out_path.exists() and not force:
        raise ConfigError(f"{out_path}: already exists; use --force to replace it")
    bundle = read_model(Path(model_dir), src_lang, tgt_lang)
    make_parent_dirs(out_path)
    save_checkpoint(out_path, bundle)
    return bundle


def read_model(model_dir: Path, src_lang: str | None = None,
               tgt_lang: str | None = None) -> Bundle:
    """The bundle the directory describes; CheckpointError naming what is wrong."""
    if (model_dir / "mtkit.json").is_file():  # decode.ct2.MARKER (a room beside this one)
        raise ConfigError(f"{model_dir}: a CTranslate2 export (mtkit export's), not a "
                          "Hugging Face model; translate with it as it is, or import the "
                          "model it came from")
    kind = model_config(model_dir).get("model_type")
    if kind == "m2m_100" or (isinstance(kind, str) and "nllb" in kind):
        return read_m2m(model_dir, src_lang, tgt_lang)  # (refuses nllb-moe by name)
    if kind not in SUPPORTED:
        names = "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
        raise CheckpointError(f"{model_dir / 'config.json'}: model_type {kind!r} is not "
                              f"supported; mtkit imports {names}")
    if src_lang is not None or tgt_lang is not None:
        raise ConfigError(f"--src-lang/--tgt-lang: {model_dir} is a Marian model of one "
                          "language pair; the options choose a multilingual model's pair")
    return read_marian(model_dir)
