"""Op lists of realistic mock models, shared by ``python -m aclprof.demo``, ``aclprof demo``
and the tests: a ResNet-50-like CNN and a small transformer encoder.

Durations are in ns (the mock's default unit) and roughly those of a batch-1 inference on
an Ascend 310P-class device; ``jitter`` is a uniform +/- spread.
"""

from __future__ import annotations

from typing import Any

__all__ = ["resnet_like_ops", "transformer_like_ops", "rerank_ops", "MODELS"]


def resnet_like_ops() -> list[dict[str, Any]]:
    """~70 ops, ~0.7 ms per inference: Conv2D dominates, then BatchNorm, Relu, Add."""
    ops = [{"name": "conv1", "type": "Conv2D", "duration_ns": 40_000, "jitter": 4_000}]
    prefix = ""
    for stage, (blocks, conv_ns) in enumerate([(3, 18_000), (4, 22_000), (6, 26_000), (3, 30_000)], 1):
        for b in range(blocks):
            for k in range(1, 3):
                prefix = f"layer{stage}/block{b}/"
                ops.append({"name": prefix + f"conv{k}", "type": "Conv2D",
                            "duration_ns": conv_ns, "jitter": conv_ns // 10})
                ops.append({"name": prefix + f"bn{k}", "type": "BatchNorm", "duration_ns": 4_000,
                            "jitter": 400})
                ops.append({"name": prefix + f"relu{k}", "type": "Relu", "duration_ns": 1_500,
                            "jitter": 150})
            ops.append({"name": prefix + "add", "type": "Add", "duration_ns": 2_000, "jitter": 200})
    ops.append({"name": "avgpool", "type": "AvgPool", "duration_ns": 6_000, "jitter": 600})
    ops.append({"name": "fc", "type": "MatMulV2", "duration_ns": 12_000, "jitter": 1_200})
    return ops


def transformer_like_ops(layers: int = 6) -> list[dict[str, Any]]:
    """A BERT-base-like encoder: per layer QKV/out/FFN MatMuls, softmax, layer norms, GELU."""
    ops = [{"name": "embeddings/gather", "type": "GatherV2", "duration_ns": 3_000, "jitter": 300},
           {"name": "embeddings/layernorm", "type": "LayerNorm", "duration_ns": 2_500, "jitter": 250}]
    for i in range(layers):
        p = f"encoder/layer{i}/"
        ops += [
            {"name": p + "attention/qkv", "type": "MatMulV2", "duration_ns": 18_000, "jitter": 1_800},
            {"name": p + "attention/transpose", "type": "Transpose", "duration_ns": 2_000, "jitter": 200},
            {"name": p + "attention/scores", "type": "BatchMatMul", "duration_ns": 9_000, "jitter": 900},
            {"name": p + "attention/softmax", "type": "SoftmaxV2", "duration_ns": 4_000, "jitter": 400},
            {"name": p + "attention/context", "type": "BatchMatMul", "duration_ns": 9_000, "jitter": 900},
            {"name": p + "attention/out", "type": "MatMulV2", "duration_ns": 6_000, "jitter": 600},
            {"name": p + "attention/add", "type": "Add", "duration_ns": 1_000, "jitter": 100},
            {"name": p + "attention/layernorm", "type": "LayerNorm", "duration_ns": 2_500, "jitter": 250},
            {"name": p + "ffn/up", "type": "MatMulV2", "duration_ns": 24_000, "jitter": 2_400},
            {"name": p + "ffn/gelu", "type": "Gelu", "duration_ns": 3_000, "jitter": 300},
            {"name": p + "ffn/down", "type": "MatMulV2", "duration_ns": 24_000, "jitter": 2_400},
            {"name": p + "ffn/add", "type": "Add", "duration_ns": 1_000, "jitter": 100},
            {"name": p + "ffn/layernorm", "type": "LayerNorm", "duration_ns": 2_500, "jitter": 250},
        ]
    ops.append({"name": "pooler/dense", "type": "MatMulV2", "duration_ns": 3_000, "jitter": 300})
    return ops


def rerank_ops() -> list[dict[str, Any]]:
    """A re-ranking head some requests also run (``aclprof demo --requests``: the slow ones),
    ~0.5 ms: a wide MatMul, TopK over the candidates and a gather."""
    return [{"name": "rerank/score", "type": "MatMulV2", "duration_ns": 60_000, "jitter": 6_000},
            {"name": "rerank/topk", "type": "TopKV2", "duration_ns": 140_000, "jitter": 14_000},
            {"name": "rerank/gather", "type": "GatherV2", "duration_ns": 8_000, "jitter": 800}]


MODELS = {"resnet": resnet_like_ops, "transformer": transformer_like_ops}
