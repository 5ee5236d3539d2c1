"""The error of data preparation: bad input data, its message naming the file
(and line) and the fix."""


class DataError(ValueError):
    """Bad input data; the message names the file (and line) and the fix."""
