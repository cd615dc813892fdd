"""Full-size exports for issue 33's bar: the stock sizes of the families the corpus
(tools/corpus/export_corpus.py) exports small, random weights, both PyTorch exporters.

    # in a venv with torch, torchvision, transformers, onnx, onnxscript (not graphmem's):
    HF_HUB_OFFLINE=1 python -m tools.corpus.export_fullsize DIR [--models resnet50,bert-base] \
        [--exporters ts,dynamo]

Writes DIR/<model>-<exporter>.onnx (``ts``: ``torch.onnx.export(..., dynamo=False)``,
opset 17; ``dynamo``: ``dynamo=True``, opset 18; weights inside the file), DIR/export.json
(what failed, seconds, versions) and DIR/fullsize.json (each model's ``--dim`` bindings and
the transformer optimizer's model type, read by ``python -m tools.corpus.deploy_forms fullsize``).
Nothing is downloaded: every model is built from its config with seeded random weights.

Models (:data:`FULL`): torchvision's resnet50, vit_b_16, convnext_tiny,
efficientnet_v2_s (224 x 224) and deeplabv3_resnet50 (520 x 520, output ``out`` only);
transformers' BERT-base (``BertConfig()``), GPT-2 small and medium (``GPT2Config()``,
medium's n_embd 1024, 24 layers, 16 heads; logits without cache), a Llama-style decoder
with grouped-query attention (TinyLlama-1.1B's dims -- hidden 2048, 32 heads, 4 key/value
heads, intermediate 5632, vocabulary 32000 -- with 2 layers), Whisper-tiny's encoder
(``WhisperConfig()``: d_model 384, 4 layers, 6 heads, 80 x 3000 log-mel frames) and
T5-small's encoder (``T5Config()``: d_model 512, 6 layers, 8 heads); and one decode step
with its key/value cache of GPT-2 small and of the Llama-style decoder (``gpt2-decode``,
``llama-gqa-decode``: ``past_seq`` 128, the present cache's length an expression).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


# name -> (--dim bindings, transformer optimizer model type or None, CNN (int8 QDQ form)?)
FULL: dict[str, tuple[dict[str, int], str | None, bool]] = {
    "whisper-tiny-encoder": ({"batch": 1}, "bart", False),
    "resnet50": ({"batch": 1}, None, True),
    "bert-base": ({"batch": 1, "seq": 128}, "bert", False),
    "gpt2": ({"batch": 1, "seq": 128}, "gpt2", False),
    "llama-gqa": ({"batch": 1, "seq": 128}, "gpt2", False),
    "t5-small-encoder": ({"batch": 1, "seq": 128}, "t5", False),
    "vit_b_16": ({"batch": 1}, "vit", False),
    "convnext_tiny": ({"batch": 1}, None, True),
    "efficientnet_v2_s": ({"batch": 1}, None, True),
    "deeplabv3_resnet50": ({"batch": 1}, None, True),
    "gpt2-medium": ({"batch": 1, "seq": 128}, "gpt2", False),
    "gpt2-decode": ({"batch": 1, "seq": 1, "past_seq": 128}, "gpt2", False),
    "llama-gqa-decode": ({"batch": 1, "seq": 1, "past_seq": 128}, "gpt2", False),
}
SIDE = {"deeplabv3_resnet50": 520}
# what builds each model (the table in docs/corpus.md says it)
MADE_BY = {
    "whisper-tiny-encoder": "transformers `WhisperModel(WhisperConfig()).get_encoder()` "
                            "(Whisper-tiny: d_model 384, 4 layers, 6 heads), 80 x 3000 frames",
    "resnet50": "torchvision `resnet50(weights=None)`, 224 x 224",
    "bert-base": "transformers `BertModel(BertConfig())` (BERT-base), pooler output too",
    "gpt2": "transformers `GPT2LMHeadModel(GPT2Config())` (GPT-2 small), logits, no cache",
    "llama-gqa": "transformers `LlamaForCausalLM`, TinyLlama-1.1B's dims (hidden 2048, 32 "
                 "heads, 4 key/value heads, intermediate 5632, vocabulary 32000), 2 layers, "
                 "logits, no cache",
    "t5-small-encoder": "transformers `T5EncoderModel(T5Config())` (T5-small's encoder)",
    "vit_b_16": "torchvision `vit_b_16(weights=None)`, 224 x 224",
    "convnext_tiny": "torchvision `convnext_tiny(weights=None)`, 224 x 224",
    "efficientnet_v2_s": "torchvision `efficientnet_v2_s(weights=None)`, 224 x 224",
    "deeplabv3_resnet50": "torchvision `segmentation.deeplabv3_resnet50(weights=None, "
                          "aux_loss=False)`, 520 x 520, output `out`",
    "gpt2-medium": "transformers `GPT2LMHeadModel`, GPT-2 medium's config (n_embd 1024, "
                   "24 layers, 16 heads), logits, no cache",
    "gpt2-decode": "GPT-2 small as `gpt2`, one decode step: new tokens and the 12 layers' "
                   "key/value cache in, logits and the grown cache out",
    "llama-gqa-decode": "the Llama-style decoder of `llama-gqa`, one decode step: new "
                        "tokens and the cache (4 key/value heads) in, logits and the "
                        "grown cache out",
}


def build(name: str):
    """(module, example args, input names, output names, {input or output: {axis: name}})."""
    import torch
    from torch import nn

    from tools.corpus import export_corpus
    torch.manual_seed(0)
    B, S = 2, 8
    img = {"pixel_values": {0: "batch"}, "logits": {0: "batch"}}

    if name in ("resnet50", "vit_b_16", "convnext_tiny", "efficientnet_v2_s",
                "deeplabv3_resnet50"):
        models = export_corpus.torchvision_module().models
        side = SIDE.get(name, 224)
        if name == "deeplabv3_resnet50":
            m = models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None,
                                                        aux_loss=False).eval()
            return export_corpus.segmentation(m, torch.randn(B, 3, side, side))
        m = getattr(models, name)(weights=None).eval()
        return m, (torch.randn(B, 3, side, side),), ["pixel_values"], ["logits"], img

    import transformers as tf

    def ids(*shape, high=1000):
        return torch.randint(0, high, shape, dtype=torch.int64)
    bs = {0: "batch", 1: "seq"}

    if name == "bert-base":
        return export_corpus.bert_encoder(tf.BertModel(tf.BertConfig()).eval(), ids(B, S))

    if name in ("gpt2", "gpt2-medium", "llama-gqa", "gpt2-decode", "llama-gqa-decode"):
        if name in ("gpt2", "gpt2-decode"):
            cfg = tf.GPT2Config()
        elif name == "gpt2-medium":
            cfg = tf.GPT2Config(n_embd=1024, n_layer=24, n_head=16)
        else:
            cfg = tf.LlamaConfig(
                hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                max_position_embeddings=2048)
        inner = (tf.GPT2LMHeadModel if name.startswith("gpt2") else tf.LlamaForCausalLM)(cfg)
        if name.endswith("-decode"):
            heads = cfg.num_attention_heads
            kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
            return export_corpus.decode_step(inner.eval(), cfg, cfg.num_hidden_layers,
                                             kv_heads, cfg.hidden_size // heads,
                                             ids(B, 3), past=5)
        return export_corpus.causal_lm(inner.eval(), ids(B, S))

    if name == "t5-small-encoder":
        inner = tf.T5EncoderModel(tf.T5Config()).eval()

        class T5(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = inner

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids,
                              attention_mask=attention_mask).last_hidden_state
        return (T5(), (ids(B, S), torch.ones(B, S, dtype=torch.int64)),
                ["input_ids", "attention_mask"], ["last_hidden_state"],
                {"input_ids": bs, "attention_mask": bs, "last_hidden_state": bs})

    if name == "whisper-tiny-encoder":
        return export_corpus.whisper_encoder(
            tf.WhisperModel(tf.WhisperConfig()).get_encoder().eval(), B)

    raise SystemExit(f"unknown model {name!r}")


def main(argv=None) -> int:
    from tools.corpus import export_corpus
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--models", default=",".join(FULL))
    ap.add_argument("--exporters", default="ts,dynamo")
    ap.add_argument("-v", "--verbose", action="store_true")
    ns = ap.parse_args(argv)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fullsize.json").write_text(json.dumps(
        {m: {"dims": d, "model_type": t, "cnn": c, "made_by": MADE_BY[m]}
         for m, (d, t, c) in FULL.items()}, indent=1))
    log_path = out / "export.json"
    export_corpus.build = build  # export_one builds through the module's build()
    log = export_corpus.export_logged(ns.models.split(","), ns.exporters.split(","), out,
                                      log_path, ns.verbose)
    import onnx
    import torch
    import transformers
    log["_versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                        "onnx": onnx.__version__,
                        "torchvision": export_corpus.torchvision_module().__version__}
    log_path.write_text(json.dumps(log, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
