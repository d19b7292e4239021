"""Probe: all-MiniLM-L6-v2 on ONNX Runtime, built from the wheel's safetensors, against torch.

    pip install onnx onnxruntime          # not dependencies of the product
    .venv/bin/python -m lab.bench.minilm_onnx --runtime onnx --texts 64 [--batch 8]
    .venv/bin/python -m lab.bench.minilm_onnx --runtime torch --texts 64

Why (issue 56, item 2): a first ingest of 500 SciFact abstracts peaks at about 1.0 GB, of which
torch's import is some 180 MB and its model some 90 to 130 MB; onnxruntime imports in about 30
MB. Each run is a fresh process: it loads the runtime and the weights, embeds the first
`--texts` SciFact abstracts in batches of `--batch`, prints the load and embedding times, CPU
seconds and resident memory, and saves the vectors under `--out` so the two runtimes can be
compared (`--compare`). The graph is written with `onnx.helper`: the embeddings, six BERT layers
(exact erf GELU), mean pooling and unit length, the same arithmetic as `minilm_numpy`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import SCIFACT


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build_graph(w: dict[str, np.ndarray]) -> Any:
    """MiniLM's ONNX graph (opset 18), every weight an initializer; inputs ids and mask
    (int64, batch x tokens), output `vec` (batch x 384, unit length)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    inits: list[Any] = []

    def init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def const(name: str, value: Any, dtype: Any = np.float32) -> str:
        return init(name, np.array(value, dtype=dtype))

    count = [0]

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        count[0] += 1
        out = f"t{count[0]}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    for name, value in w.items():
        # nn.Linear keeps (out, in); MatMul wants (in, out).
        init(name, value.T if value.ndim == 2 and "embeddings" not in name else value)
    eps = 1e-12
    x = node("Gather", ["embeddings.word_embeddings.weight", "ids"])
    length = node("Shape", ["ids"], start=1, end=2)
    pos = node(
        "Slice", ["embeddings.position_embeddings.weight", const("zero", [0], np.int64), length]
    )
    token_type = node(
        "Gather", ["embeddings.token_type_embeddings.weight", const("first", 0, np.int64)]
    )
    x = node("Add", [node("Add", [x, pos]), token_type])
    x = node(
        "LayerNormalization",
        [x, "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"],
        axis=-1,
        epsilon=eps,
    )
    maskf = node("Cast", ["mask"], to=TensorProto.FLOAT)
    one = const("one", 1.0)
    bias = node("Mul", [node("Sub", [one, maskf]), const("neg", -1e9)])
    bias = node("Unsqueeze", [bias, const("axes12", [1, 2], np.int64)])
    heads4 = const("heads4", [0, 0, 12, 32], np.int64)
    flat3 = const("flat3", [0, 0, 384], np.int64)
    scale = const("scale", 1.0 / math.sqrt(32))
    sqrt2, half = const("sqrt2", math.sqrt(2.0)), const("half", 0.5)
    for i in range(6):
        p = f"encoder.layer.{i}."

        def proj(t: str, name: str, p: str = p) -> str:
            return node("Add", [node("MatMul", [t, p + name + ".weight"]), p + name + ".bias"])

        def heads(t: str, perm: list[int]) -> str:
            return node("Transpose", [node("Reshape", [t, heads4])], perm=perm)

        q = heads(proj(x, "attention.self.query"), [0, 2, 1, 3])
        k = heads(proj(x, "attention.self.key"), [0, 2, 3, 1])
        v = heads(proj(x, "attention.self.value"), [0, 2, 1, 3])
        probs = node(
            "Softmax", [node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), bias])], axis=-1
        )
        ctx = node(
            "Reshape", [node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3]), flat3]
        )
        x = node(
            "LayerNormalization",
            [
                node("Add", [proj(ctx, "attention.output.dense"), x]),
                p + "attention.output.LayerNorm.weight",
                p + "attention.output.LayerNorm.bias",
            ],
            axis=-1,
            epsilon=eps,
        )
        h = proj(x, "intermediate.dense")
        h = node(
            "Mul",
            [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, sqrt2])]), one])]), half],
        )
        x = node(
            "LayerNormalization",
            [
                node("Add", [proj(h, "output.dense"), x]),
                p + "output.LayerNorm.weight",
                p + "output.LayerNorm.bias",
            ],
            axis=-1,
            epsilon=eps,
        )
    mask3 = node("Unsqueeze", [maskf, const("axis2", [2], np.int64)])
    summed = node("ReduceSum", [node("Mul", [x, mask3]), const("axis1", [1], np.int64)], keepdims=0)
    tokens = node(
        "Max",
        [
            node("ReduceSum", [mask3, const("axis1b", [1], np.int64)], keepdims=0),
            const("tiny", 1e-9),
        ],
    )
    pooled = node("Div", [summed, tokens])
    norm = node(
        "Max",
        [
            node("ReduceL2", [pooled, const("axis_last", [1], np.int64)], keepdims=1),
            const("tiny2", 1e-12),
        ],
    )
    node("Div", [pooled, norm])
    nodes[-1].output[0] = "vec"
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("vec", TensorProto.FLOAT, ["batch", 384])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", choices=["onnx", "torch"], default="onnx")
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime's intra-op threads")
    parser.add_argument("--out", type=Path, default=Path("/tmp/minilm-onnx-probe"))
    parser.add_argument("--compare", action="store_true", help="Compare saved vectors and stop.")
    args = parser.parse_args()
    if args.compare:
        a, b = (np.load(args.out / f"{r}.npy") for r in ("onnx", "torch"))
        print(
            f"max |onnx - torch| {abs(a - b).max():.2e}, lowest cosine {(a * b).sum(1).min():.7f}"
        )
        return
    with (SCIFACT / "corpus.jsonl").open() as fh:
        texts = [json.loads(line)["text"] for line, _ in zip(fh, range(args.texts), strict=False)]
    started, cpu = time.perf_counter(), time.process_time()
    from clef_pipelines.embedding.minilm_numpy import (
        NumpyMiniLMEmbedder,
        _map_safetensors,
        token_batch,
    )

    numpy_model = NumpyMiniLMEmbedder()
    numpy_model._load()
    if args.runtime == "onnx":
        import onnxruntime as ort

        assert numpy_model._model_dir is not None
        weights = _map_safetensors(Path(numpy_model._model_dir) / "model.safetensors")
        data = build_graph(weights).SerializeToString()
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.enable_cpu_mem_arena = False
        options.enable_mem_pattern = False
        options.log_severity_level = 3
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        del data

        def embed(batch: list[str]) -> np.ndarray:
            ids, mask = token_batch(numpy_model._tok, batch)
            return session.run(["vec"], {"ids": ids, "mask": mask})[0]
    else:
        from clef_pipelines.embedding.minilm import MiniLMEmbedder

        torch_model = MiniLMEmbedder(batch_size=args.batch, small_work_tokens=0)
        torch_model._load()

        def embed(batch: list[str]) -> np.ndarray:
            return torch_model._embed(batch)

    loaded, loaded_rss = time.perf_counter() - started, _rss_mb()
    t, c = time.perf_counter(), time.process_time()
    vectors = np.concatenate(
        [embed(texts[i : i + args.batch]) for i in range(0, len(texts), args.batch)]
    )
    wall, cpu_s = time.perf_counter() - t, time.process_time() - c
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.runtime}: loaded in {loaded:.2f} s ({time.process_time() - cpu:.2f} CPU s in all), "
        f"resident {loaded_rss:.0f} MB; {len(texts)} texts in batches of {args.batch}: "
        f"{wall:.2f} s wall, {cpu_s:.2f} CPU s; resident {_rss_mb():.0f} MB, peak {peak:.0f} MB; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / f"{args.runtime}.npy", vectors.astype(np.float32))


if __name__ == "__main__":
    main()
