"""The whole path for a multilingual model (M2M100, NLLB), as a user runs it on a tiny
one: `mtkit import --src-lang --tgt-lang`, `info` listing the languages, `translate` with
the pair chosen per call (and equal to the Python API), fine-tuning through
train.init_from, `export --format ctranslate2` decoding alike, `serve` choosing the
language tokens from a LibreTranslate request's source and target, or by default from
`serve --src-lang --tgt-lang`; an NLLB directory with legacy_behaviour the same way."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from builders import DATA
from hf_m2m import build_m2m
from test_serve import start_server, stop

from mtkit import Translator
from mtkit.model.checkpoint import load_checkpoint

pytest.importorskip("transformers")

DEV = (DATA / "dev.es").read_text(encoding="utf-8").splitlines()[:6]


@pytest.fixture(scope="module")
def imported(tmp_path_factory, mtkit_cli):
    root = tmp_path_factory.mktemp("nllb")
    directory = build_m2m(root / "nllb-tiny", "nllb")
    done = mtkit_cli(["import", directory, "-o", "imported.pt", "--src-lang", "spa_Latn",
                      "--tgt-lang", "fra_Latn"], cwd=root)
    assert done.returncode == 0, done.stderr
    (root / "dev.es").write_text("\n".join(DEV) + "\n")
    return root


def test_info_lists_the_languages(imported, mtkit_cli):
    shown = mtkit_cli(["info", "imported.pt", "--json"], cwd=imported)
    assert shown.returncode == 0, shown.stderr
    languages = json.loads(shown.stdout)["languages"]
    assert languages == {"src": "spa_Latn", "tgt": "fra_Latn",
                         "choices": ["eng_Latn", "fra_Latn", "spa_Latn", "deu_Latn"],
                         "source_layout": "[src_lang] pieces </s>"}
    text = mtkit_cli(["info", "imported.pt"], cwd=imported).stdout
    assert "spa_Latn -> fra_Latn (by default; any two of 4:" in text
    assert "[src_lang] pieces </s>" in text


def test_translate_chooses_the_pair_as_the_python_api(imported, mtkit_cli):
    translator = Translator.load(imported / "imported.pt", beam=1)
    for flags, pair in (([], {}), (["--tgt-lang", "eng_Latn"], {"tgt_lang": "eng_Latn"}),
                        (["--src-lang", "deu_Latn", "--tgt-lang", "spa_Latn"],
                         {"src_lang": "deu_Latn", "tgt_lang": "spa_Latn"})):
        done = mtkit_cli(["translate", "-m", "imported.pt", "-i", "dev.es", "--beam", "1",
                          *flags], cwd=imported)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == translator.translate(DEV, **pair)
    bad = mtkit_cli(["translate", "-m", "imported.pt", "-i", "dev.es", "--tgt-lang", "fra_Lat"],
                    cwd=imported)
    assert bad.returncode == 2
    [line] = bad.error_lines()
    assert line.startswith("mtkit: error: --tgt-lang fra_Lat: not a language of this model "
                           "(closest: fra_Latn"), bad.stderr


def test_fine_tune_then_export(imported, mtkit_cli):
    root = imported
    recipe = {
        "data": {"train": {"src": str(DATA / "train.es"), "tgt": str(DATA / "train.en")},
                 "valid": {"src": str(DATA / "dev.es"), "tgt": str(DATA / "dev.en")},
                 "langs": {"src": "es", "tgt": "en"}},  # as in the guide's Marian recipe
        "train": {"init_from": str(root / "imported.pt"), "max_tokens": 1024, "lr": 0.001,
                  "warmup_steps": 2, "max_steps": 2, "log_every": 1, "valid_every": 100,
                  "save_every": 2, "valid_bleu_lines": 0, "label_smoothing": 0.0,
                  "average": "none", "seed": 3},
    }
    (root / "tune.yaml").write_text(yaml.safe_dump(recipe))
    done = mtkit_cli(["train", "tune.yaml", "--until", "train"], cwd=root)
    assert done.returncode == 0, done.stderr
    tuned = load_checkpoint(root / "runs" / "tune" / "checkpoints" / "checkpoint_last.pt")
    parent = load_checkpoint(root / "imported.pt")
    assert tuned.vocab == parent.vocab and tuned.recipe.model == parent.recipe.model
    assert not torch.equal(tuned.weights["enc_norm.weight"], parent.weights["enc_norm.weight"])
    # the pair it trained and translates by default is the parent's, whatever data.langs says
    shown = mtkit_cli(["info", "runs/tune", "--json"], cwd=root)
    assert shown.returncode == 0, shown.stderr
    languages = json.loads(shown.stdout)["languages"]
    assert (languages["src"], languages["tgt"]) == ("spa_Latn", "fra_Latn")

    pytest.importorskip("ctranslate2")
    exported = mtkit_cli(["export", "-m", "imported.pt", "-o", "ct2", "--quantize", "float32"],
                         cwd=root)
    assert exported.returncode == 0, exported.stderr
    for flags in ([], ["--tgt-lang", "eng_Latn"]):
        # one cap for every sentence: CTranslate2 caps a batch, mtkit each sentence
        flags += ["--beam", "1", "--max-len-a", "0", "--max-len-b", "12"]
        ours = mtkit_cli(["translate", "-m", "imported.pt", "-i", "dev.es", *flags], cwd=root)
        theirs = mtkit_cli(["translate", "-m", "ct2", "-i", "dev.es", *flags], cwd=root)
        assert theirs.returncode == 0, theirs.stderr
        assert theirs.stdout == ours.stdout


def test_serve_chooses_the_languages_per_request(imported, mtkit_cli):
    """LibreTranslate's route, which splits sentences as LibreTranslate does, answers as
    `translate --split` with the request's languages."""
    expected = {}
    for target in ("fra_Latn", "eng_Latn"):
        done = mtkit_cli(["translate", "-m", "imported.pt", "-i", "dev.es", "--tgt-lang", target,
                          "--split"], cwd=imported)
        expected[target] = done.stdout.splitlines()
    server = start_server(imported, imported / "imported.pt")
    try:
        status, _, body = server.request("GET", "/languages")
        assert status == 200
        listed = json.loads(body)
        assert [item["code"] for item in listed] == ["eng_Latn", "fra_Latn", "spa_Latn",
                                                     "deu_Latn"]
        assert listed[0]["targets"] == ["fra_Latn", "spa_Latn", "deu_Latn"]
        for target, lines in expected.items():
            status, answer = server.post("/translate", {"q": DEV, "source": "auto",
                                                        "target": target})
            assert status == 200, answer
            assert answer["translatedText"] == lines
        status, answer = server.post("/translate", {"q": DEV[0], "source": "spa_Latn",
                                                    "target": "fra_Lat"})
        assert status == 400
        assert answer["error"].startswith("target fra_Lat: not a language of this model "
                                          "(closest: fra_Latn")
    finally:
        stop(server)


def test_serve_translates_the_chosen_pair_by_default(imported, mtkit_cli):
    """`serve --src-lang --tgt-lang`: a request that names no language (/v1/translate), or
    only the target (LibreTranslate's source auto), gets that pair, as `translate` with the
    same flags; /v1/models, which the page reads, says so."""
    pair = ["--src-lang", "deu_Latn", "--tgt-lang", "eng_Latn"]
    expected = {}
    for split in ([], ["--split"]):
        done = mtkit_cli(["translate", "-m", "imported.pt", "-i", "dev.es", *pair, *split],
                         cwd=imported)
        assert done.returncode == 0, done.stderr
        expected[bool(split)] = done.stdout.splitlines()
    assert expected[False] != mtkit_cli(["translate", "-m", "imported.pt", "-i", "dev.es"],
                                        cwd=imported).stdout.splitlines()
    server = start_server(imported, imported / "imported.pt", *pair)
    try:
        assert "(deu_Latn -> eng_Latn)" in server.stderr()
        status, answer = server.post("/v1/translate", {"text": DEV})
        assert status == 200, answer
        assert [item["text"] for item in answer["translations"]] == expected[False]
        status, answer = server.post("/translate", {"q": DEV, "source": "auto",
                                                    "target": "eng_Latn"})
        assert status == 200, answer
        assert answer["translatedText"] == expected[True]
        status, _, body = server.request("GET", "/v1/models")
        model = json.loads(body)["models"][0]
        assert (model["source"], model["target"]) == ("deu_Latn", "eng_Latn")
        status, answer = server.post("/v1/score", {"pairs": [[DEV[0], expected[False][0]]]})
        assert status == 200, answer
        translator = Translator.load(imported / "imported.pt", src_lang="deu_Latn",
                                     tgt_lang="eng_Latn")
        alone = translator.score(DEV[0], expected[False][0]).total
        assert answer["scores"][0]["total"] == pytest.approx(alone, abs=1e-4)
    finally:
        stop(server)


def test_a_legacy_nllb_model_translates_and_exports_as_the_python_api(tmp_path, mtkit_cli):
    """NLLB with legacy_behaviour (sources `pieces </s> [src]`): imported, `translate` with
    a pair chosen per run as the Python API, and its CTranslate2 export alike."""
    directory = build_m2m(tmp_path / "legacy", "nllb", legacy=True)
    done = mtkit_cli(["import", directory, "-o", "legacy.pt"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = mtkit_cli(["info", "legacy.pt", "--json"], cwd=tmp_path)
    assert json.loads(shown.stdout)["languages"]["source_layout"] == \
        "pieces </s> [src_lang] (NLLB legacy_behaviour)"
    (tmp_path / "dev.es").write_text("\n".join(DEV) + "\n")
    # one cap for every sentence: CTranslate2 caps a batch, mtkit each sentence
    caps = {"beam": 1, "max_len_a": 0.0, "max_len_b": 12}
    translator = Translator.load(tmp_path / "legacy.pt", **caps)
    flags = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "12"]
    pair = ["--src-lang", "deu_Latn", "--tgt-lang", "fra_Latn"]
    ours = mtkit_cli(["translate", "-m", "legacy.pt", "-i", "dev.es", *flags, *pair],
                     cwd=tmp_path)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.splitlines() == translator.translate(DEV, src_lang="deu_Latn",
                                                            tgt_lang="fra_Latn")
    pytest.importorskip("ctranslate2")
    exported = mtkit_cli(["export", "-m", "legacy.pt", "-o", "ct2", "--quantize", "float32"],
                         cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    theirs = mtkit_cli(["translate", "-m", "ct2", "-i", "dev.es", *flags, *pair], cwd=tmp_path)
    assert theirs.returncode == 0, theirs.stderr
    assert theirs.stdout == ours.stdout


@pytest.mark.parametrize("command", ["translate", "serve"])
def test_a_pair_for_a_model_of_one_pair_is_one_line(command, tiny_run, tmp_path, mtkit_cli):
    (tmp_path / "in.txt").write_text("hola\n")
    args = ["-i", "in.txt"] if command == "translate" else ["--port", "0"]
    done = mtkit_cli([command, "-m", tiny_run.model, *args, "--tgt-lang", "fr"], cwd=tmp_path)
    assert done.returncode == 2
    assert done.error_lines() == ["mtkit: error: --src-lang/--tgt-lang: this model translates "
                                  "one language pair; a pair is chosen only for a "
                                  "multilingual model (M2M100, NLLB)"], done.stderr
