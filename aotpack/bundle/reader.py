"""read_bundle: parse and check a bundle without torch; tensor bytes are read on demand."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from aotpack.bundle import manifest as mf
from aotpack.bundle import schema
from aotpack.bundle.checksum import checksum64
from aotpack.bundle.cubin_params import check_params, param_sizes
from aotpack.bundle.stfile import BundleError, TensorInfo, loads_strict, read_bytes, read_header
from aotpack.dtypes import DType


@dataclass
class Bundle:
    path: Path
    manifest: dict
    metadata: dict[str, str]
    tensors: dict[str, TensorInfo]  # every tensor in the file, padding included
    weights_path: Path | None = None  # the external weights file, when the bundle has one
    weight_tensors: dict[str, TensorInfo] = field(default_factory=dict)

    @property
    def summary(self) -> dict:
        """Informational build facts (graph summary, buffer names, naive bytes); {} if absent."""
        try:
            return json.loads(self.metadata.get(mf.SUMMARY_KEY, "{}"))
        except json.JSONDecodeError:
            return {}

    @property
    def tensor_names(self) -> list[str]:
        return [n for n in self.tensors if not n.startswith("__aotpack__.pad.")]

    def cubin(self, i: int) -> bytes:
        return read_bytes(self.path, self.tensors[f"{mf.CUBIN_PREFIX}{i}"])

    def weight(self, name: str) -> bytes:
        if self.weights_path is not None:
            return read_bytes(self.weights_path, self.weight_tensors[name])
        return read_bytes(self.path, self.tensors[name])

    def verify_checksums(self) -> None:
        """Hash every cubin and weight and compare with the manifest (reads all the data)."""
        for k in self.manifest["kernels"]:
            if hashlib.sha256(self.cubin(k["cubin"])).hexdigest() != k["cubin_sha256"]:
                raise BundleError(f"{self.path}: cubin of kernel {k['name']} does not match its "
                                  f"sha256: the bundle is corrupt, rebuild it")
        for w in self.manifest["weights"]:
            data = self.weight(w["name"])
            for key, digest in (("sha256", lambda b: hashlib.sha256(b).hexdigest()),
                                ("checksum", checksum64)):
                if key in w and digest(data) != w[key]:
                    where = self.weights_path or self.path
                    raise BundleError(f"{where}: weight {w['name']!r} does not match its "
                                      f"{key}: the file is corrupt or from another build")


BUNDLE_NAME = "model.aotpack"  # the bundle's name in the folder `aotpack build` writes


def bundle_file(path) -> Path:
    """The bundle `path` names: a folder `aotpack build` wrote means the bundle inside it."""
    path = Path(path)
    inner = path / BUNDLE_NAME
    return inner if path.is_dir() and inner.is_file() else path


def read_bundle(path, *, weights_path=None, checksums: bool = False,
                require_weights: bool = True) -> Bundle:
    """Parse `path`, check the container and the manifest, and check that every cubin and
    weight is present with the right dtype/shape/size (in the external weights file when the
    bundle has one: `weights_path` or the manifest's file next to the bundle). With
    `checksums`, also hash all cubins and weights. `require_weights=False` (inspect): an
    external weights file that is not there is not an error; `weights_path` stays None."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise BundleError(f"cannot read bundle '{path}': not a regular file (a directory, FIFO "
                          f"or device): pass the file itself")
    if not path.is_file():
        raise BundleError(f"{path}: no such bundle file (build one with `aotpack build`)")
    tensors, metadata, _ = read_header(path)
    if mf.MANIFEST_KEY not in metadata:
        raise BundleError(f"{path}: a safetensors file without an aotpack manifest "
                          f"(is this a plain weights file?)")
    text = metadata[mf.MANIFEST_KEY]
    if not isinstance(text, str):
        raise BundleError(f"{path}: __metadata__[\"{mf.MANIFEST_KEY}\"] must be a JSON string")
    schema.check_digest(metadata, text, path)  # first, as the runtime: nothing unverified is read
    try:
        manifest = loads_strict(text)
    except (UnicodeError, json.JSONDecodeError, RecursionError) as e:
        raise BundleError(f"{path}: manifest is not valid JSON ({e})") from None
    mf.check(manifest, str(path))
    bundle = Bundle(path, manifest, metadata, tensors)
    _check_cubins(bundle)
    _attach_weights(bundle, weights_path, require_weights)
    if checksums:
        bundle.verify_checksums()
    return bundle


def _check_cubins(b: Bundle) -> None:
    for i, k in enumerate(b.manifest["kernels"]):
        t = b.tensors.get(f"{mf.CUBIN_PREFIX}{k['cubin']}")
        if t is None or t.dtype != "U8" or len(t.shape) != 1:
            raise BundleError(f"{b.path}: kernel {k['name']}: cubin {k['cubin']} missing or not "
                              f"a 1-D U8 tensor")
        sizes = param_sizes(b.cubin(k["cubin"]), k["entry"])
        if sizes is not None:
            check_params(b.manifest, i, sizes)


def _attach_weights(b: Bundle, weights_path, required: bool = True) -> None:
    ext = b.manifest.get("external_weights")
    if ext:  # ext["file"] is inside the bundle's folder (manifest.check)
        wp = Path(weights_path) if weights_path else b.path.parent / ext["file"]
        if not wp.is_file():
            if not required:
                return
            raise BundleError(f"{b.path}: weights are external and {wp} does not exist: put "
                              f"{ext['file']!r} next to the bundle or pass its path")
        b.weights_path = wp
        b.weight_tensors, _, _ = read_header(wp)
        table, where = b.weight_tensors, wp
    else:
        table, where = b.tensors, b.path
    for w in b.manifest["weights"]:
        t = table.get(w["name"])
        if t is None:
            raise BundleError(f"{where}: weight {w['name']!r} is missing")
        if (DType.from_safetensors(t.dtype).value != w["dtype"] or list(t.shape) != w["shape"]
                or t.nbytes != w["nbytes"]):
            raise BundleError(f"{where}: weight {w['name']!r} is {t.dtype}{list(t.shape)}, "
                              f"the manifest expects {w['dtype']}{w['shape']} "
                              f"({w['nbytes']} bytes)")
