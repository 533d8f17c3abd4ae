"""The base of every error that is the user's to fix (a model aotpack cannot compile, a bad
argument, a file that cannot be read): one class, so that callers catch them all at once and
the CLI prints them as one line without a traceback, whatever module raised them."""


class UserError(Exception):
    """An error whose message says what went wrong and what to do.

    `named`: whether a one-line report prefixes the class name (`LoweringError: ...`); errors
    whose message already says which kind they are set it False."""

    named = True
