"""The `aotpack` command line; the app is `aotpack.cli.main:app`."""
