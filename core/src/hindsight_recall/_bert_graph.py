"""The ONNX graph of a BERT encoder, written from its weights with ``onnx``'s helpers (no torch).

Two heads: ``mean`` (sentence-transformers' mean pooling and L2 normalisation, as the bundled
all-MiniLM-L6-v2 does) gives ``embedding`` [batch, hidden]; ``classify`` (the pooler's tanh over
the first token, then the classifier, as ``BertForSequenceClassification`` and cross-encoders do)
gives ``logits`` [batch, labels]. The inputs are ``input_ids``, ``attention_mask`` and
``token_type_ids``, int64 [batch, sequence]. Linear layers are ``MatMul`` with a constant weight
and an ``Add``, as torch's exporter writes them, so ONNX Runtime's dynamic quantisation treats the
graph the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17
#: the IR version of opset 17, which every ONNX Runtime that runs that opset loads
IR_VERSION = 8
#: what the attention mask adds to a padded position's score (transformers uses the same)
MASKED = float(np.finfo(np.float32).min)
#: the activations of ``hidden_act`` written here (both exact, erf-based GELU)
GELU = ("gelu", "gelu_python")

Head = Literal["mean", "classify"]


class UnsupportedModel(ValueError):
    """The weights or config describe a model this builder does not write."""


def build(weights: Mapping[str, np.ndarray], config: Mapping[str, Any], head: Head) -> Any:
    """The ``onnx.ModelProto`` of a BERT model with ``head``.

    :param weights: the model's tensors by name, as in its safetensors file (a ``bert.`` prefix is allowed).
    :param config: the model's ``config.json``.
    :param head: ``mean`` for a sentence embedding, ``classify`` for a cross-encoder's logits.
    :raises UnsupportedModel: not a BERT model with absolute positions and GELU, or weights missing.
    """
    import onnx  # late: only a first run builds a graph
    from onnx import TensorProto, helper

    if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") not in GELU or \
            config.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModel(f"not a BERT encoder with absolute positions and GELU (model_type="
                               f"{config.get('model_type')!r}, hidden_act={config.get('hidden_act')!r})")
    g = _Graph(weights)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    eps = float(config.get("layer_norm_eps", 1e-12))

    # embeddings: words + positions 0..sequence-1 + token types, then LayerNorm
    # positions are looked up (Gather) as torch's exporter writes it, so that quantisation treats the
    # position table as it treats the other embedding tables
    zero, one = g.const(np.array([0], np.int64)), g.const(np.array([1], np.int64))
    table = g.weight("embeddings.position_embeddings.weight")
    every = g.const(np.arange(g.weight_array("embeddings.position_embeddings.weight").shape[0])[None], "position_ids")
    length = g.op("Shape", "input_ids", start=1, end=2)  # [sequence]
    positions = g.op("Gather", table, g.op("Slice", every, zero, length, one))  # [1, sequence, hidden]
    x = g.op("Add", g.op("Add", g.op("Gather", g.weight("embeddings.word_embeddings.weight"), "input_ids"),
                         positions),
             g.op("Gather", g.weight("embeddings.token_type_embeddings.weight"), "token_type_ids"))
    x = g.layer_norm(x, "embeddings.LayerNorm", eps)

    # padded positions get MASKED added to their attention scores: [batch, 1, 1, sequence]
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    additive = g.op("Mul", g.op("Sub", g.const(np.array(1, np.float32)), mask), g.const(np.array(MASKED, np.float32)))
    additive = g.op("Unsqueeze", additive, g.const(np.array([1, 2], np.int64)))
    for i in range(int(config["num_hidden_layers"])):
        x = g.encoder_layer(x, f"encoder.layer.{i}", additive, hidden, heads, eps)

    if head == "mean":
        weights3 = g.op("Unsqueeze", mask, g.const(np.array([-1], np.int64)))  # [batch, sequence, 1]
        axis = g.const(np.array([1], np.int64))
        total = g.op("ReduceSum", g.op("Mul", x, weights3), axis, keepdims=0)
        count = g.op("Max", g.op("ReduceSum", weights3, axis, keepdims=0), g.const(np.array(1e-9, np.float32)))
        mean = g.op("Div", total, count)
        norm = g.op("Max", g.op("ReduceL2", mean, axes=[-1], keepdims=1),
                    g.const(np.array(1e-12, np.float32)))
        g.op("Div", mean, norm, out="embedding")
        output = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden])
    else:
        first = g.op("Squeeze", g.op("Slice", x, zero, one, one), one)  # the [CLS] token: [batch, hidden]
        pooled = g.op("Tanh", g.linear(first, "pooler.dense"))
        labels = int(g.weight_array("classifier.weight").shape[0])
        g.linear(pooled, "classifier", out="logits")
        output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", labels])

    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in INPUTS]
    graph = helper.make_graph(g.nodes, "bert", inputs, [output], initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="hindsight-recall")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


class _Graph:
    """Nodes and initializers under construction; every value gets a fresh name."""

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        self.weights = {name.removeprefix("bert."): array for name, array in weights.items()}
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._names: set[str] = set()
        self._count = 0

    def _fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def op(self, kind: str, *inputs: str, out: str | None = None, **attributes: Any) -> str:
        from onnx import helper

        fresh = self._fresh(kind.lower())
        name = out or fresh
        self.nodes.append(helper.make_node(kind, list(inputs), [name], name=fresh, **attributes))
        return name

    def const(self, array: np.ndarray, stem: str = "const") -> str:
        from onnx import numpy_helper

        name = self._fresh(stem)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight_array(self, name: str) -> np.ndarray:
        try:
            return np.asarray(self.weights[name], dtype=np.float32)
        except KeyError:
            raise UnsupportedModel(f"the weights hold no {name!r}") from None

    def weight(self, name: str, transpose: bool = False) -> str:
        """An initializer named after the weight (transposed for a MatMul), added once."""
        key = f"{name}.T" if transpose else name
        if key not in self._names:
            array = self.weight_array(name)
            from onnx import numpy_helper

            self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array.T if transpose else array),
                                                             key))
            self._names.add(key)
        return key

    def linear(self, x: str, prefix: str, out: str | None = None) -> str:
        """``x @ W.T + b`` of torch's ``Linear`` at ``prefix``."""
        return self.op("Add", self.op("MatMul", x, self.weight(f"{prefix}.weight", transpose=True)),
                       self.weight(f"{prefix}.bias"), out=out)

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        return self.op("LayerNormalization", x, self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias"),
                       axis=-1, epsilon=eps)

    def encoder_layer(self, x: str, prefix: str, additive_mask: str, hidden: int, heads: int, eps: float) -> str:
        """One transformer block: self-attention, residual and LayerNorm; GELU feed-forward, residual and LayerNorm."""
        size = hidden // heads
        split = self.const(np.array([0, 0, heads, size], np.int64), "split_heads")

        def per_head(name: str, perm: list[int]) -> str:
            return self.op("Transpose", self.op("Reshape", self.linear(x, f"{prefix}.attention.self.{name}"), split),
                           perm=perm)

        query = per_head("query", [0, 2, 1, 3])  # [batch, heads, sequence, size]
        key = per_head("key", [0, 2, 3, 1])  # [batch, heads, size, sequence]
        value = per_head("value", [0, 2, 1, 3])
        scores = self.op("Mul", self.op("MatMul", query, key), self.const(np.array(1 / math.sqrt(size), np.float32)))
        probs = self.op("Softmax", self.op("Add", scores, additive_mask), axis=-1)
        context = self.op("Transpose", self.op("MatMul", probs, value), perm=[0, 2, 1, 3])
        context = self.op("Reshape", context, self.const(np.array([0, 0, hidden], np.int64), "merge_heads"))
        attended = self.layer_norm(self.op("Add", self.linear(context, f"{prefix}.attention.output.dense"), x),
                                   f"{prefix}.attention.output.LayerNorm", eps)
        inner = self.linear(attended, f"{prefix}.intermediate.dense")
        # exact GELU: x * (1 + erf(x / sqrt 2)) / 2; ONNX Runtime fuses it into one kernel
        erf = self.op("Erf", self.op("Div", inner, self.const(np.array(math.sqrt(2), np.float32))))
        gelu = self.op("Mul", self.op("Mul", inner, self.op("Add", erf, self.const(np.array(1, np.float32)))),
                       self.const(np.array(0.5, np.float32)))
        return self.layer_norm(self.op("Add", self.linear(gelu, f"{prefix}.output.dense"), attended),
                               f"{prefix}.output.LayerNorm", eps)
