"""Refusals name what the user wrote: the torch call or nn module (not the aten piece torch.export
decomposed it into), the exported node, the user's source line (the deepest frame of their own
code, not nn.Sequential's) and what to do; torch.export's refusals of dynamic dims say which
dims, why, and the declaration that works (found by exporting again when torch suggests none).
Small conv models written here, CPU only."""
import inspect
import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from aotpack.frontend import ModelLoadError, UnsupportedOpError, to_graph
from aotpack.frontend.dynamic import apply_dynamic
from aotpack.frontend.load import LoadedModel


def _line_of(fn, text: str) -> str:
    """`file:line` of the line of `fn`'s source that holds `text` (the refusal must name it)."""
    lines, start = inspect.getsourcelines(fn)
    hit = next(i for i, ln in enumerate(lines) if text in ln)
    return f"{inspect.getsourcefile(fn)}:{start + hit}:"


def _refusal(model, inputs, dynamic_shapes=None) -> str:
    with pytest.raises(UnsupportedOpError) as refused:
        to_graph(model.eval(), inputs, dynamic_shapes)
    return str(refused.value)


class Unpool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        p, i = F.max_pool2d(self.conv(x), 2, 2, return_indices=True)
        return F.max_unpool2d(p, i, 2, 2)


def test_max_unpool_is_refused_by_its_name_not_by_a_piece_or_a_python_error():
    text = _refusal(Unpool(), (torch.randn(1, 3, 8, 8),))
    assert text.startswith("F.max_unpool2d reads the indices of a max pooling")
    assert re.search(r"node: \w+ = aten\.\w+\.\w+\(\.\.\.\)", text)
    assert "decomposed aten.max_unpool2d" in text
    assert _line_of(Unpool.forward, "F.max_unpool2d(") in text
    assert "nn.Upsample" in text
    assert "NoneType" not in text and "float()" not in text


class Block(nn.Module):  # a user module inside a Sequential: its own line is the deepest
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def forward(self, x):
        return F.pad(x, (1, 1, 1, 1), mode=self.mode) * 2


class Net(nn.Module):
    def __init__(self, first):
        super().__init__()
        self.body = nn.Sequential(first, nn.Conv2d(3, 4, 3))

    def forward(self, x):
        return self.body(x)


_H = dict(min=8, max=64)


@pytest.mark.parametrize("layer, call, module", [
    (nn.ReflectionPad2d(1), "F.pad(mode='reflect')", "self.body[0] (nn.ReflectionPad2d)"),
    (nn.ReplicationPad2d(1), "F.pad(mode='replicate')", "self.body[0] (nn.ReplicationPad2d)"),
    (nn.Conv2d(3, 3, 3, padding=1, padding_mode="reflect"), "F.pad(mode='reflect')",
     "self.body[0] (nn.Conv2d)"),
])
def test_a_pad_over_a_dynamic_size_is_named_with_its_layer(layer, call, module):
    """Inside nn.Sequential the deepest user frame is the Sequential's caller; the op line
    names the layer by its path."""
    text = _refusal(Net(layer), (torch.randn(1, 3, 16, 16),), ({2: Dim("H", **_H)},))
    assert text.startswith(f"{call} over a dynamic size is not supported (output [1, 3, ")
    assert f"op: {call} in {module}" in text
    assert re.search(r"node: index\w* = aten\.index\.Tensor", text)
    assert _line_of(Net.forward, "return self.body(x)") in text
    assert "padding_mode='zeros'" in text and "static" in text


def test_the_deepest_user_frame_is_the_source_line():
    text = _refusal(Net(Block("reflect")), (torch.randn(1, 3, 16, 16),),
                    ({2: Dim("H", **_H)},))
    assert _line_of(Block.forward, "F.pad(") in text
    assert _line_of(Net.forward, "return self.body(x)") not in text


def test_user_frames_skip_torch_and_installed_libraries():
    from aotpack.frontend.origin import user_frame

    def frame(path, line, code):
        return f'File "{path}", line {line}, in forward\n    {code}\n'
    mine = frame("/home/me/net.py", 7, "return self.body(x)")
    lib = frame("/usr/lib/python3/site-packages/timm/layers/pad.py", 30, "return F.pad(x, p)")
    torch_frame = frame("/usr/lib/python3/site-packages/torch/nn/functional.py", 5, "pad")
    assert user_frame(mine + lib + torch_frame) == ("/home/me/net.py", 7, "return self.body(x)")
    # a model that is all library code (a transformers model) keeps the library's line
    assert user_frame(lib + torch_frame)[1] == 30
    assert user_frame(torch_frame) is None


def test_a_rule_failing_in_python_words_is_not_shown_in_them():
    from aotpack.frontend.refusals import rule_type_error

    node = SimpleNamespace(target="aten.add.Tensor")
    try:
        float(None)
    except TypeError as e:
        text = rule_type_error(node, e, [None, 2])
    assert "NoneType" not in text and "(None, int)" in text and "aotpack's limit" in text

    def typed():
        raise TypeError("linear: x [2, 3] does not match weight [4, 5]")
    try:
        typed()
    except TypeError as e:  # aotpack's own type rules: their reason is the message
        assert rule_type_error(node, e, []).endswith("does not match weight [4, 5]")


def test_a_piece_of_a_decomposed_op_is_refused_under_the_users_op():
    from aotpack.frontend.refusals import refusal

    node = SimpleNamespace(
        name="index_3", target="aten.index.Tensor",
        meta={"original_aten": "aten.grid_sampler_2d.default",
              "torch_fn": ("grid_sample_1", "function.grid_sample"),
              "stack_trace": 'File "/home/me/net.py", line 9, in forward\n    y = warp(x)\n'})
    text = refusal(node, "aten.index.Tensor with odd indices is not supported")
    assert text.startswith("F.grid_sample is not supported here (torch.export decomposed it")
    assert "aten.index.Tensor with odd indices" in text
    assert "/home/me/net.py:9: y = warp(x)" in text


class CeilPools(nn.Module):
    """Stride-2 convs and ceil-mode pools: torch.export cannot prove their sizes for every
    size of a plain range."""
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), nn.Conv2d(4, 4, 1),
            nn.MaxPool2d(3, 2, ceil_mode=True), nn.Conv2d(4, 4, 3, padding=1),
            nn.MaxPool2d(3, 2, ceil_mode=True))

    def forward(self, x):
        return self.features(x).mean((2, 3))


class Strided1d(nn.Module):
    """wav2vec2's feature encoder in small: torch.export cannot prove a guard on T (the
    projection's reshape of [2, L(T), 4]) and suggests no fix."""
    def __init__(self):
        super().__init__()
        ks, ss = (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)
        self.convs = nn.ModuleList(nn.Conv1d(1 if i == 0 else 4, 4, k, s)
                                   for i, (k, s) in enumerate(zip(ks, ss)))
        self.norm = nn.LayerNorm(4)
        self.proj = nn.Linear(4, 6)

    def forward(self, x):
        x = x[:, None]
        for conv in self.convs:
            x = F.gelu(conv(x))
        return self.proj(self.norm(x.transpose(1, 2)))


def test_refused_dims_name_the_dims_and_the_stepped_option_that_works():
    """No fix from torch (its fix-finder fails): aotpack finds the multiple by exporting
    again, and the option it prints is accepted."""
    model, x = Strided1d().eval(), torch.randn(2, 8000)
    with pytest.raises(ModelLoadError) as refused:
        apply_dynamic(LoadedModel(model, (x,)), ["x.1=T:4000..16000"])
    text = str(refused.value)
    assert "constrains T (x.1, 4000..16000)" in text
    option = re.search(r"--dynamic (x\.1=T:4000\.\.16000:(\d+))", text)
    assert option and "torch.export accepts multiples of" in text
    assert f"_T = torch.export.Dim('_T', min={4000 // int(option[2])}" in text
    assert f"return model, inputs, {{'x': {{1: {option[2]} * _T}}}}" in text
    loaded = apply_dynamic(LoadedModel(model, (x,)), [option[1]])
    graph = to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes)
    assert [str(d) for d in graph.inputs[0].shape] == ["2", f"{option[2]}*_T"]


def test_a_fix_finder_failure_is_a_dims_refusal_with_both_sides_declared():
    """torch's AssertionError out of its own fix-finder names one side of the image; the
    hint declares both, from a factory (no --dynamic there)."""
    dims = {2: Dim("H", min=64, max=128), 3: Dim("W", min=64, max=128)}
    text = _refusal(CeilPools(), (torch.randn(1, 3, 96, 96),), (dims,))
    assert "refused the dynamic dims" in text and "could not run the model" not in text
    assert re.search(r"constrains H \(x\.2, 64\.\.128\) and W \(x\.3, 64\.\.128\)", text)
    assert re.search(r"return model, inputs, \{'x': \{2: \d+ \* _H, 3: \d+ \* _W\}\}", text)
    assert "--dynamic" not in text


def test_torch_s_suggested_multiple_is_translated_not_searched():
    from aotpack.frontend.dim_hints import dims_hint

    message = ("Constraints violated (H)!\nSuggested fixes:\n  _H = Dim('_H', max=8)\n"
               "  H = 32*_H")
    H = Dim("H", min=64, max=256)

    def retry(mult, names):
        raise AssertionError("torch gave the multiple: no export again")
    text = dims_hint(message, [("x", 2, H)], retry)
    assert "torch.export suggests multiples of 32" in text
    assert "--dynamic x.2=H:64..256:32" in text
    assert "_H = torch.export.Dim('_H', min=2, max=8)" in text


def test_stepped_options_are_checked():
    model, x = Strided1d().eval(), torch.randn(2, 8000)
    for bad, why in [("x.1=T:4000..16000:3", "not a multiple of 3"),
                     ("x.1=T:4000..4001:2", "fewer than two multiples")]:
        with pytest.raises(ModelLoadError, match=why):
            apply_dynamic(LoadedModel(model, (x,)), [bad])


def test_verify_declares_stepped_dims_again():
    from aotpack.verify import dynamic_options

    manifest = {"symbols": [{"name": "_T", "min": 2000, "max": 8000}],
                "inputs": [{"name": "x", "shape": [2, "2*_T"]}]}
    assert dynamic_options(manifest) == ["x.1=T:4000..16000:2"]
