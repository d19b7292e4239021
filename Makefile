.PHONY: demo test test-stress test-lab setup-demo setup-test setup-lab lint ui bench

demo: setup-demo
	bash scripts/demo.sh

test: setup-test
	bash scripts/test.sh

# Tests that start many processes at once (concurrent runs of one collection, a real `dagster
# dev`): run by CI after the suite, one file at a time.
test-stress: setup-test
	bash scripts/test-stress.sh

# The lab's tests (guard training, data preparation): not the product, run by CI after `make test`.
# Guard training needs sentence-transformers and scikit-learn, which the product does not.
test-lab: setup-lab
	bash scripts/test.sh lab/tests

setup-demo:
	bash scripts/setup.sh minilm

setup-test:
	bash scripts/setup.sh all,dev

setup-lab:
	bash scripts/setup.sh all,dev,guard-training

lint:
	.venv/bin/ruff check clef_pipelines tests bench lab && .venv/bin/ruff format --check clef_pipelines tests bench lab

# Every maintained benchmark with --quick, one after another (bench/README.md): a skip (the
# peer's venv, PostgreSQL, clef-finetune missing) is reported with its reason; missing shared
# data fails under CI=true. `python -m bench list` names them; `python -m bench run NAME` runs one.
bench:
	PYTHONPATH=$(CURDIR) .venv/bin/python -m bench run --quick-all

ui: setup-demo
	.venv/bin/clef-pipelines ui --config data/demo.yaml
