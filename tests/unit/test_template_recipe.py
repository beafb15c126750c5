"""recipes/template.yaml is the 30-minute CPU recipe with the data left to the user."""

from __future__ import annotations

import dataclasses

from builders import RECIPES

from mtkit.config import load_recipe


def test_the_template_is_the_cpu_recipe_but_for_its_data():
    template = load_recipe(RECIPES / "template.yaml", check_files=False)
    cpu = load_recipe(RECIPES / "cpu-30m.yaml", check_files=False)
    assert dataclasses.replace(template, data=cpu.data, name=cpu.name) == cpu
    assert template.data.train[0].src == (RECIPES.parent / "corpus" / "train.de").resolve()
