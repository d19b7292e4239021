.PHONY: demo test test-lab setup-demo setup-test lint ui bench

demo: setup-demo
	bash scripts/demo.sh

test: setup-test
	bash scripts/test.sh

# The lab's tests (guard training, data preparation): not the product, run by CI after `make test`.
test-lab: setup-test
	bash scripts/test.sh lab/tests

setup-demo:
	bash scripts/setup.sh minilm

setup-test:
	bash scripts/setup.sh all,dev

lint:
	.venv/bin/ruff check clef_pipelines tests bench && .venv/bin/ruff format --check clef_pipelines tests bench

ui: setup-demo
	.venv/bin/clef-pipelines ui --config data/demo.yaml
