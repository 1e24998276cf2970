PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean-venv badinputs docs screenshots

$(STAMP): pyproject.toml
	@echo "== installing precision-doctor and its dependencies into $(VENV) (once; about a minute on a fresh clone)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install --progress-bar on -e '.[dev,service,trt]'
	touch $(STAMP)

demo: $(STAMP)  # a planted model and a folder of its 25 samples, as you would give your own
	$(BIN)/python examples/make_examples.py
	@echo "== diagnosing examples/three_defects.onnx on the samples in examples/three_defects_inputs/"
	$(BIN)/precision-doctor diagnose examples/three_defects.onnx --inputs examples/three_defects_inputs \
	    --precision fp16 --atol 1e-2 --rtol 1e-2 --out reports/demo-$$(date +%Y%m%d-%H%M%S)

test: $(STAMP)
	$(BIN)/ruff check precision_doctor tests bench examples
	$(BIN)/python -m pytest -q -x --durations=10

badinputs: $(STAMP)  # the bad-input replay (issue #11): a table of failures by class, ~3 min on 2 cores
	$(BIN)/python tests/badinputs --jobs 2

docs: $(STAMP)  # docs/cli.md from the program (tests/cli/test_cli_docs.py fails when it is stale)
	$(BIN)/python -m precision_doctor.cli.docs > docs/cli.md

screenshots: $(STAMP)  # docs/img/*.png: report.html, /ui and job pages in headless Chromium (needs `chromium`)
	$(BIN)/python bench/screenshots.py
	$(BIN)/python bench/verdict_shots.py

lint: $(STAMP)
	$(BIN)/ruff check precision_doctor tests bench examples

clean-venv:
	rm -rf $(VENV)
