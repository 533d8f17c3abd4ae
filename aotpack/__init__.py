"""aotpack: ahead-of-time model packaging for NVIDIA GPUs (see docs/ and ../shared/DESIGN.md)."""

__version__ = "0.1.0"
