"""AotpackError: a failed C API call (code + message). No torch import."""
from __future__ import annotations

import enum

from aotpack.errors import UserError


class StatusCode(enum.IntEnum):
    """aotpack_code of aotpack.h (values are part of the C ABI)."""

    OK = 0
    INVALID_ARGUMENT = 1
    IO = 2
    CORRUPT_BUNDLE = 3
    UNSUPPORTED_VERSION = 4
    CHECKSUM_MISMATCH = 5
    WEIGHTS_MISMATCH = 6
    DRIVER_NOT_FOUND = 7
    DRIVER_TOO_OLD = 8
    DEVICE_MISMATCH = 9
    CUDA_ERROR = 10
    OUT_OF_MEMORY = 11
    INTERNAL = 12


class AotpackError(UserError, RuntimeError):
    """Raised for every failure the runtime reports; `code` says which kind."""

    def __init__(self, code: int, message: str):
        try:
            self.code: StatusCode | int = StatusCode(code)
        except ValueError:
            self.code = code
        self.message = message
        name = self.code.name if isinstance(self.code, StatusCode) else str(code)
        super().__init__(f"{name}: {message}")


def raise_if_error(lib, status) -> None:
    """Turns an aotpack_status* (int or None) into AotpackError, freeing it."""
    if not status:
        return
    try:
        code = lib.aotpack_status_code(status)
        message = lib.aotpack_status_message(status).decode("utf-8", "replace")
    finally:
        lib.aotpack_status_free(status)
    raise AotpackError(code, message)
