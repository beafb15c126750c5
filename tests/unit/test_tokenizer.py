from __future__ import annotations

import gzip
import io
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
from builders import raw_recipe

from mtkit.config import recipe_from_dict
from mtkit.data.run_tokenizer import load_recipe_tokenizer, train_recipe_tokenizer
from mtkit.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    FEW_LINES,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    train_sentencepiece,
)
from mtkit.errors import CheckpointError, DataError

VOCAB = 300


def test_training_is_byte_identical_and_quiet(data_dir: Path, tmp_path: Path, capfd) -> None:
    inputs = [data_dir / "train.es", data_dir / "train.en"]
    first = train_sentencepiece(inputs, tmp_path / "a" / "spm", vocab_size=VOCAB)
    second = train_sentencepiece(inputs, tmp_path / "b" / "spm", vocab_size=VOCAB)
    assert first == tmp_path / "a" / "spm.model"
    assert first.read_bytes() == second.read_bytes()
    assert sorted(p.name for p in first.parent.iterdir()) == ["spm.model"]  # no .vocab, no temp
    assert capfd.readouterr().out == ""  # spm's log must never reach stdout


def test_sampling_follows_the_seed(data_dir: Path, tmp_path: Path) -> None:
    def train(name: str, seed: int) -> bytes:
        inputs = [data_dir / "train.en"]
        model = train_sentencepiece(
            inputs, tmp_path / name, vocab_size=200, input_sentence_size=200, seed=seed
        )
        return model.read_bytes()

    assert train("a", seed=1) == train("b", seed=1)
    assert train("c", seed=2) != train("a", seed=1)


def test_gzip_input_gives_the_same_model(data_dir: Path, tmp_path: Path, spm_model: Path) -> None:
    inputs = []
    for name in ("train.es", "train.en"):
        gz = tmp_path / f"{name}.gz"
        gz.write_bytes(gzip.compress((data_dir / name).read_bytes()))
        inputs.append(gz)
    model = train_sentencepiece(inputs, tmp_path / "spm", vocab_size=VOCAB)
    assert model.read_bytes() == spm_model.read_bytes()


def test_text_without_spaces(tmp_path: Path) -> None:
    phrases = [
        "我们今天去学校",
        "天气很好",
        "他们在图书馆看书",
        "明天我们一起吃饭",
        "这本书很有意思",
    ]
    lines = ["".join(phrases[(i * 7 + j) % 5] for j in range(i % 4 + 1)) for i in range(200)]
    corpus = tmp_path / "zh.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = train_sentencepiece([corpus], tmp_path / "zh", vocab_size=40)
    tokenizer = Tokenizer.from_files(model)
    ids = tokenizer.encode_tgt(lines[:20])
    assert tokenizer.decode_tgt(ids) == lines[:20]
    assert sum(map(len, ids)) < sum(map(len, lines[:20]))  # pieces longer than characters


def test_joint_tokenizer(tokenizer: Tokenizer, spm_model: Path, data_dir: Path) -> None:
    assert tokenizer.joint and tokenizer.tgt_bytes is None
    assert tokenizer.src_bytes == spm_model.read_bytes()
    assert tokenizer.src_vocab_size == tokenizer.tgt_vocab_size == VOCAB

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    pieces = [sp.id_to_piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)]
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>"]

    lines = (data_dir / "dev.en").read_text(encoding="utf-8").splitlines()[:5]
    ids = tokenizer.encode_tgt(lines)
    assert ids == sp.encode(lines) == tokenizer.encode_src(lines)
    assert all(BOS_ID not in seq and EOS_ID not in seq for seq in ids)
    # special ids (here: <unk> for characters outside the tiny vocabulary, and the
    # BOS/EOS/PAD a model emits) are left out of the text
    plain = [[i for i in seq if i != UNK_ID] for seq in ids]
    assert tokenizer.decode_tgt(ids) == sp.decode(plain)
    padded = [[BOS_ID, *seq, EOS_ID, PAD_ID, PAD_ID] for seq in ids]
    assert tokenizer.decode_tgt(padded) == sp.decode(plain)


def test_few_lines_match_a_list_call(tokenizer: Tokenizer, spm_model: Path,
                                     data_dir: Path) -> None:
    """Fewer than FEW_LINES lines go through sentencepiece one at a time, more as one list
    call: the ids and texts are the same either way."""
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    lines = (data_dir / "dev.en").read_text(encoding="utf-8").splitlines()
    many = (lines * (FEW_LINES // len(lines) + 2))[: FEW_LINES + 3]
    assert len(many) >= FEW_LINES
    expected = sp.encode(many)
    assert tokenizer.encode_src(many) == expected
    assert [tokenizer.encode_src([line])[0] for line in many[:10]] == expected[:10]
    assert tokenizer.encode_src(many[:3]) == expected[:3]
    texts = sp.decode([[i for i in seq if i != UNK_ID] for seq in expected])
    assert tokenizer.decode_tgt(expected) == texts
    assert tokenizer.decode_tgt(expected[:5]) == texts[:5]
    assert tokenizer.encode_src([]) == [] and tokenizer.decode_tgt([]) == []


def test_from_bytes_and_fingerprint(tokenizer: Tokenizer) -> None:
    again = Tokenizer.from_bytes(tokenizer.src_bytes)
    assert again.fingerprint() == tokenizer.fingerprint()
    assert len(tokenizer.fingerprint()) == 64
    separate = Tokenizer.from_bytes(tokenizer.src_bytes, tokenizer.src_bytes)
    assert not separate.joint and separate.tgt_bytes == tokenizer.src_bytes
    assert separate.fingerprint() != tokenizer.fingerprint()


def _recipe(data_dir: Path, joint: bool):
    raw = raw_recipe("train.es", "train.en", tokenizer={"vocab_size": VOCAB, "joint": joint},
                     model={"tie_embeddings": "all" if joint else "decoder"})
    return recipe_from_dict(raw, base_dir=data_dir)


def test_recipe_tokenizers(data_dir: Path, tmp_path: Path, spm_model: Path) -> None:
    joint = train_recipe_tokenizer(_recipe(data_dir, joint=True), tmp_path / "joint")
    assert joint.joint and (tmp_path / "joint" / "spm.model").read_bytes() == spm_model.read_bytes()

    separate = train_recipe_tokenizer(_recipe(data_dir, joint=False), tmp_path / "sep")
    assert sorted(p.name for p in (tmp_path / "sep").iterdir()) == [
        "spm.src.model",
        "spm.tgt.model",
    ]
    assert not separate.joint and separate.src_bytes != separate.tgt_bytes
    es = (data_dir / "train.es").read_text(encoding="utf-8").splitlines()[:3]
    sp_src = spm.SentencePieceProcessor(model_file=str(tmp_path / "sep" / "spm.src.model"))
    assert separate.encode_src(es) == sp_src.encode(es)

    loaded = load_recipe_tokenizer(tmp_path / "sep", joint=False)
    assert loaded.fingerprint() == separate.fingerprint()
    with pytest.raises(DataError, match=r"spm\.model: tokenizer model not found"):
        load_recipe_tokenizer(tmp_path / "sep", joint=True)


# --------------------------------------------------------------------------- errors


def _train(inputs: list[Path], out: Path, vocab_size: int = VOCAB) -> Path:
    return train_sentencepiece(inputs, out / "spm", vocab_size=vocab_size)


def test_no_inputs_or_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no input files"):
        _train([], tmp_path)
    with pytest.raises(DataError, match=r"nope\.txt: not found"):
        _train([tmp_path / "nope.txt"], tmp_path)


def test_empty_corpus(tmp_path: Path) -> None:
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"blank\.txt: no non-empty lines"):
        _train([blank], tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_vocab_size_too_large(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        _train([data_dir / "dev.en"], tmp_path, vocab_size=50_000)
    message = str(info.value)
    assert "vocab_size 50000 is too large for this corpus; use at most" in message
    assert message.endswith("(tokenizer.vocab_size)") and "\n" not in message
    assert not (tmp_path / "spm.model").exists()


def test_vocab_size_too_small(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="vocab_size 10 is too small for this corpus") as info:
        _train([data_dir / "dev.en"], tmp_path, vocab_size=10)
    # the coverage it suggests lowering has a floor: SentencePiece refuses below 0.98
    assert str(info.value).endswith("or a lower tokenizer.character_coverage (down to 0.98, "
                                    "SentencePiece's least)")


def test_invalid_utf8(data_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.en"
    lines = (data_dir / "dev.en").read_bytes().splitlines(keepends=True)
    bad.write_bytes(b"".join(lines[:4]) + b"caf\xe9\n" + b"".join(lines[4:]))
    with pytest.raises(DataError, match=r"bad\.en:5: invalid UTF-8 .*; fix or re-encode the file"):
        _train([bad], tmp_path, vocab_size=100)
    assert not (tmp_path / "spm.model").exists()


def test_corrupt_model(spm_model: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.model"
    broken.write_bytes(spm_model.read_bytes()[:1000])
    with pytest.raises(DataError, match=r"broken\.model: not a SentencePiece model"):
        Tokenizer.from_files(broken)
    with pytest.raises(CheckpointError, match="not a SentencePiece model"):
        Tokenizer.from_bytes(b"garbage")
    with pytest.raises(DataError, match="tokenizer model not found"):
        Tokenizer.from_files(spm_model, tmp_path / "missing.model")


def test_foreign_model_without_specials(data_dir: Path) -> None:
    model = io.BytesIO()  # spm's own defaults: <unk>=0, <s>=1, </s>=2, no <pad>
    lines = (data_dir / "dev.en").read_text(encoding="utf-8").splitlines()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=100, minloglevel=2
    )
    with pytest.raises(CheckpointError, match="lacks <pad> at id 0"):
        Tokenizer.from_bytes(model.getvalue())


def test_model_file_is_replaced_atomically(data_dir: Path, tmp_path: Path) -> None:
    target = _train([data_dir / "dev.en"], tmp_path, vocab_size=100)
    before = target.read_bytes()
    with pytest.raises(DataError):
        _train([data_dir / "dev.en"], tmp_path, vocab_size=50_000)
    assert target.read_bytes() == before  # a failed run leaves the previous model alone
    shutil.rmtree(tmp_path)
