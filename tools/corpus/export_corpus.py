"""A corpus of real exports (issue 21): small torch / transformers models exported to ONNX
by both PyTorch exporters, each run through every graphmem command.

    # in a venv with torch, transformers, onnx, onnxscript (not graphmem's):
    pip install torch==2.13.0 torchvision==0.28.0 transformers onnx onnxscript pillow
    HF_HUB_OFFLINE=1 python -m tools.corpus.export_corpus export --out /tmp/corpus [--models bert,gpt2]

    # in graphmem's venv (no torch needed):
    python -m tools.corpus.export_corpus run /tmp/corpus [--write] [--models ...] [--timeout 300]

``export`` writes DIR/<model>-<exporter>.onnx for the TorchScript exporter
(``dynamo=False``, opset 17, exporter ``ts``) and the dynamo exporter (``dynamo=True``,
opset 18, exporter ``dynamo``), with symbolic axes named ``batch``, ``seq`` (and
``past_seq`` for GPT-2's decode step, ``dec_seq`` for T5's decoder), weights inside the
file (no model here comes near 2 GB), and DIR/export.json saying what failed to export.
Every model is built from a small config with random weights: nothing is downloaded.
resnet18, mobilenet_v2 and the ``tv-`` models are torchvision's own (``pip install
torchvision`` matching the torch; a CUDA build of torchvision works too, see
:func:`torchvision_module`). The PyTorch comparisons, which run without torchvision,
build resnet18 and resnet50 in plain ``torch.nn`` (tools/training/torch_nets.py).

``run`` takes each file through graphmem as a user would, one subprocess per command with
only ``--dim`` bindings: ``plan``, an independent ``graphmem.validate`` of the written plan
against a freshly loaded graph, ``verify --plan`` (ONNX Runtime CPU), ``report --json``,
``fit --budget 1GiB --json``, ``train --json``, ONNX Runtime's own arena measured as in
``tools/bench/zoo.py`` (``tools/bench/ort_pattern.py`` on the folded model; graphmem's figure beside
it is bench's ``intermediates_arena``: file order, in-place, graph inputs and outputs
left out, as ORT sees them), and whether ``report``'s weight bytes and parameter count
stay the same at a second binding (batch and sequence doubled). ``--write`` puts the
table between ``<!-- corpus -->`` markers in docs/corpus.md; a model that fails stays in
the table with the first failure's one-line reason.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import ROOT

DOC = ROOT / "docs" / "corpus.md"
SECTION = "corpus"  # its section of docs/corpus.md
EXPORTERS = ("ts", "dynamo")
OPSET = {"ts": 17, "dynamo": 18}

# name -> (first binding, second binding, differentiable). The run side needs only this
# table, so it lives here as plain data, without torch.
MODELS: dict[str, tuple[dict[str, int], dict[str, int], bool]] = {
    "resnet18": ({"batch": 1}, {"batch": 2}, True),
    "mobilenet_v2": ({"batch": 1}, {"batch": 2}, True),
    "bert": ({"batch": 1, "seq": 16}, {"batch": 2, "seq": 32}, True),
    "gpt2": ({"batch": 1, "seq": 16}, {"batch": 2, "seq": 32}, True),
    "gpt2-past": ({"batch": 1, "seq": 1, "past_seq": 16},
                  {"batch": 2, "seq": 1, "past_seq": 32}, True),
    "t5": ({"batch": 1, "seq": 16, "dec_seq": 8}, {"batch": 2, "seq": 32, "dec_seq": 16}, True),
    "whisper-encoder": ({"batch": 1}, {"batch": 2}, True),
    "clip-text": ({"batch": 1, "seq": 16}, {"batch": 2, "seq": 32}, True),
    "vit": ({"batch": 1}, {"batch": 2}, True),
    # torchvision's own models (weights=None; small configs where the stock one is large)
    "tv-mobilenet_v3": ({"batch": 1}, {"batch": 2}, True),
    "tv-efficientnet_b0": ({"batch": 1}, {"batch": 2}, True),
    "tv-regnet_y_400mf": ({"batch": 1}, {"batch": 2}, True),
    "tv-convnext": ({"batch": 1}, {"batch": 2}, True),
    "tv-swin": ({"batch": 1}, {"batch": 2}, True),
    "tv-vit": ({"batch": 1}, {"batch": 2}, True),
    "tv-deeplabv3": ({"batch": 1}, {"batch": 2}, True),
    "tv-ssdlite": ({}, {}, False),
}
# Image side of the torchvision models: small, so that verify and train stay quick.
TV_IMAGE = {"tv-mobilenet_v3": 128, "tv-efficientnet_b0": 128, "tv-regnet_y_400mf": 128,
            "tv-convnext": 64, "tv-swin": 64, "tv-vit": 64, "tv-deeplabv3": 128,
            "tv-ssdlite": 160}
TRAIN_BATCH = 2
# --tiny: the sizes of the test fixtures in tests/data/corpus (full weights, a few hundred KB)
TINY = {"hidden": 32, "vocab": 100, "ffn": 64, "positions": 64}
SIZE = {"hidden": 128, "vocab": 1000, "ffn": 512, "positions": 128}

# ====================================================================== export (torch side)


def torchvision_module():
    """``import torchvision``. The only torchvision wheel for this torch here is a CUDA
    build whose compiled ops cannot load beside the CPU torch, and torchvision's import
    then fails registering a fake ``torchvision::nms``: define ``nms`` (schema and a CPU
    kernel in Python, greedy IoU suppression as torchvision's) first, so the models
    import; the other compiled ops (RoI align, deformable conv) stay missing."""
    import torch
    try:
        import torchvision
        return torchvision
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
    for k in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[k]
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

    def nms(dets, scores, iou_threshold):
        order = torch.argsort(scores, descending=True)
        x1, y1, x2, y2 = dets.unbind(1)
        area = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
        alive = torch.ones(len(order), dtype=torch.bool)
        keep = []
        for i in range(len(order)):
            if not alive[i]:
                continue
            a, rest = order[i], order[i + 1:]
            w = (torch.minimum(x2[a], x2[rest]) - torch.maximum(x1[a], x1[rest])).clamp(min=0)
            h = (torch.minimum(y2[a], y2[rest]) - torch.maximum(y1[a], y1[rest])).clamp(min=0)
            inter = w * h
            alive[i + 1:] &= inter / (area[a] + area[rest] - inter) <= iou_threshold
            keep.append(a)
        return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.int64)

    lib.impl("nms", nms, "CPU")
    torchvision_module.lib = lib  # the registration lives as long as the library object
    import torchvision
    torchvision.extension._has_ops = _has_nms  # nms is defined now
    return torchvision


def _has_nms() -> bool:
    """torchvision's ``_has_ops`` once :func:`torchvision_module` defined nms (a plain
    function: TorchScript compiles it inside the scripted batched NMS)."""
    return True


def _torchvision_model(name: str):
    """A torchvision model, random weights, eval mode."""
    torchvision_module()
    from torchvision import models
    if name == "tv-mobilenet_v3":
        return models.mobilenet_v3_small(weights=None)
    if name == "tv-efficientnet_b0":
        return models.efficientnet_b0(weights=None)
    if name == "tv-regnet_y_400mf":
        return models.regnet_y_400mf(weights=None)
    if name == "tv-convnext":  # convnext_tiny's blocks, narrower and shallower
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt
        return ConvNeXt([CNBlockConfig(32, 64, 2), CNBlockConfig(64, 128, 2),
                         CNBlockConfig(128, None, 2)], num_classes=100)
    if name == "tv-swin":  # swin_t's blocks (shifted windows), two stages of 32 and 64
        from torchvision.models.swin_transformer import SwinTransformer
        return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2],
                               num_heads=[2, 4], window_size=[4, 4], num_classes=100)
    if name == "tv-vit":  # vit_b_16's structure, small
        from torchvision.models.vision_transformer import VisionTransformer
        return VisionTransformer(image_size=TV_IMAGE[name], patch_size=16, num_layers=2,
                                 num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=100)
    if name == "tv-deeplabv3":
        return models.segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=4, aux_loss=False)
    if name == "tv-ssdlite":
        return models.detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=3)  # resizes to 320 x 320
    raise SystemExit(f"unknown model {name!r}")


# ------------------------------------------------------------ wrappers, any size
# (module, example args, input names, output names, {input or output: {axis: name}}) for
# a model built at the corpus's small sizes here or at stock sizes by export_fullsize.py

def segmentation(m, images):
    """A torchvision segmentation model's ``out`` as ``masks``."""
    from torch import nn

    class Seg(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            return self.m(pixel_values)["out"]
    return (Seg(), (images,), ["pixel_values"], ["masks"],
            {"pixel_values": {0: "batch"}, "masks": {0: "batch"}})


def bert_encoder(inner, input_ids):
    """A transformers BERT: last hidden state and pooler output."""
    import torch
    from torch import nn

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            o = self.m(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=token_type_ids)
            return o.last_hidden_state, o.pooler_output

    bs = {0: "batch", 1: "seq"}
    return (Bert(), (input_ids, torch.ones_like(input_ids), torch.zeros_like(input_ids)),
            ["input_ids", "attention_mask", "token_type_ids"],
            ["last_hidden_state", "pooler_output"],
            {"input_ids": bs, "attention_mask": bs, "token_type_ids": bs,
             "last_hidden_state": bs, "pooler_output": {0: "batch"}})


def causal_lm(inner, input_ids):
    """A transformers causal LM (GPT-2, Llama): logits, no cache."""
    import torch
    from torch import nn

    class CausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits

    bs = {0: "batch", 1: "seq"}
    return (CausalLM(), (input_ids, torch.ones_like(input_ids)),
            ["input_ids", "attention_mask"], ["logits"],
            {"input_ids": bs, "attention_mask": bs, "logits": bs})


def decode_step(inner, cfg, layers: int, kv_heads: int, head_dim: int, input_ids,
                past: int):
    """One decode step of a transformers causal LM (GPT-2, Llama): new tokens and the
    cache of earlier ones in, logits and the grown cache out, as flat tensors
    (past_key_i, past_value_i in; present_key_i, present_value_i out). Symbolic axes:
    batch, seq, past_seq; the present length (past_seq + seq) is left for the exporter
    to name."""
    import torch
    import transformers as tf
    from torch import nn

    class DecodeStep(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, input_ids, *past):
            cache = tf.DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(layers)],
                                    config=cfg)
            o = self.m(input_ids=input_ids, past_key_values=cache, use_cache=True)
            pk = o.past_key_values
            flat = []
            for i in range(layers):
                layer = pk.layers[i] if hasattr(pk, "layers") else None
                k, v = (layer.keys, layer.values) if layer is not None else pk[i]
                flat += [k, v]
            return (o.logits, *flat)

    batch = input_ids.shape[0]
    cache = [torch.randn(batch, kv_heads, past, head_dim) for _ in range(2 * layers)]
    pnames = [f"past_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]
    onames = ["logits"] + [f"present_{kv}_{i}" for i in range(layers)
                           for kv in ("key", "value")]
    bs = {0: "batch", 1: "seq"}
    axes = {"input_ids": bs, "logits": bs}
    axes.update({p: {0: "batch", 2: "past_seq"} for p in pnames})
    axes.update({o: {0: "batch"} for o in onames[1:]})
    return (DecodeStep(), (input_ids, *cache), ["input_ids", *pnames], onames, axes)


def whisper_encoder(inner, batch: int):
    """A transformers Whisper encoder on 80 mel bins x the 2 * max_source_positions
    frames it insists on: only the batch varies."""
    import torch
    from torch import nn

    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, input_features):
            return self.m(input_features).last_hidden_state

    frames = 2 * inner.config.max_source_positions
    return (Enc(), (torch.randn(batch, 80, frames),), ["input_features"],
            ["last_hidden_state"],
            {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}})


def build(name: str):
    """(module, example args, input names, output names, {input or output: {axis: name}})."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    B, S = 2, 8  # example sizes: above 1 and distinct, so nothing is specialized

    def ids(*shape, high=None):
        high = high or min(SIZE["vocab"], 1000)
        return torch.randint(0, high, shape, dtype=torch.int64)

    if name in ("resnet18", "mobilenet_v2"):  # torchvision's, at its stock 224 x 224
        m = getattr(torchvision_module().models, name)(weights=None)
        return (m.eval(), (torch.randn(B, 3, 224, 224),), ["pixel_values"], ["logits"],
                {"pixel_values": {0: "batch"}, "logits": {0: "batch"}})

    if name.startswith("tv-"):
        m = _torchvision_model(name).eval()
        side = TV_IMAGE[name]
        if name == "tv-deeplabv3":
            return segmentation(m, torch.randn(B, 3, side, side))
        if name == "tv-ssdlite":  # one image in, its boxes, scores and labels out
            class Det(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.m = m

                def forward(self, image):
                    o = self.m([image[0]])[0]
                    return o["boxes"], o["scores"], o["labels"]
            return (Det(), (torch.rand(1, 3, side, side),), ["image"],
                    ["boxes", "scores", "labels"], {})
        return (m, (torch.randn(B, 3, side, side),), ["pixel_values"], ["logits"],
                {"pixel_values": {0: "batch"}, "logits": {0: "batch"}})

    import transformers as tf

    if name == "bert":
        cfg = tf.BertConfig(vocab_size=SIZE["vocab"], hidden_size=SIZE["hidden"],
                            num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=SIZE["ffn"],
                            max_position_embeddings=SIZE["positions"])
        return bert_encoder(tf.BertModel(cfg).eval(), ids(B, S))

    if name in ("gpt2", "gpt2-past"):
        cfg = tf.GPT2Config(vocab_size=SIZE["vocab"], n_embd=SIZE["hidden"], n_layer=2, n_head=2,
                            n_positions=2 * SIZE["positions"])
        inner = tf.GPT2LMHeadModel(cfg).eval()
        if name == "gpt2":
            return causal_lm(inner, ids(B, S))

        return decode_step(inner, cfg, cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head,
                           ids(B, 3), past=5)

    if name == "t5":
        cfg = tf.T5Config(vocab_size=1000, d_model=64, d_kv=32, d_ff=128, num_layers=2,
                          num_decoder_layers=2, num_heads=2, decoder_start_token_id=0)
        inner = tf.T5ForConditionalGeneration(cfg).eval()

        class T5(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = inner

            def forward(self, input_ids, attention_mask, decoder_input_ids):
                return self.m(input_ids=input_ids, attention_mask=attention_mask,
                              decoder_input_ids=decoder_input_ids, use_cache=False).logits

        bs, dec = {0: "batch", 1: "seq"}, {0: "batch", 1: "dec_seq"}
        return (T5(), (ids(B, S), torch.ones(B, S, dtype=torch.int64), ids(B, 5)),
                ["input_ids", "attention_mask", "decoder_input_ids"], ["logits"],
                {"input_ids": bs, "attention_mask": bs, "decoder_input_ids": dec,
                 "logits": dec})

    if name == "whisper-encoder":
        # Whisper's encoder insists on 2 * max_source_positions frames: only batch varies
        cfg = tf.WhisperConfig(vocab_size=1000, d_model=64, encoder_layers=2,
                               encoder_attention_heads=2, decoder_layers=2,
                               decoder_attention_heads=2, encoder_ffn_dim=128,
                               decoder_ffn_dim=128, num_mel_bins=80, max_source_positions=50,
                               pad_token_id=0, bos_token_id=1, eos_token_id=2,
                               decoder_start_token_id=1)
        return whisper_encoder(tf.WhisperModel(cfg).get_encoder().eval(), B)

    if name == "clip-text":
        cfg = tf.CLIPTextConfig(vocab_size=1000, hidden_size=64, intermediate_size=128,
                                num_hidden_layers=2, num_attention_heads=2,
                                max_position_embeddings=77)
        inner = tf.CLIPTextModel(cfg).eval()

        class Clip(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = inner

            def forward(self, input_ids, attention_mask):
                o = self.m(input_ids=input_ids, attention_mask=attention_mask)
                return o.last_hidden_state, o.pooler_output

        bs = {0: "batch", 1: "seq"}
        return (Clip(), (ids(B, S), torch.ones(B, S, dtype=torch.int64)),
                ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"],
                {"input_ids": bs, "attention_mask": bs, "last_hidden_state": bs,
                 "pooler_output": {0: "batch"}})

    if name == "vit":
        cfg = tf.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=128, image_size=32, patch_size=8)
        inner = tf.ViTModel(cfg).eval()

        class Vit(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = inner

            def forward(self, pixel_values):
                o = self.m(pixel_values=pixel_values)
                return o.last_hidden_state, o.pooler_output

        return (Vit(), (torch.randn(B, 3, 32, 32),), ["pixel_values"],
                ["last_hidden_state", "pooler_output"],
                {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"},
                 "pooler_output": {0: "batch"}})

    raise SystemExit(f"unknown model {name!r}")


def _rename_dims(path: Path, axes: dict[str, dict[int, str]]) -> None:
    """Give the graph inputs' and outputs' symbolic axes the names in ``axes`` (the dynamo
    exporter names them s0, s1, ... in some versions); every other dim_param that used the
    old name (value infos) is renamed with it, as a whole word."""
    import onnx
    model = onnx.load(str(path))
    g = model.graph
    rename: dict[str, str] = {}
    for vi in list(g.input) + list(g.output):
        for axis, want in axes.get(vi.name, {}).items():
            dims = vi.type.tensor_type.shape.dim
            if axis < len(dims) and dims[axis].dim_param and dims[axis].dim_param != want:
                rename.setdefault(dims[axis].dim_param, want)
    if not rename:
        return
    word = re.compile(r"\b(" + "|".join(map(re.escape, rename)) + r")\b")
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_param = word.sub(lambda m: rename[m.group(1)], d.dim_param)
    onnx.save(model, str(path))


def export_one(name: str, exporter: str, out: Path) -> str:
    """Export ``name`` with ``exporter`` to OUT/<name>-<exporter>.onnx; '' or the error."""
    import torch
    # nn.MultiheadAttention's eval-mode fast path is one op no exporter knows
    # (aten::_native_multi_head_attention): torchvision's ViT and Swin would not export
    torch.backends.mha.set_fastpath_enabled(False)
    module, args, inputs, outputs, axes = build(name)
    path = out / f"{name}-{exporter}.onnx"
    with torch.no_grad():
        if exporter == "ts":
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=OPSET[exporter],
                              input_names=inputs, output_names=outputs,
                              dynamic_axes=axes, do_constant_folding=True)
        else:
            dims: dict[str, object] = {}

            def dim(n):
                return dims.setdefault(n, torch.export.Dim(n, min=1, max=4096))
            shapes = tuple({a: dim(n) for a, n in axes.get(i, {}).items()} or None
                           for i in inputs)
            shapes = _as_signature(module, shapes)
            prog = torch.onnx.export(module, args, dynamo=True, opset_version=OPSET[exporter],
                                     input_names=inputs, output_names=outputs,
                                     dynamic_shapes=shapes, external_data=False)
            prog.save(str(path), external_data=False)
    _rename_dims(path, axes)
    return ""


def _as_signature(module, shapes: tuple) -> tuple:
    """``shapes`` (one per flat input) grouped as ``module.forward`` takes its arguments:
    the inputs a ``*args`` parameter takes become one tuple (torch.export matches the
    structure of the call)."""
    import inspect
    params = list(inspect.signature(module.forward).parameters.values())
    for k, p in enumerate(params):
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            return (*shapes[:k], tuple(shapes[k:]))
    return shapes


def export_logged(names, exporters, out: Path, log_path: Path, verbose: bool) -> dict:
    """Each model of ``names`` through each exporter (:func:`export_one`, which builds
    through this module's ``build``), one line printed and the log at ``log_path``
    (read first, written after each export) updated per export: its error or "" and its
    seconds. An export that fails stays in the log, its file removed. Returns the log."""
    import traceback
    log = json.loads(log_path.read_text()) if log_path.exists() else {}
    for name in names:
        for exporter in exporters:
            t0 = time.perf_counter()
            try:
                err = export_one(name, exporter, out)
            except Exception as exc:  # an export that fails stays in the table
                (out / f"{name}-{exporter}.onnx").unlink(missing_ok=True)
                err = _export_reason(exc)
                if verbose:
                    traceback.print_exc()
            log[f"{name}-{exporter}"] = {"model": name, "exporter": exporter, "error": err,
                                         "seconds": round(time.perf_counter() - t0, 1)}
            print(f"{name}-{exporter}: {'ok' if not err else err}", flush=True)
            log_path.write_text(json.dumps(log, indent=1))
    return log


def cmd_export(ns) -> int:
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    names = ns.models.split(",") if ns.models else list(MODELS)
    if ns.tiny:
        SIZE.update(TINY)
    log_path = out / "export.json"
    log = export_logged(names, ns.exporters.split(","), out, log_path, ns.verbose)
    import torch
    import transformers
    import onnx
    meta = log.setdefault("_versions", {})
    meta.update(torch=torch.__version__, transformers=transformers.__version__,
                onnx=onnx.__version__)
    try:
        import onnxscript
        meta["onnxscript"] = onnxscript.__version__
    except ImportError:
        pass
    if any(n.startswith("tv-") for n in names):
        meta["torchvision"] = torchvision_module().__version__
    log_path.write_text(json.dumps(log, indent=1))
    return 0


# ====================================================================== run (graphmem side)


# the terminal colours torch.export puts into its messages
ANSI = re.compile(r"\x1b?\[[0-9;]*m")


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


def _export_reason(exc: BaseException) -> str:
    """Why an export failed, in one line: the exception that started it (the dynamo
    exporter wraps torch.export's own error in a TorchExportError whose first lines are
    advice), its first paragraph and the line of code it names (``Caused by: ...``)."""
    root, seen = exc, {id(exc)}
    while root.__cause__ is not None and id(root.__cause__) not in seen:
        root = root.__cause__
        seen.add(id(root))
    text = ANSI.sub("", str(root))
    head = text.split("\n\n")[0]
    where = next((ln.strip() for ln in text.splitlines() if ln.startswith("Caused by:")), "")
    return _one_line(f"{type(root).__name__}: {head}" + (f" {where}" if where else ""))


def _failure_line(proc) -> str:
    """The line that says why a command failed: its `graphmem:` line, else its last line."""
    lines = [ln for ln in (proc.stderr + "\n" + proc.stdout).splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("graphmem:"):
            return _one_line(ln)
    return _one_line(lines[-1]) if lines else f"exit {proc.returncode}, no output"


def _dim_args(dims: dict[str, int]) -> list[str]:
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]


def _model_dims(path: Path) -> set[str]:
    """The symbolic dim names of the graph inputs (read without weights)."""
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    return {d.dim_param for vi in m.graph.input if vi.name not in inits
            for d in vi.type.tensor_type.shape.dim if d.dim_param}


class Runner:
    def __init__(self, timeout: float, log):
        self.timeout = timeout
        self.log = log

    def __call__(self, argv: list) -> subprocess.CompletedProcess:
        argv = [str(a) for a in argv]
        shown = " ".join(argv)
        self.log(f"  $ {shown}")
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            proc = subprocess.CompletedProcess(argv, 124, "", f"timed out after {self.timeout:.0f} s")
        proc.seconds = time.perf_counter() - t0
        proc.shown = shown
        return proc


def gm(*args) -> list[str]:
    return [sys.executable, "-m", "graphmem", *map(str, args)]


def run_one(path: Path, name: str, runner: Runner, work: Path) -> dict:
    """Every command on one file; the row for the table and the failures."""
    first, second, differentiable = MODELS[name]
    have = _model_dims(path)
    dims = {k: v for k, v in first.items() if k in have}
    dims2 = {k: v for k, v in second.items() if k in have}
    row: dict = {"file": path.name, "dims": dims, "failures": []}
    extra = sorted(have - set(first))
    if extra:
        row["note"] = f"input dims not in the table: {', '.join(extra)}"
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    row["nodes"] = len(m.graph.node)
    row["opset"] = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)

    def fail(step, proc, message=None):
        row["failures"].append({"step": step, "command": proc.shown if proc else "",
                                "message": message or _failure_line(proc)})

    d = _dim_args(dims)
    plan = work / f"{path.stem}.plan.json"
    p = runner(gm("plan", path, *d, "-o", plan, "--quiet"))
    row["plan"] = p.returncode == 0
    if p.returncode == 0:
        info = json.loads(plan.read_text())
        row["arena"] = info.get("stats", {}).get("arena_bytes", info.get("arena_bytes"))
        row["plan_s"] = round(p.seconds, 1)
    else:
        fail("plan", p)

    if row["plan"]:
        code = ("import sys, json, graphmem\n"
                "g = graphmem.load(sys.argv[1], dims=json.loads(sys.argv[3]))\n"
                "graphmem.validate(graphmem.Plan.load(sys.argv[2]), g)\n"
                "print('valid')\n")
        p = runner([sys.executable, "-c", code, path, plan, json.dumps(dims)])
        row["validate"] = p.returncode == 0
        if p.returncode:
            fail("validate", p)
        p = runner(gm("verify", path, *d, "--plan", plan))
        row["verify"] = p.returncode == 0
        if p.returncode:
            fail("verify", p)

    p = runner(gm("report", path, *d, "--json"))
    rep = _json(p)
    row["report"] = rep is not None
    if rep is None:
        fail("report", p)
    else:
        row["params"] = rep["totals"].get("params")
        row["weight_bytes"] = rep["totals"].get("weight_bytes")
    p = runner(gm("report", path, *_dim_args(dims2), "--json", "--no-layers"))
    rep2 = _json(p)
    if rep2 is None:
        fail("report@2", p)
        row["stable"] = None
    elif rep is not None:
        a = (rep["totals"].get("params"), rep["totals"].get("weight_bytes"))
        b = (rep2["totals"].get("params"), rep2["totals"].get("weight_bytes"))
        row["stable"] = a == b
        if a != b:
            row["failures"].append({"step": "params", "command": p.shown, "message":
                                    f"params/weight bytes {a} at {dims} but {b} at {dims2}"})

    p = runner(gm("fit", path, *d, "--budget", "1GiB", "--json"))
    fit = _json(p)
    row["fit"] = fit["batch"] if fit is not None else None
    if fit is None:
        fail("fit", p)

    if differentiable:
        tdims = dict(dims)
        if "batch" in tdims:
            tdims["batch"] = TRAIN_BATCH
        p = runner(gm("train", path, *_dim_args(tdims), "--json"))
        tr = _json(p)
        row["train"] = tr is not None
        if tr is None:
            fail("train", p)
        else:
            row["train_arena"] = tr.get("arena_bytes")

    p = runner([sys.executable, "-m", __spec__.name, "ort-arena", path,
                json.dumps(dims)])
    ort = _json(p)
    if ort is None:
        fail("ort-arena", p)
        ort = {}
    row["ort"] = ort
    return row


def _json(proc):
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout)
    except ValueError:
        lines = proc.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1]) if lines else None
        except ValueError:
            return None


def cmd_ort_arena(ns) -> int:
    """graphmem's intermediates-only arena and ONNX Runtime's pattern block (off / on), as
    tools/bench/zoo.py measures them, on the model bound to ``dims``. One JSON line."""
    import graphmem
    from tools.bench.zoo import folded_model, intermediates_arena
    from graphmem.frontend.reader import bind_dims
    from graphmem.plan.io import write_atomic
    from tools.bench import ort_pattern
    path = Path(ns.model)
    dims = json.loads(ns.dims)
    graph = graphmem.load(path, dims=dims)
    out = {"graphmem_io": intermediates_arena(graph)}
    try:
        model = folded_model(path, graph)
    except Exception as exc:  # a folded constant without a value: ORT folds it itself
        from graphmem.frontend.reader import read_model
        model = read_model(path, load_weights=True)
        out["note"] = f"not folded ({type(exc).__name__}: {_one_line(exc, 120)})"
    bind_dims(model, dims)
    for o in model.graph.output:  # ort_pattern pre-binds the outputs: give it their shapes
        if o.name in graph.tensors:
            shape = o.type.tensor_type.shape
            shape.ClearField("dim")
            for d in graph.tensors[o.name].shape:
                shape.dim.add().dim_value = int(d)
    with tempfile.TemporaryDirectory() as tmp:
        folded = Path(tmp) / path.name
        write_atomic(folded, model.SerializeToString())
        for opt in ("off", "on"):
            m = ort_pattern.measure(folded, opt == "on")
            out[f"ort_{opt}"] = m.get("pattern_bytes")
            out[f"ort_{opt}_note"] = m.get("error", "")
            out["ort_version"] = m.get("version")
    print(json.dumps(out))
    return 0


def _mib(v) -> str:
    return "–" if v is None else f"{v / 2**20:.2f}"


def _mark(v) -> str:
    return {True: "PASS", False: "FAIL", None: "–"}[v] if isinstance(v, (bool, type(None))) else str(v)


def _cell(message: str, limit: int = 160) -> str:
    """A failure for a table cell: ONNX Runtime's source location and C++ signature
    dropped, cut to ``limit`` characters (the list below the table has it whole)."""
    message = re.sub(r" Status Message: /\S+ virtual .*$", " (graphmem cuts ONNX Runtime's "
                     "message here)", message)
    return message if len(message) <= limit else message[:limit - 1] + "…"


def table(rows: list[dict], exports: dict) -> str:
    head = ("| model | exporter | nodes | plan | arena MiB | graphmem I/O-excl. MiB | "
            "ORT off MiB | ORT on MiB | validate | verify | report | fit (1 GiB) | train | "
            "params stable | params | first failure |")
    lines = [head, "|---|---|---:|---|---:|---:|---:|---:|---|---|---|---:|---|---|---:|---|"]
    for r in rows:
        ort = r.get("ort", {})
        fails = r.get("failures", [])
        first = fails[0] if fails else None
        reason = (f"`{first['step']}`: {_cell(first['message'])}" if first else "")
        if len(fails) > 1:
            reason += f" (+{len(fails) - 1} more below)"
        reason = reason.replace("|", "\\|")
        if r.get("export_error"):
            lines.append(f"| {r['model']} | {r['exporter']} | – | – | – | – | – | – | – | – | – "
                         f"| – | – | – | – | export: {r['export_error'].replace('|', chr(92) + '|')} |")
            continue
        lines.append(
            f"| {r['model']} | {r['exporter']} | {r.get('nodes', '–')} | {_mark(r.get('plan'))} | "
            f"{_mib(r.get('arena'))} | {_mib(ort.get('graphmem_io'))} | {_mib(ort.get('ort_off'))}{' †' if ort.get('note') else ''} | "
            f"{_mib(ort.get('ort_on'))}{' †' if ort.get('note') else ''} | {_mark(r.get('validate'))} | {_mark(r.get('verify'))} | "
            f"{_mark(r.get('report'))} | {r['fit'] if r.get('fit') is not None else 'FAIL'} | "
            f"{_mark(r.get('train'))} | {_mark(r.get('stable'))} | "
            f"{r.get('params') if r.get('params') is not None else '–'} | {reason} |")
    return "\n".join(lines)


def cmd_run(ns) -> int:
    src = Path(ns.dir)
    exports = {}
    if (src / "export.json").exists():
        exports = json.loads((src / "export.json").read_text())
    names = ns.models.split(",") if ns.models else list(MODELS)
    rows = []

    def log(msg):
        print(msg, file=sys.stderr, flush=True)
    runner = Runner(ns.timeout, log)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for exporter in EXPORTERS:
                key = f"{name}-{exporter}"
                path = src / f"{key}.onnx"
                if not path.exists():
                    err = exports.get(key, {}).get("error") or "not exported"
                    rows.append({"model": name, "exporter": exporter, "export_error": err})
                    log(f"{key}: not exported: {err}")
                    continue
                log(f"{key}:")
                row = run_one(path, name, runner, Path(tmp))
                for f in row["failures"]:  # the doc names the folders, not this run's
                    f["command"] = f["command"].replace(tmp + os.sep, "").replace(
                        str(src) + os.sep, "DIR/")
                row.update(model=name, exporter=exporter)
                rows.append(row)
                for f in row["failures"]:
                    log(f"  FAIL {f['step']}: {f['message']}")
    body = table(rows, exports)
    versions = exports.get("_versions", {})
    import onnxruntime
    made = ("Generated by `python -m tools.corpus.export_corpus run DIR --write` from "
            "`python -m tools.corpus.export_corpus export --out DIR`"
            + (f" (torch {versions.get('torch')}, torchvision "
               f"{versions.get('torchvision', 'n/a')}, transformers "
               f"{versions.get('transformers')}, onnxscript "
               f"{versions.get('onnxscript', 'n/a')})" if versions else "")
            + f"; onnxruntime {onnxruntime.__version__}. Bindings: "
            + "; ".join(f"{n} " + (" ".join(f"{k}={v}" for k, v in MODELS[n][0].items())
                                   or "(fixed shapes)") for n in names) + ".")
    failures = ["", "Failures (step, command, message):", ""]
    for r in rows:
        for f in r.get("failures", []):
            failures.append(f"- {r['model']}-{r['exporter']} `{f['step']}`: "
                            f"`{_short(f['command'])}` — {f['message']}")
        if r.get("export_error"):
            failures.append(f"- {r['model']}-{r['exporter']} export — {r['export_error']}")
    made += ("\n\nMiB = 2^20 bytes. *arena*: `graphmem plan`'s arena (inputs and outputs "
             "inside it). *graphmem I/O-excl.* beside *ORT off/on*: the method of "
             "`tools/bench/zoo.py` (file order, in-place only, graph inputs and outputs left "
             "out, as ONNX Runtime's memory pattern has them; ORT's pattern block measured "
             "by `tools/bench/ort_pattern.py` with graph optimizations off and on, on the model "
             "with graphmem's folded constants as initializers). † the folded model could "
             "not be built (a folded constant without a value, see the failures): ORT got "
             "the model unfolded. *fit*: the largest batch within 1 GiB. *params stable*: "
             f"`report --json` gives the same weight bytes and parameter count at the "
             f"second binding (batch and sequence doubled). *train*: batch {TRAIN_BATCH}.")
    full = made + "\n\n" + body + ("\n" + "\n".join(failures) if len(failures) > 3 else "")
    from tools.docs.sections import publish
    return publish(DOC, SECTION, full, ns.write, rows, ns.json)


def _short(command: str) -> str:
    """A command as the doc shows it: no interpreter or checkout path of this machine."""
    return command.replace(sys.executable + " -m graphmem", "graphmem").replace(
        sys.executable, "python").replace(str(ROOT) + os.sep, "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="export every model (needs torch and transformers)")
    e.add_argument("--out", required=True)
    e.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    e.add_argument("--exporters", default=",".join(EXPORTERS))
    e.add_argument("--tiny", action="store_true",
                   help="hidden 32, vocabulary 100 (BERT and GPT-2: the test fixtures)")
    e.add_argument("-v", "--verbose", action="store_true")
    e.set_defaults(func=cmd_export)
    r = sub.add_parser("run", help="run graphmem's commands on every exported file")
    r.add_argument("dir")
    r.add_argument("--models")
    r.add_argument("--timeout", type=float, default=300)
    r.add_argument("--write", action="store_true", help="rewrite the table in docs/corpus.md")
    r.add_argument("--json", metavar="PATH", help="also write every row as JSON")
    r.set_defaults(func=cmd_run)
    o = sub.add_parser("ort-arena", help=argparse.SUPPRESS)
    o.add_argument("model")
    o.add_argument("dims")
    o.set_defaults(func=cmd_ort_arena)
    ns = ap.parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
