"""The `aotpack` command line; the app is `cli.main:app`."""
