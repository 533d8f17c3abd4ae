"""`aotpack build SPEC --task text-generation --max-seq-len N --max-batch B`: the model SPEC
names, wrapped into the generation step (step.py), with its example inputs and dynamic dims
(B in 1..max_batch, S in 1..max_seq_len), ready for the frontend.

SPEC: a factory `file.py:fn` returning a transformers causal LM (or a module following the
convention in step.py), alone or as (model, anything); a `model.pt` saved with torch.save; or
a local folder holding a transformers checkpoint (config.json: loaded with
`AutoModelForCausalLM.from_pretrained`, nothing is downloaded).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from aotpack.errors import UserError
from aotpack.frontend.load import LoadedModel

TASKS = ("text-generation",)
DEFAULT_MAX_SEQ_LEN = 2048
DEFAULT_MAX_BATCH = 1


class GenerationTaskError(UserError):
    pass


@dataclass(frozen=True)
class GenerationOptions:
    max_seq_len: int = DEFAULT_MAX_SEQ_LEN
    max_batch: int = DEFAULT_MAX_BATCH

    def __post_init__(self):
        if not 1 <= self.max_batch <= 4096:
            raise GenerationTaskError(f"--max-batch {self.max_batch}: 1 to 4096")
        if not 2 <= self.max_seq_len <= 1 << 20:
            raise GenerationTaskError(f"--max-seq-len {self.max_seq_len}: 2 to {1 << 20}")

    @property
    def batch_range(self) -> int:
        """The batch the bundle serves: --max-batch, at least 2 (torch.export declares a
        dim over a range; the second cache row costs one sequence's cache)."""
        return max(2, self.max_batch)

    def to_json(self) -> dict:
        return {"task": "text-generation", "max_seq_len": self.max_seq_len,
                "max_batch": self.max_batch}

    @staticmethod
    def from_json(d: dict | None) -> "GenerationOptions | None":
        if not d or d.get("task") != "text-generation":
            return None
        return GenerationOptions(int(d["max_seq_len"]), int(d["max_batch"]))


def parse_task(task: str | None, max_seq_len: int | None,
               max_batch: int | None) -> GenerationOptions | None:
    if task is None:
        if max_seq_len is not None or max_batch is not None:
            raise GenerationTaskError("--max-seq-len and --max-batch go with "
                                      "--task text-generation")
        return None
    if task not in TASKS:
        raise GenerationTaskError(f"--task {task!r}: the tasks are {', '.join(TASKS)}")
    return GenerationOptions(DEFAULT_MAX_SEQ_LEN if max_seq_len is None else max_seq_len,
                             DEFAULT_MAX_BATCH if max_batch is None else max_batch)


def load_for_generation(spec: str) -> LoadedModel:
    """The model `spec` names (see the module doc)."""
    folder = Path(spec)
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise GenerationTaskError(f"{spec} is a folder without config.json (expected a "
                                      f"transformers checkpoint)")
        try:
            from transformers import AutoModelForCausalLM
        except ImportError:
            raise GenerationTaskError("loading a checkpoint folder needs transformers "
                                      "(pip install transformers)") from None
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa",
                                                     local_files_only=True)
        return LoadedModel(model.eval(), None)
    from aotpack.frontend.load import load_spec

    return load_spec(spec)


def prepare_generation(loaded: LoadedModel, options: GenerationOptions,
                       dtype: str | None) -> LoadedModel:
    """The step module around the loaded model, in `dtype`, its example inputs and the
    dims B and S declared dynamic."""
    import torch

    from aotpack.frontend.prepare import apply_dtype
    from aotpack.generation.step import GenerationStep, example_inputs

    # a factory's dict of inputs wrapped the model (frontend/keyword_inputs.py): the task
    # makes its own inputs, so the model itself is the one to step
    from aotpack.frontend.keyword_inputs import unwrapped

    model = unwrapped(loaded.model)
    loaded = replace(loaded, model=model)
    if isinstance(model, torch.export.ExportedProgram):
        raise GenerationTaskError("--task text-generation takes the model's module (a factory, "
                                  "a torch.save'd model or a checkpoint folder), not a .pt2: "
                                  "the step wraps the model before it is exported")
    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        raise GenerationTaskError(f"--task text-generation needs a torch.nn.Module, got "
                                  f"{type(model).__name__}")
    _use_sdpa(model)
    loaded = apply_dtype(replace(loaded, inputs=None), dtype)
    step = GenerationStep(loaded.model.eval(), options.batch_range, options.max_seq_len).eval()
    inputs = example_inputs(options.batch_range, options.max_seq_len, step.vocab_size)
    check_step(step, inputs)
    b = torch.export.Dim("B", min=1, max=options.batch_range)
    s = torch.export.Dim("S", min=1, max=options.max_seq_len)
    return replace(loaded, model=step, inputs=inputs,
                   dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}, {0: b}))


def name_step_outputs(graph):
    """The step's outputs by what they are (next_ids, logits), as the manifest shows them."""
    from aotpack.ir.graph import GraphOutput

    names = {"out0": "next_ids", "out1": "logits"}
    graph.outputs = [GraphOutput(names.get(o.name, o.name), o.value) for o in graph.outputs]
    return graph


def check_step(step, inputs) -> None:
    """The step's logits on the example prompts against the model's own forward over each
    prompt alone (no cache): a family whose head or attention the step does not reproduce
    (a logit scale it does not know, a mask it does not build) is refused here rather than
    compiled wrong. The cache is zeroed again after (it is state: zero at session create)."""
    import torch

    if not step.hf:
        return
    ids, _, last = inputs
    seq = ids.shape[1]
    # relative L2 over the vocabulary (rounding noise of a bf16/f16 model, which the step's
    # cached attention adds to, stays near 2e-2; a missing scale is far above) and the largest
    # error against the largest logit (a soft-cap missing on a few top logits: L2 dilutes it)
    low = next(step.model.parameters()).dtype in (torch.bfloat16, torch.float16)
    tolerance, peak_tolerance = (6e-2, 1e-1) if low else (2e-2, 2e-2)
    with torch.no_grad():
        try:
            _, logits = step(*inputs)
        except Exception as e:  # the family's code does not take what the step passes
            if _recurrent_state(e, step.model):
                raise GenerationTaskError(
                    f"{type(step.model).__name__}: some of its layers keep a recurrent state "
                    f"(state-space, short-convolution or linear-attention layers: "
                    f"{type(e).__name__}: {str(e).strip()[:120]}), and the generation task "
                    f"builds KV caches for attention layers only; build the forward without "
                    f"--task (the logits of whole sequences)") from e
            raise GenerationTaskError(
                f"{type(step.model).__name__}: the model's forward failed inside the "
                f"generation step ({type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
                f"): the step passes a prepared 4-D mask, position ids and its own cache "
                f"(docs/generation.md), which this family does not take yet; please report "
                f"it (a static build, without --task text-generation, may still work)") from e
        for b in range(ids.shape[0]):
            length = int(last[b]) - b * seq + 1
            want = step.model(ids[b:b + 1, :length]).logits[0, -1].float()
            diff = logits[b].float() - want
            err = float(diff.norm() / want.norm().clamp_min(1e-6))
            peak = float(diff.abs().max() / want.abs().max().clamp_min(1e-6))
            if not (err < tolerance and peak < peak_tolerance):
                raise GenerationTaskError(
                    f"{type(step.model).__name__}: the generation step's logits differ from "
                    f"the model's own forward by {err:.3g} (relative L2; largest error "
                    f"{peak:.3g} of the largest logit) on the example prompts: "
                    f"this family computes its head or attention in a way the step does not "
                    f"reproduce yet (docs/generation.md); please report it")
        for buf in step.cache.buffers():
            buf.zero_()


_RECURRENT_CACHE = ("has_previous_state", "conv_states", "ssm_states", "recurrent_states",
                    "conv_cache", "mamba")  # what hybrid models ask their cache for


def _recurrent_state(e: Exception, model) -> bool:
    """Whether the model's forward failed asking the cache for a recurrent state (Jamba,
    LFM2, Falcon-H1, Qwen3-Next), or its config names such layers."""
    kinds = getattr(getattr(model, "config", None), "layer_types", None) or ()
    asked = isinstance(e, AttributeError) and any(k in str(e) for k in _RECURRENT_CACHE)
    named = any(k in str(kind).lower() for kind in kinds for k in ("mamba", "conv", "linear"))
    return asked or named


def _use_sdpa(model) -> None:
    """transformers models attend through torch's sdpa (the op the frontend fuses), except
    those whose attention soft-caps its scores (Gemma-2's attn_logit_softcapping): sdpa has no
    cap, so they keep their eager attention, which passes/fuse_attention.py fuses with the
    cap (SdpaAttrs.softcap)."""
    config = getattr(model, "config", None)
    if getattr(config, "attn_logit_softcapping", None) is not None:
        if getattr(config, "_attn_implementation", None) != "eager":
            model.set_attn_implementation("eager")
        return
    if config is not None and hasattr(config, "_attn_implementation"):
        try:
            model.set_attn_implementation("sdpa")
        except (AttributeError, ValueError):
            config._attn_implementation = "sdpa"


def generation_info(step, options: GenerationOptions) -> dict:
    """The manifest's `generation` section (docs/generation.md) for a step's program."""
    return {"max_batch": options.batch_range, "max_seq_len": options.max_seq_len,
            "vocab_size": int(step.vocab_size), "input_ids": 0, "positions": 1,
            "last_index": 2, "next_ids": 0, "logits": 1,
            "eos_ids": [int(e) for e in step.eos_ids]}
