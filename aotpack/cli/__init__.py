"""The `aotpack` command line; the app is `aotpack.cli.main:app`, entered through
`aotpack.cli.entry:main`."""
