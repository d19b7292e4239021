"""Test and benchmark doubles that ship with the package, so `bench/` never imports `tests/`.

`fake_systemone.FakeServer` is a System One server on loopback that speaks the exact wire
format (plain and inside the Workers AI envelope), scriptable to fail or to answer by question.
It never loads a model: use it to test and measure everything around Clef, not Clef itself.

`guard_weights.weights_copy` writes the guard's weights under another name or threshold: a
new guard version, to test and measure what a guard change re-screens.

`tiny_release.build_tiny_release` writes a tiny random Clef release folder (needs the `local`
extra and the `clef-finetune` wheel for the model code): the local, `serve` and Ray backends
load it as they load the real weights.
"""
