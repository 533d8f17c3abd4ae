"""Generator: text generation with a generation bundle (docs/generation.md) through the C
runtime's token loop (aotpack_session_generate): prefill once, then one decode run per token,
greedy or sampled on the host, with streaming. No torch import.

    from aotpack.runtime import Generator
    gen = Generator("out/llm/model.aotpack")
    r = gen.generate([[1, 15043, 3186]], max_new_tokens=64)
    r.tokens[0], r.ttft_ms, r.decode_tokens_per_s
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from aotpack.runtime._lib import (TOKEN_CALLBACK, GenerateOptionsC, GenerateStatsC,
                                  GenerationInfoC, has_generation)
from aotpack.runtime.errors import AotpackError, StatusCode, raise_if_error
from aotpack.runtime.model import Model
from aotpack.runtime.session import Session


@dataclass(frozen=True)
class GenerateResult:
    """tokens[i]: the new ids of prompt i (up to max_new_tokens; a stop id is its last).
    ttft_ms: prefill run + first tokens on the host; decode_ms: every decode run after it;
    decode_tokens_per_s: the decode runs' tokens (all sequences) per second."""

    tokens: list[list[int]]
    ttft_ms: float
    decode_ms: float
    decode_tokens_per_s: float
    decode_steps: int = 0
    stopped_by_callback: bool = False


def _invalid(message: str) -> AotpackError:
    return AotpackError(StatusCode.INVALID_ARGUMENT, message)


def _int_list(values, what: str) -> list[int]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise _invalid(f"{what} must be a list of token ids (ints), got {type(values).__name__}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            try:
                import operator
                v = operator.index(v)  # numpy / torch integer scalars
            except TypeError:
                raise _invalid(f"{what}[{i}] is {v!r}: token ids are ints") from None
        out.append(int(v))
    return out


def _number(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _invalid(f"{what} is {v!r}: expected a finite number")
    return float(v)


class Generator:
    """A generation bundle loaded with one Session: `generate()` runs the whole token loop.
    Not thread-safe (one Session): use one Generator per thread."""

    def __init__(self, model_or_path, device: int = 0, weights_path=None,
                 use_cuda_graph: bool = True):
        """model_or_path: a loaded Model (its device is used) or a bundle path (loaded on
        `device`, with `weights_path` for external weights)."""
        if not isinstance(model_or_path, Model):  # a bundle file, or the folder build wrote
            from aotpack.bundle.reader import bundle_file

            model_or_path = Model(bundle_file(model_or_path), weights_path=weights_path,
                                  device=device)
        self.model = model_or_path
        lib = self._lib = self.model._lib
        if not has_generation(lib):
            raise _invalid("the loaded libaotpack.so has no text generation "
                           "(aotpack_session_generate): rebuild or reinstall the runtime")
        info = GenerationInfoC()
        raise_if_error(lib, lib.aotpack_model_generation_info(self.model._live(),
                                                              ctypes.byref(info)))
        self.max_batch, self.max_seq_len = int(info.max_batch), int(info.max_seq_len)
        self.vocab_size = int(info.vocab_size)
        self.eos_ids = [int(info.eos_ids[i]) for i in range(info.num_eos_ids)]
        self.state_bytes = int(lib.aotpack_model_state_bytes(self.model._live()))
        self.session = Session(self.model, use_cuda_graph=use_cuda_graph)

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 stop_ids: Sequence[int] = (), ignore_eos: bool = False,
                 on_token: Callable[[int, int, int], object] | None = None) -> GenerateResult:
        """Generates up to `max_new_tokens` ids after each prompt (a list of token-id lists;
        a batch of different lengths is fine). temperature 0: greedy; > 0: sampled with top_k
        (0: all) and top_p, reproducible for `seed`. A stop id (or the model's eos ids unless
        ignore_eos) ends a sequence. on_token(sequence, token, step) is called per new token;
        returning True stops generating. Errors raise AotpackError (INVALID_ARGUMENT naming
        the sequence and the numbers; nothing runs then)."""
        if isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__len__"):
            raise _invalid(f"prompts must be a list of token-id lists, got "
                           f"{type(prompts).__name__}")
        rows = [_int_list(p, f"prompts[{i}]") for i, p in enumerate(prompts)]
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or \
                max_new_tokens < 0:
            raise _invalid(f"max_new_tokens is {max_new_tokens!r}: expected an int >= 1")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k < 1 << 31:
            raise _invalid(f"top_k is {top_k!r}: use 0 (all tokens) or a positive int")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
            raise _invalid(f"seed is {seed!r}: expected an int in [0, 2^64)")
        stops = _int_list(stop_ids, "stop_ids")
        o = GenerateOptionsC()
        o.struct_size = ctypes.sizeof(GenerateOptionsC)
        o.temperature = _number(temperature, "temperature")
        o.top_k, o.top_p, o.seed = top_k, _number(top_p, "top_p"), seed
        if o.top_p == 0:  # the C API reads 0 as its default (1); here 0 keeps nothing
            raise _invalid("top_p is 0: use a value in (0, 1]")
        stop_arr = (ctypes.c_int64 * max(len(stops), 1))(*stops)
        o.stop_ids = ctypes.cast(stop_arr, ctypes.POINTER(ctypes.c_int64)) if stops else None
        o.num_stop_ids, o.ignore_eos = len(stops), 1 if ignore_eos else 0
        errors: list[BaseException] = []
        if on_token is not None:
            def trampoline(_user, sequence, token, step):
                try:
                    return 1 if on_token(int(sequence), int(token), int(step)) else 0
                except BaseException as e:  # noqa: BLE001 — carried out, re-raised below
                    errors.append(e)
                    return 1
            o.on_token = TOKEN_CALLBACK(trampoline)  # kept alive by `o` during the call
        return self._run(rows, max_new_tokens, o, errors)

    def _run(self, rows: list[list[int]], n: int, o: GenerateOptionsC,
             errors: list) -> GenerateResult:
        batch = len(rows)
        arrays = [(ctypes.c_int64 * max(len(r), 1))(*r) for r in rows]
        ptrs = (ctypes.POINTER(ctypes.c_int64) * max(batch, 1))(
            *[ctypes.cast(a, ctypes.POINTER(ctypes.c_int64)) for a in arrays])
        lens = (ctypes.c_size_t * max(batch, 1))(*[len(r) for r in rows])
        tokens = (ctypes.c_int64 * max(batch * n, 1))()
        counts = (ctypes.c_size_t * max(batch, 1))()
        st = GenerateStatsC()
        st.struct_size = ctypes.sizeof(GenerateStatsC)
        status = self._lib.aotpack_session_generate(
            self.session._live(), ptrs, lens, batch, n, ctypes.byref(o), tokens, counts,
            ctypes.byref(st), None)
        if errors:
            if status:
                self._lib.aotpack_status_free(status)
            raise errors[0]
        raise_if_error(self._lib, status)
        out = [[int(tokens[b * n + i]) for i in range(counts[b])] for b in range(batch)]
        return GenerateResult(out, float(st.ttft_ms), float(st.decode_ms),
                              float(st.decode_tokens_per_s), int(st.decode_steps),
                              bool(st.stopped_by_callback))

    def reset_state(self) -> None:
        """Zeroes the session's state (KV cache); generate() never needs it."""
        raise_if_error(self._lib, self._lib.aotpack_session_reset_state(self.session._live(),
                                                                        None))

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "Generator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Generator({self.model.path!r}, max_batch={self.max_batch}, "
                f"max_seq_len={self.max_seq_len}, vocab_size={self.vocab_size})")
