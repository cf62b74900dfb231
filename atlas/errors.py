"""The one exception type for user-facing errors: the CLI prints its message on one line and exits 1."""


class AtlasError(Exception):
    """An error caused by the user's input (file, argument, store), not by a bug."""
