# mtkit: make install | demo | test | test-fast | lint | bench
# Uses the active virtual environment if there is one, else creates .venv here.
PYTHON ?= python3
ifdef VIRTUAL_ENV
BIN := $(VIRTUAL_ENV)/bin
else
BIN := .venv/bin
endif
STAMP := $(BIN)/.mtkit-installed

.PHONY: install demo test test-fast lint bench

install: $(STAMP)

# torch==2.13.0 first: a bare torch requirement would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv .venv
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,ct2,plot,tensorboard,serve]'
	touch $@

demo: install
	$(BIN)/mtkit train recipes/demo.yaml
	@echo '--- Translating three verses of the test books (never seen in training):'
	printf '%s\n' \
	  'Los Judíos tuvieron luz y alegría, y gozo y honra.' \
	  'Entonces respondió Esther, y dijo: Mi petición y mi demanda es:' \
	  'Que edificáis á Sión con sangre, y á Jerusalem con injusticia;' \
	  | $(BIN)/mtkit translate -m runs/demo/model.pt

test: install
	$(BIN)/python -m pytest

# the pure unit tier alone (no subprocess, no trained run): under a minute
test-fast: install
	$(BIN)/python -m pytest tests/unit

lint: install
	$(BIN)/ruff check mtkit tests bench

# Each script appends its record to bench/work/results.jsonl (untracked); the records
# docs/benchmarks.md cites are promoted to bench/records.jsonl with bench/promote.py.
# The decoding benchmarks need a trained model: the demo's by default (make demo first),
# or e.g. make bench BENCH_MODEL=runs/bible-es-en/model.pt
BENCH_MODEL ?= runs/demo/model.pt

bench: install
	$(BIN)/python bench/binarize.py
	$(BIN)/python bench/train.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/decode.py --model $(BENCH_MODEL)
	$(BIN)/python bench/decode_profile.py --model $(BENCH_MODEL)
	$(BIN)/python bench/engines.py --model $(BENCH_MODEL)
	$(BIN)/python bench/translate_load.py --model $(BENCH_MODEL)
	$(BIN)/python bench/serve_load.py --model $(BENCH_MODEL) --modes batched processes unbatched
