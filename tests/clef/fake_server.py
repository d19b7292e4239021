"""The fake System One server lives in the package (`clef_pipelines.testing`) so that the
benchmarks can use it too; tests import it from here."""

from clef_pipelines.testing.fake_systemone import Answerer, FakeServer, Reply, answer_for

__all__ = ["Answerer", "FakeServer", "Reply", "answer_for"]
