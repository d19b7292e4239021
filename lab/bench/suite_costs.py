"""Two costs the product's test suite paid in the product's code (session suite2, 6 December).

    python -m lab.bench.suite_costs gelu    # the numpy MiniLM's GELU: expression vs gelu_
    python -m lab.bench.suite_costs s3      # an S3 filesystem: own botocore data vs shared

`gelu`: one (8, 256, 1536) float32 array (a guard batch's intermediate layer), best of 5, the
one-line expression (`_textbook_gelu`, what `minilm_numpy` computed before) against the in-place
`gelu_`; the two must give the same bits, which it checks. `s3`: moto's S3 on loopback
(`clef_pipelines.testing.s3_server`), ten `objectstore.filesystem` calls with one `exists`
each, process CPU (the in-process server's included), with the process's shared botocore
loader against a session that parses its own (what `filesystem` did before).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import numpy as np


def _textbook_gelu(h: np.ndarray) -> np.ndarray:
    u = h / math.sqrt(2.0)
    z = np.abs(u)
    t = 1.0 / (1.0 + 0.5 * z)
    inner = 0.17087277
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418):
        inner = c + t * inner
    inner = 1.00002368 + t * (0.37409196 + t * inner)
    r = 1.0 - t * np.exp(-z * z - 1.26551223 + t * inner)
    return 0.5 * h * (1.0 + np.where(u >= 0, r, -r))


def gelu() -> None:
    from clef_pipelines.embedding.minilm_numpy import gelu_

    h = np.random.default_rng(0).standard_normal((8, 256, 1536)).astype(np.float32)
    same = np.array_equal(_textbook_gelu(h).view(np.uint32), gelu_(h.copy()).view(np.uint32))
    for name, fn in (("expression", _textbook_gelu), ("gelu_", gelu_)):
        best = math.inf
        for _ in range(5):
            x = h.copy()
            started = time.perf_counter()
            fn(x)
            best = min(best, time.perf_counter() - started)
        print(f"{name}: {best * 1000:.1f} ms")
    print(f"same bits: {same}")


def s3() -> None:
    import aiobotocore.session
    import s3fs

    from clef_pipelines.objectstore import ObjectStoreConfig, filesystem, fsspec_options
    from clef_pipelines.testing.s3_server import running_s3

    with running_s3() as server:
        os.environ.update(server.env())
        bucket = server.bucket("bench")
        server.client().put_object(Bucket=bucket, Key="x/a.md", Body=b"hi")
        cfg = ObjectStoreConfig(**server.settings())
        opts = fsspec_options(cfg, "s3")

        def own_data() -> Any:
            session = aiobotocore.session.AioSession()
            return s3fs.S3FileSystem(
                skip_instance_cache=True, use_listings_cache=False, session=session, **opts
            )

        for name, make in (
            ("own botocore data (before)", own_data),
            ("shared loader (filesystem)", lambda: filesystem(f"s3://{bucket}/x", cfg)),
        ):
            make().exists(f"{bucket}/x/a.md")  # imports and the server's first request
            started = time.process_time()
            for _ in range(10):
                make().exists(f"{bucket}/x/a.md")
            print(f"{name}: {(time.process_time() - started) * 100:.0f} ms CPU a filesystem")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["gelu", "s3"])
    {"gelu": gelu, "s3": s3}[parser.parse_args().what]()


if __name__ == "__main__":
    main()
