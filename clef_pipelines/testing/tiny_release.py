"""Build a tiny random Clef release folder for tests and benchmarks (never committed).

The layout is the one `load_release_model` in the release's own `joint_schema_model.py`
reads: a `Qwen3_5ForConditionalGeneration` checkpoint, tokenizer files, `joint_head_config.json`
and `joint_head.safetensors`, plus the model code itself. No video processor is saved: text-only
requests must work without torchvision.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

HEAD_CONFIG = {
    "hidden_size": 64,
    "width": 32,
    "routing_layers": 1,
    "layers": 1,
    "heads": 2,
    "feedforward": 64,
}
_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<think>",
    "</think>",
]
VOCAB_SIZE = 320


def vendored_model_code() -> Path:
    """The unmodified `joint_schema_model.py` that the clef-finetune wheel carries."""
    spec = importlib.util.find_spec("clef_finetune")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pip install --no-deps clef-finetune==0.1.0 (test fixture only)")
    return Path(next(iter(spec.submodule_search_locations))) / "_vendor" / "joint_schema_model.py"


def _byte_tokenizer():
    # Byte-level BPE without merges: one token per byte, 256 + specials; enough for the
    # prompt layout and it keeps the embedding table tiny.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(_SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )


def build_tiny_release(out_dir: str | Path, seed: int = 0) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tok = _byte_tokenizer()
    tid = tok.convert_tokens_to_ids
    config = Qwen3_5Config(
        text_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"],
            "full_attention_interval": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "vocab_size": VOCAB_SIZE,
            "max_position_embeddings": 32768,
            "tie_word_embeddings": False,
            "eos_token_id": tid("<|im_end|>"),
            "pad_token_id": tid("<|endoftext|>"),
        },
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 64,
        },
        tie_word_embeddings=False,
        image_token_id=tid("<|image_pad|>"),
        video_token_id=tid("<|video_pad|>"),
        vision_start_token_id=tid("<|vision_start|>"),
        vision_end_token_id=tid("<|vision_end|>"),
    )
    Qwen3_5ForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)

    code = vendored_model_code()
    spec = importlib.util.spec_from_file_location("_tiny_jsm", code)
    assert spec is not None and spec.loader is not None
    jsm = importlib.util.module_from_spec(spec)
    # dataclasses resolve string annotations through sys.modules: register before running.
    sys.modules[spec.name] = jsm
    spec.loader.exec_module(jsm)
    head = jsm.JointSchemaHead(**HEAD_CONFIG)
    with torch.no_grad():
        # Zero gates (the constructor's values) would hide the joint path; a trained head
        # has non-zero ones, so give the random head some to make answers input-dependent.
        head.residual_gate.fill_(0.5)
        head.joint_logit_scale.fill_(1.0)
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in head.state_dict().items()}
    save_file(tensors, str(out / "joint_head.safetensors"))
    (out / "joint_head_config.json").write_text(json.dumps(HEAD_CONFIG, indent=2))
    shutil.copy(code, out / "joint_schema_model.py")
    (out / "TINY_RANDOM_MODEL.txt").write_text("Random test fixture, not a Clef model.\n")
    return out


if __name__ == "__main__":
    print(build_tiny_release(sys.argv[1] if len(sys.argv) > 1 else "tiny-release"))
