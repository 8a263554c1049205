"""Model-zoo sweep: unmodified ``transformers`` models through ``pyjit.jit`` on CPU.

For each model family that installs and builds from a tiny config (random weights, no
downloads: 2 layers, hidden 32-64, sequence 8-16, vocabulary 100), three modes run with
``pyjit.jit(model)`` and pyjit's default backend (its own compiler; C++ on CPU):

- ``infer``: ``model.eval()`` under ``torch.no_grad()``, two calls, every tensor leaf of the
  output compared with eager (``torch.testing.assert_close``, atol=rtol=1e-4 in fp32);
- ``infer_grad``: the same with grad enabled (parameters require grad);
- ``train``: ``model.train()`` (dropout probabilities set to 0 in the config), one forward,
  a scalar loss (the model's own loss where labels are easy to build, else the sum of the
  float outputs), ``loss.backward()``; the loss, every parameter's ``.grad`` and every buffer
  (batch-norm running statistics) compared with an eager copy of the model.

Each (model, mode) gets a status: ``OK``, ``WRONG`` (a mismatch: the first differing leaf),
``ERROR`` (an exception reached the program: its first line and the deepest frame of library
or user code, ``file:line``), or ``BUILD`` (the config or model failed to build, with why).
Recorded beside it: the number of graphs compiled, the graph breaks (kind, explanation,
``file:line``; from pyjit's frame observers, what ``pyjit.explain`` reports), the graphs the
backend ran as captured (``pyjit.backend.metrics.eager_graphs``), and the warnings of the
``fallbacks`` log channel (a frame pyjit failed to compile, a compiled graph that raised).

Usage::

    python -m bench.model_zoo                          # every model, every mode
    python -m bench.model_zoo --models gpt2,bert --modes infer,train --json out.json
    python -m bench.model_zoo --device cuda --jobs 8   # on the GPU machine, 8 models at once

Each model runs in its own subprocess (a crash or a hang costs that model only; ``--inline``
runs in this process, for debugging). ``docs/model_zoo.md`` holds the latest table.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import copy
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

MODES = ("infer", "infer_grad", "train")
ATOL = RTOL = 1e-4

# -- model builders ---------------------------------------------------------------------------
# Each returns (model, kwargs of the call without labels, labels kwargs for the train loss).

Built = tuple[Any, dict[str, Any], dict[str, Any]]
V, B, T = 100, 2, 8  # vocabulary, batch, sequence


def _ids(t: int = T) -> Any:
    import torch

    return torch.randint(0, V, (B, t))


def _lm(config_name: str, model_name: str, **cfg: Any) -> Callable[[], Built]:
    """A decoder-only causal LM: ``input_ids`` in, ``labels=input_ids`` for the train loss."""

    def build() -> Built:
        import transformers

        config = getattr(transformers, config_name)(vocab_size=V, **cfg)
        ids = _ids()
        return getattr(transformers, model_name)(_no_dropout(config)), {"input_ids": ids}, {"labels": ids}

    return build


def _encoder(config_name: str, model_name: str, labels: str, **cfg: Any) -> Callable[[], Built]:
    """A text encoder with a head: ``labels`` is ``seq`` (one class per sequence), ``token``
    (one per token) or ``mlm`` (masked LM: the input ids)."""

    def build() -> Built:
        import torch
        import transformers

        config = getattr(transformers, config_name)(vocab_size=V, **cfg)
        ids = _ids()
        kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        lab = {"seq": torch.randint(0, 2, (B,)), "token": torch.randint(0, 2, (B, T)), "mlm": ids}[labels]
        return getattr(transformers, model_name)(_no_dropout(config)), kwargs, {"labels": lab}

    return build


def _seq2seq(config_name: str, model_name: str, **cfg: Any) -> Callable[[], Built]:
    def build() -> Built:
        import transformers

        config = getattr(transformers, config_name)(vocab_size=V, **cfg)
        kwargs = {"input_ids": _ids(), "decoder_input_ids": _ids(5)}
        return getattr(transformers, model_name)(_no_dropout(config)), kwargs, {"labels": _ids(5)}

    return build


def _vision(config_name: str, model_name: str, image: int = 32, **cfg: Any) -> Callable[[], Built]:
    def build() -> Built:
        import torch
        import transformers

        config = getattr(transformers, config_name)(num_labels=3, **cfg)
        kwargs = {"pixel_values": torch.randn(B, 3, image, image)}
        return getattr(transformers, model_name)(_no_dropout(config)), kwargs, {"labels": torch.randint(0, 3, (B,))}

    return build


def _clip() -> Built:
    import torch
    import transformers

    text = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                max_position_embeddings=32)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                  patch_size=8)
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    kwargs = {"input_ids": _ids(), "pixel_values": torch.randn(B, 3, 32, 32)}
    return transformers.CLIPModel(_no_dropout(config)), kwargs, {"return_loss": True}


def _whisper() -> Built:
    import torch
    import transformers

    config = transformers.WhisperConfig(vocab_size=V, num_mel_bins=16, encoder_layers=2, decoder_layers=2,
                                        encoder_attention_heads=2, decoder_attention_heads=2, d_model=32,
                                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=8,
                                        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                        decoder_start_token_id=1, suppress_tokens=None, begin_suppress_tokens=None)
    # The encoder's two convolutions (stride 1 then 2) take 2 * max_source_positions frames.
    kwargs = {"input_features": torch.randn(B, 16, 16), "decoder_input_ids": _ids(5)}
    return transformers.WhisperForConditionalGeneration(_no_dropout(config)), kwargs, {"labels": _ids(5)}


def _wav2vec2() -> Built:
    import torch
    import transformers

    config = transformers.Wav2Vec2Config(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                         conv_kernel=(10, 3), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                                         num_labels=3)
    kwargs = {"input_values": torch.randn(B, 160)}
    return (transformers.Wav2Vec2ForSequenceClassification(_no_dropout(config)), kwargs,
            {"labels": torch.randint(0, 3, (B,))})


_DEC = dict(num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64)
_ENC = dict(num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64)

MODELS: dict[str, Callable[[], Built]] = {
    "gpt2": _lm("GPT2Config", "GPT2LMHeadModel", n_layer=2, n_head=2, n_embd=32, n_positions=64),
    "gpt_neo": _lm("GPTNeoConfig", "GPTNeoForCausalLM", num_layers=2, num_heads=2, hidden_size=32,
                   attention_types=[[["global", "local"], 1]], window_size=4, max_position_embeddings=64),
    "gptj": _lm("GPTJConfig", "GPTJForCausalLM", n_layer=2, n_head=2, n_embd=32, rotary_dim=8, n_positions=64),
    "opt": _lm("OPTConfig", "OPTForCausalLM", num_hidden_layers=2, num_attention_heads=2, hidden_size=32, ffn_dim=64,
               word_embed_proj_dim=32, max_position_embeddings=64),
    "bloom": _lm("BloomConfig", "BloomForCausalLM", n_layer=2, n_head=2, hidden_size=32),
    "falcon": _lm("FalconConfig", "FalconForCausalLM", num_hidden_layers=2, num_attention_heads=2, hidden_size=32),
    "phi": _lm("PhiConfig", "PhiForCausalLM", **_DEC),
    "qwen2": _lm("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=1, **_DEC),
    "mistral": _lm("MistralConfig", "MistralForCausalLM", num_key_value_heads=1, sliding_window=4, **_DEC),
    "gemma": _lm("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16, **_DEC),
    "llama": _lm("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **_DEC),
    "mixtral": _lm("MixtralConfig", "MixtralForCausalLM", num_key_value_heads=2, num_local_experts=4, **_DEC),
    "bert": _encoder("BertConfig", "BertForSequenceClassification", "seq", **_ENC),
    "roberta": _encoder("RobertaConfig", "RobertaForMaskedLM", "mlm", **_ENC),
    "distilbert": _encoder("DistilBertConfig", "DistilBertForSequenceClassification", "seq", n_layers=2, n_heads=2,
                           dim=32, hidden_dim=64),
    "albert": _encoder("AlbertConfig", "AlbertForMaskedLM", "mlm", embedding_size=16, **_ENC),
    "electra": _encoder("ElectraConfig", "ElectraForTokenClassification", "token", embedding_size=16, **_ENC),
    "deberta_v2": _encoder("DebertaV2Config", "DebertaV2ForSequenceClassification", "seq", **_ENC),
    "t5": _seq2seq("T5Config", "T5ForConditionalGeneration", num_layers=2, num_heads=2, d_model=32, d_ff=64, d_kv=16),
    "bart": _seq2seq("BartConfig", "BartForConditionalGeneration", encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=2, decoder_attention_heads=2, d_model=32, encoder_ffn_dim=64,
                     decoder_ffn_dim=64, max_position_embeddings=64),
    "vit": _vision("ViTConfig", "ViTForImageClassification", image_size=32, patch_size=8, **_ENC),
    "deit": _vision("DeiTConfig", "DeiTForImageClassification", image_size=32, patch_size=8, **_ENC),
    "swin": _vision("SwinConfig", "SwinForImageClassification", image_size=32, patch_size=4, embed_dim=16,
                    depths=[1, 1], num_heads=[1, 2], window_size=4),
    "convnext": _vision("ConvNextConfig", "ConvNextForImageClassification", num_stages=2, hidden_sizes=[16, 32], depths=[1, 1]),
    "resnet": _vision("ResNetConfig", "ResNetForImageClassification", embedding_size=16, hidden_sizes=[16, 32],
                      depths=[1, 1], layer_type="basic"),
    "clip": _clip,
    "whisper": _whisper,
    "wav2vec2": _wav2vec2,
}


def _no_dropout(config: Any) -> Any:
    """Every dropout / drop-path / layer-drop probability and SpecAugment masking probability of
    the config (and its sub-configs) set to 0, so that training is deterministic and comparable."""
    # Names vary by family: hidden_dropout_prob, attn_pdrop, drop_path_rate, layerdrop...
    for key, value in list(vars(config).items()):
        if isinstance(value, float) and ("drop" in key or key in ("mask_time_prob", "mask_feature_prob")):
            setattr(config, key, 0.0)
        elif hasattr(value, "to_dict") and hasattr(value, "model_type"):
            _no_dropout(value)
    return config


# -- comparison ---------------------------------------------------------------------------------

def _leaves(out: Any, path: str = "out") -> list[tuple[str, Any]]:
    """(path, leaf) for every leaf of a model output: ModelOutput fields, tuples, caches."""
    import transformers

    if isinstance(out, transformers.utils.ModelOutput):
        return [x for k, v in out.items() for x in _leaves(v, f"{path}.{k}")]
    if isinstance(out, (tuple, list)):
        return [x for i, v in enumerate(out) for x in _leaves(v, f"{path}[{i}]")]
    if isinstance(out, dict):
        return [x for k, v in out.items() for x in _leaves(v, f"{path}[{k!r}]")]
    if isinstance(out, transformers.cache_utils.Cache):
        layers = getattr(out, "layers", None)
        if layers is None:  # EncoderDecoderCache
            return (_leaves(getattr(out, "self_attention_cache", None), f"{path}.self")
                    + _leaves(getattr(out, "cross_attention_cache", None), f"{path}.cross"))
        return [x for i, layer in enumerate(layers)
                for x in ((f"{path}.layers[{i}].keys", getattr(layer, "keys", None)),
                          (f"{path}.layers[{i}].values", getattr(layer, "values", None)))]
    return [(path, out)]


def _mismatch(expected: Any, actual: Any) -> str | None:
    """None when every leaf matches, else the first difference (path and what differs)."""
    import torch

    exp, act = _leaves(expected), _leaves(actual)
    if [p for p, _ in exp] != [p for p, _ in act]:
        return f"structure differs: {[p for p, _ in exp][:5]} vs {[p for p, _ in act][:5]}"
    for (path, e), (_, a) in zip(exp, act):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"{path}: {type(a).__name__} instead of a tensor"
            try:
                torch.testing.assert_close(a, e, atol=ATOL, rtol=RTOL, equal_nan=True)
            except AssertionError as err:
                return f"{path}: {_first_lines(str(err), 4)}"
        elif type(e) is not type(a) or (isinstance(e, (int, float, str, bool, type(None))) and e != a):
            return f"{path}: {a!r} != eager {e!r}"
    return None


def _first_lines(text: str, n: int) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[:n] if line.strip())


def _scalar_loss(out: Any) -> Any:
    """The model's own loss when it returned one, else the sum of its float outputs."""
    import torch

    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    total = None
    for _, leaf in _leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad:
            total = leaf.sum() if total is None else total + leaf.sum()
    return total


# -- one (model, mode) ----------------------------------------------------------------------------

@dataclasses.dataclass
class Result:
    model: str
    mode: str
    status: str = "OK"            # OK / WRONG / ERROR / BUILD / SKIP
    detail: str = ""              # mismatch, exception line, or build failure
    where: str = ""               # file:line of the exception (library/user code)
    pyjit_where: str = ""         # deepest pyjit frame of the exception
    graphs: int = 0
    breaks: list[str] = dataclasses.field(default_factory=list)
    eager_graphs: list[str] = dataclasses.field(default_factory=list)
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0


class _Recorder(logging.Handler):
    """Collects the ``fallbacks`` channel's warnings while one (model, mode) runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(_first_lines(record.getMessage(), 2))


def _locate(exc: BaseException) -> tuple[str, str]:
    """(deepest frame outside pyjit/torch/stdlib: the library or user line that failed,
    deepest pyjit frame) of the exception's traceback."""
    import pyjit
    import torch

    pyjit_dir = os.path.dirname(pyjit.__file__)
    torch_dir = os.path.dirname(torch.__file__)
    user, ours = "", ""
    for fs in traceback.extract_tb(exc.__traceback__):
        loc = f"{fs.filename}:{fs.lineno}"
        if fs.filename.startswith(pyjit_dir):
            ours = f"{os.path.relpath(fs.filename, os.path.dirname(pyjit_dir))}:{fs.lineno} ({fs.name})"
        elif not fs.filename.startswith(torch_dir) and "/lib/python3" not in fs.filename.split("site-packages")[0]:
            user = loc.split("site-packages/")[-1]
    return user, ours


def _to_device(tree: Any, device: str) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, tree)


def run_one(name: str, mode: str, device: str = "cpu") -> Result:
    """Build ``name`` fresh (seeded, on the CPU), move it to ``device``, run ``mode`` eagerly
    and through ``pyjit.jit``, compare."""
    import torch

    import pyjit
    from pyjit.backend.metrics import metrics
    from pyjit.frame import policy

    res = Result(name, mode)
    torch.manual_seed(0)
    try:
        model, kwargs, labels = MODELS[name]()
        model, kwargs, labels = model.to(device), _to_device(kwargs, device), _to_device(labels, device)
    except Exception as e:  # noqa: BLE001 - a config that does not build is reported, not fatal
        res.status, res.detail = "BUILD", f"{type(e).__name__}: {_first_lines(str(e), 1)}"
        return res
    pyjit.reset()
    metrics.reset()
    eager_model = copy.deepcopy(model)  # same weights; its own buffers (batch-norm statistics)
    recorder = _Recorder()
    fallback_log = logging.getLogger("pyjit.fallbacks")
    fallback_log.addHandler(recorder)

    def observe(event: str, code: Any, detail: Any) -> None:
        if event == "compiled":
            res.graphs += detail.graph is not None
            gb = detail.graph_break
        elif event == "eager":
            gb = detail
        else:
            return
        if gb is not None:
            res.breaks.append(f"[{gb.kind}] {_first_lines(gb.explanation, 1)} at {gb.location}")

    policy._observers.append(observe)
    start = time.perf_counter()
    try:
        jitted = pyjit.jit(model)
        if mode == "train":
            model.train()
            eager_model.train()
            call = {**kwargs, **labels}
            expected = eager_model(**call)
            exp_loss = _scalar_loss(expected)
            exp_loss.backward()
            got = jitted(**call)
            loss = _scalar_loss(got)
            loss.backward()
            res.detail = _mismatch(expected, got) or _mismatch(exp_loss, loss) or _grad_mismatch(eager_model, model) or ""
        else:
            model.eval()
            eager_model.eval()
            ctx = torch.no_grad if mode == "infer" else torch.enable_grad
            with ctx():
                expected = eager_model(**kwargs)
                first = jitted(**kwargs)
                second = jitted(**kwargs)
            res.detail = _mismatch(expected, first) or ""
            if not res.detail and (m := _mismatch(expected, second)):
                res.detail = f"second call: {m}"
        if res.detail:
            res.status = "WRONG"
    except Exception as e:  # noqa: BLE001 - every failure is a row of the table
        res.status = "ERROR"
        res.detail = f"{type(e).__name__}: {_first_lines(str(e), 1)[:300]}"
        res.where, res.pyjit_where = _locate(e)
    finally:
        policy._observers.remove(observe)
        fallback_log.removeHandler(recorder)
        res.seconds = round(time.perf_counter() - start, 1)
    res.eager_graphs = [_first_lines(r, 1)[:300] for r in metrics.eager_graphs]
    res.fallbacks = recorder.messages
    pyjit.reset()
    return res


def _grad_mismatch(eager_model: Any, model: Any) -> str | None:
    """Every parameter's ``.grad`` and every buffer of the jitted model against eager's."""
    import torch

    for (n, pe), (_, p) in zip(eager_model.named_parameters(), model.named_parameters()):
        if (pe.grad is None) != (p.grad is None):
            return f"{n}.grad: {'missing' if p.grad is None else 'present'} (eager: {pe.grad is not None})"
        if pe.grad is not None:
            try:
                torch.testing.assert_close(p.grad, pe.grad, atol=ATOL, rtol=RTOL)
            except AssertionError as err:
                return f"{n}.grad: {_first_lines(str(err), 4)}"
    for (n, be), (_, b) in zip(eager_model.named_buffers(), model.named_buffers()):
        try:
            torch.testing.assert_close(b, be, atol=ATOL, rtol=RTOL)
        except AssertionError as err:
            return f"buffer {n}: {_first_lines(str(err), 4)}"
    return None


# -- the sweep ------------------------------------------------------------------------------------

def _run_isolated(name: str, modes: list[str], timeout: float, device: str) -> list[Result]:
    """One model in a subprocess (a crash or hang costs that model only)."""
    cmd = [sys.executable, "-m", "bench.model_zoo", "--inline", "--models", name, "--modes", ",".join(modes),
           "--device", device, "--json", "-"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [Result(name, m, "ERROR", f"timed out after {timeout:.0f}s") for m in modes]
    marker = "MODEL_ZOO_JSON:"
    for line in proc.stdout.splitlines():
        if line.startswith(marker):
            return [Result(**r) for r in json.loads(line[len(marker):])]
    tail = _first_lines("\n".join(proc.stderr.strip().splitlines()[-3:]), 3)
    return [Result(name, m, "ERROR", f"subprocess exited {proc.returncode}: {tail}") for m in modes]


def format_table(results: list[Result]) -> str:
    """A Markdown table: one row per (model, mode), then the details of every non-OK row."""
    rows = ["| model | mode | status | graphs | breaks | run as captured | fallbacks | s |",
            "|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.model} | {r.mode} | {r.status} | {r.graphs} | {len(r.breaks)} | {len(r.eager_graphs)} "
                     f"| {len(r.fallbacks)} | {r.seconds} |")
    notes = []
    for r in results:
        items = []
        if r.status != "OK":
            items.append(f"{r.status}: {r.detail}" + (f" (at {r.where}; pyjit {r.pyjit_where})" if r.where or r.pyjit_where else ""))
        items += [f"break: {b}" for b in dict.fromkeys(r.breaks)]
        items += [f"run as captured: {g}" for g in dict.fromkeys(r.eager_graphs)]
        items += [f"fallback: {f}" for f in dict.fromkeys(r.fallbacks)]
        if items:
            notes.append(f"- **{r.model} / {r.mode}**\n" + "\n".join(f"  - {i}" for i in items))
    return "\n".join(rows) + ("\n\n" + "\n".join(notes) if notes else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_zoo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ",".join(MODES))
    parser.add_argument("--json", default=None, help="write the results as JSON to this file ('-': stdout, marked)")
    parser.add_argument("--inline", action="store_true", help="run in this process (no subprocess per model)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model (subprocess mode)")
    parser.add_argument("--device", default="cpu", help="where the models run (cpu, cuda)")
    parser.add_argument("--jobs", type=int, default=1, help="models run at once (subprocess mode)")
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    modes = [m for m in args.modes.split(",") if m]
    unknown = [n for n in names if n not in MODELS] + [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown model/mode: {', '.join(unknown)}")
    results: list[Result] = []

    def run_model(name: str) -> list[Result]:
        if args.inline:
            return [run_one(name, mode, args.device) for mode in modes]
        return _run_isolated(name, modes, args.timeout, args.device)

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs if not args.inline else 1)) as pool:
        batches = pool.map(run_model, names)  # in order: the table follows --models
        for batch in batches:
            results.extend(batch)
            if args.json != "-":
                for r in batch:
                    print(f"{r.model:12s} {r.mode:10s} {r.status:6s} graphs={r.graphs} breaks={len(r.breaks)} "
                          f"captured={len(r.eager_graphs)} fallbacks={len(r.fallbacks)} {r.seconds}s "
                          f"{r.detail[:160]}", flush=True)
    payload = [dataclasses.asdict(r) for r in results]
    if args.json == "-":
        print("MODEL_ZOO_JSON:" + json.dumps(payload))
        return 0
    print()
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
