"""The bundle: one safetensors file holding weights, cubins and the manifest (docs/manifest.md).
Imports neither torch nor triton."""
from aotpack.bundle.manifest import CUBIN_PREFIX, FORMAT, MANIFEST_KEY, SUMMARY_KEY, VERSION
from aotpack.bundle.reader import BUNDLE_NAME, Bundle, bundle_file, read_bundle
from aotpack.bundle.stfile import ALIGN, PAD_PREFIX, BundleError
from aotpack.bundle.writer import write_bundle

__all__ = [
    "ALIGN", "CUBIN_PREFIX", "FORMAT", "MANIFEST_KEY", "PAD_PREFIX", "SUMMARY_KEY", "VERSION",
    "BUNDLE_NAME", "Bundle", "BundleError", "bundle_file", "read_bundle", "write_bundle",
]
