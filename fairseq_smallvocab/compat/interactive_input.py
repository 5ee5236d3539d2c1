"""fairseq-interactive's input that is not UTF-8 ends the run with a message
that says so, instead of a ``UnicodeDecodeError`` traceback from inside
fairseq's reader (``fairseq_cli.interactive.buffered_read``, which decodes
standard input or ``--input FILE`` as UTF-8)."""

import sys

_WRAPPED = "_smallvocab_wrapped"


def _reader(original):
    def buffered_read(input, buffer_size):
        try:
            yield from original(input, buffer_size)
        except UnicodeDecodeError as err:
            name = "standard input" if input == "-" else input
            byte = err.object[err.start:err.start + 1]
            raise SystemExit(
                f"fairseq-interactive: {name} is not UTF-8 text (byte {byte!r}: {err.reason}). Convert the input "
                "to UTF-8 first (e.g. iconv -f LATIN1 -t UTF-8), or drop the lines that are not text") from None

    setattr(buffered_read, _WRAPPED, True)
    return buffered_read


def install():
    """Wrap the reader of a running fairseq-interactive (once; the plugin is
    imported while its arguments are parsed, before anything is read)."""
    module = sys.modules.get("fairseq_cli.interactive")
    if module is not None and not getattr(module.buffered_read, _WRAPPED, False):
        module.buffered_read = _reader(module.buffered_read)
