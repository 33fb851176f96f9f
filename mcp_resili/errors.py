"""The base of every error that means "this input cannot work" (as opposed to a bug)."""


class UserError(ValueError):
    """Bad input from a user: the CLI prints the message and exits 2; nothing stored is lost."""
