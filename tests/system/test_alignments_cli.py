"""`mtkit translate --alignments` as a user runs it, on the reverse-task model
(tests/conftest.py reverse_model): links are the last column of every line, the line
contract holds, and a layer the model lacks is a one-line error. (The links themselves:
tests/unit/test_align.py and tests/integration/test_alignments_trained.py.)"""

from __future__ import annotations

import re

LINES = ["a b c", "", "j i h g f e", "   ", "d"]
PHARAOH = re.compile(r"(\d+-\d+( \d+-\d+)*)?")


def rows(result) -> list[list[str]]:
    assert result.returncode == 0, result.stderr
    return [row.split("\t") for row in result.stdout.split("\n")[:-1]]


def test_links_are_the_last_column(reverse_model, tmp_path, mtkit_cli):
    model, _ = reverse_model
    source = "".join(line + "\n" for line in LINES)
    for extra, columns in (([], 2), (["--scores"], 3), (["--beam", "2", "--nbest", "2"], 4),
                           (["--alignment-unit", "subword", "--alignment-layer", "-1"], 2)):
        found = rows(mtkit_cli(["translate", "-m", model, "--alignments", "--quiet", *extra],
                               cwd=tmp_path, input=source))
        assert {len(row) for row in found} == {columns}, found
        assert all(PHARAOH.fullmatch(row[-1]) for row in found), found
        if "--nbest" in extra:
            assert sorted({int(row[0]) for row in found}) == list(range(len(LINES)))
            continue
        assert len(found) == len(LINES)
        for line, row in zip(LINES, found):
            if not line.strip():
                assert row[0] == "" and row[-1] == ""  # an empty line: empty columns
            elif "subword" not in extra:
                words = len(row[0].split())
                outputs = {int(link.split("-")[1]) for link in row[-1].split()}
                assert outputs == set(range(words))  # every output word linked


def test_bad_alignment_options_are_one_line_errors(reverse_model, tmp_path, mtkit_inprocess,
                                                   expect_error):
    model, _ = reverse_model
    (tmp_path / "in.txt").write_text("a b\n")
    base = ["translate", "-m", model, "-i", tmp_path / "in.txt"]
    expect_error(mtkit_inprocess([*base, "--alignments", "--alignment-layer", "2"], tmp_path),
                 "--alignment-layer 2: the model's decoder has 2 layers")
    expect_error(mtkit_inprocess([*base, "--alignment-unit", "subword"], tmp_path),
                 "--alignment-unit: give --alignments too")
    expect_error(mtkit_inprocess([*base, "--alignments", "--alignment-unit", "x"], tmp_path),
                 "--alignment-unit x: expected word or subword")


def test_a_bad_alignments_file_stops_training_in_one_line(tmp_path, mtkit_inprocess,
                                                          expect_error):
    """Guided alignment's links file, checked as `mtkit train` binarises: the file and
    line of a bad link; a recipe pairing links with subword sampling."""
    import yaml
    from builders import bible_recipe

    recipe = bible_recipe(tmp_path)
    raw = yaml.safe_load(recipe.read_text())
    lines = len(open(raw["data"]["train"]["src"], encoding="utf-8").read().splitlines())
    links = tmp_path / "train.links"
    links.write_text("0-0\n" * 5 + "0-0 0-x\n" + "0-0\n" * (lines - 6))
    raw["data"]["train"]["alignments"] = str(links)
    recipe.write_text(yaml.safe_dump(raw))
    expect_error(mtkit_inprocess(["train", recipe, "--until", "binarize"], tmp_path),
                 "train.links:6: '0-x' is not a link")
    raw["tokenizer"].update({"model_type": "unigram", "sample_alpha": 0.1})
    recipe.write_text(yaml.safe_dump(raw))
    expect_error(mtkit_inprocess(["train", recipe, "--until", "binarize"], tmp_path),
                 "word links fix one segmentation")
