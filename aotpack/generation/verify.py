"""`aotpack verify` of a generation bundle: the step fed the tokens eager greedy decoding picks
(teacher forcing), its logits compared with the eager step's at every step: prefill of a batch
of prompts of different lengths, then decode steps over the KV cache. Random inputs would not
do: positions and last_index must describe real sequences. A bf16/f16 model's logits are also
compared with a float32 copy of the step fed the same tokens: they pass when no further from it
than eager is (aotpack.verify.compare's rule for 16-bit outputs), since a 16-bit bundle and
16-bit eager round differently by about 1e-2.
"""
from __future__ import annotations

from pathlib import Path

import torch


def cases(max_batch: int, max_seq_len: int, seed: int, window: int | None = None
          ) -> list[tuple[list[list[int]], int]]:
    """(prompts, new tokens): one prompt alone, then a batch of different lengths (a 1-token
    prompt among them), within the bundle's limits; with a sliding `window` shorter than the
    cache, one more prompt whose decode steps attend across the window's edge."""
    g = torch.Generator().manual_seed(seed)
    longest = max(1, min(13, max_seq_len // 2))
    new = max(1, min(6, max_seq_len - longest))
    runs = [([min(5, longest)], new), ([longest, 1, max(1, longest // 2)][:max_batch], new)]
    if window is not None and longest + new <= window and window + 3 <= max_seq_len:
        reach = min(window + 4, max_seq_len) - 3  # prefill up to the edge, decode past it
        runs.append(([reach], 3))
    return [([torch.randint(1, 1 << 30, (n,), generator=g).tolist() for n in ls], k)
            for ls, k in runs]


def _sliding_window(step) -> int | None:
    """The window of a model with sliding-window attention layers, else None."""
    from aotpack.generation.step import _config

    config = _config(getattr(step, "model", step))
    window = getattr(config, "sliding_window", None)
    slides = getattr(config, "use_sliding_window", True) is not False and \
        "sliding_attention" in (getattr(config, "layer_types", None) or ["sliding_attention"])
    return window if isinstance(window, int) and window > 0 and slides else None


def verify_generation(bundle, manifest: dict, model_spec: str, reference: str, seed: int,
                      tolerance: float, weights_path=None, notes=()):
    from aotpack.generation.loop import generate, prefill_inputs
    from aotpack.generation.task import (
        GenerationOptions, load_for_generation, prepare_generation,
    )
    from aotpack.verify import VerifyReport, compare

    prov = manifest.get("provenance") or {}
    options = GenerationOptions.from_json(prov.get("generation"))
    gen = manifest["generation"]
    if options is None:
        options = GenerationOptions(gen["max_seq_len"], gen["max_batch"])
    loaded = prepare_generation(load_for_generation(model_spec), options, prov.get("dtype"))
    step = loaded.model.eval()
    device = "cuda" if reference == "gpu" else "cpu"
    bundle_step = (_cpu_step(manifest, loaded) if reference == "cpu"
                   else _gpu_step(Path(bundle), weights_path))
    step.to(device)
    precise_step = _float32_copy(step)
    vocab = gen["vocab_size"]
    checks = []
    with torch.no_grad():
        for prompts, new in cases(gen["max_batch"], gen["max_seq_len"], seed,
                                  _sliding_window(step)):
            prompts = [[t % vocab for t in p] for p in prompts]
            logits = []
            tokens = generate(lambda *a: step(*(t.to(device) for t in a)), prompts, new,
                              on_step=lambda k, lg: logits.append(lg.float().cpu()))
            inputs, chosen = prefill_inputs(prompts), []
            run = f"batch={len(prompts)} prompt={max(map(len, prompts))}"
            for k in range(new):
                ids, got = bundle_step(*inputs)
                precise = None
                if precise_step is not None:
                    precise = precise_step(*(t.to(device) for t in inputs))[1].float().cpu()
                checks.append(compare(f"logits @ {run} step={k}", got.float().cpu(), logits[k],
                                      tolerance, precise))
                chosen.append((ids, got))
                if k + 1 == new or any(len(t) <= k for t in tokens):
                    break
                inputs = (torch.tensor([[t[k]] for t in tokens]),
                          torch.tensor([[len(p) + k] for p in prompts]),
                          torch.arange(len(prompts)))
            checks.append(ids_check(f"next_ids @ {run} steps={len(chosen)}", chosen))
    return VerifyReport(reference, seed, tolerance, checks, list(notes))


def ids_check(label: str, steps) -> "OutputCheck":
    """The steps' next_ids against the argmax of their own logits, on the rows whose top two
    logits differ (a tie may go either way): the device's argmax and the row it reads.
    rel_error: the share of decided rows whose id differs; max_abs_error: how many."""
    from aotpack.verify import OutputCheck

    wrong = decided = 0
    for ids, logits in steps:
        logits = logits.float().cpu()
        top2 = logits.topk(2, -1).values
        rows = top2[:, 0] > top2[:, 1]
        decided += int(rows.sum())
        wrong += int((rows & (ids.reshape(-1).cpu() != logits.argmax(-1))).sum())
    return OutputCheck(label, rel_error=wrong / max(1, decided), max_abs_error=float(wrong),
                       ok=wrong == 0)


def _float32_copy(step):
    """A float32 copy of a bf16/f16 step (its own KV cache), or None for a float32 one."""
    import copy

    if next(step.parameters()).dtype not in (torch.bfloat16, torch.float16):
        return None
    return copy.deepcopy(step).float().eval()


def _cpu_step(manifest: dict, loaded):
    from aotpack import precision
    from aotpack.executor import new_state, run_reference
    from aotpack.frontend import to_graph
    from aotpack.passes import compile_graph
    from aotpack.verify import _check_signature, _check_weights

    from aotpack.generation.task import name_step_outputs

    program = compile_graph(name_step_outputs(to_graph(loaded.model, loaded.inputs,
                                                       loaded.dynamic_shapes)))
    precision.apply(program, precision.mode(manifest))  # the plan the bundle was built from
    _check_signature(manifest, program)
    _check_weights(manifest, program, loaded.model)
    state = new_state(program)
    return lambda *inputs: run_reference(program, list(inputs), state=state)


def _gpu_step(bundle: Path, weights_path):
    from aotpack.runtime import Model, Session
    from aotpack.verify import VerifyError

    if not torch.cuda.is_available():
        raise VerifyError("--reference gpu needs a CUDA GPU; use --reference cpu here")
    session = Session(Model(str(bundle), weights_path=str(weights_path) if weights_path
                            else None))  # one session: its KV cache persists between steps
    return lambda *inputs: session.run([t.cuda() for t in inputs])
