"""Less noise on every fairseq command the plugin is loaded in (the ``quiet_logs`` patch: both filters are
process-wide, for any code in the process; ``SMALLVOCAB_COMPAT=-quiet_logs`` leaves them out).

* fairseq 0.12 composes its config with hydra 1.0's API (``hydra.experimental``, ``strict``, ``_group_``
  package headers, schema matching); hydra >= 1.1 warns about each on every command: six warnings (matched by
  the five patterns below) nobody running fairseq can act on.  They come after the plugin is imported
  (``--user-dir`` is read while the arguments are parsed, the config is composed after), so the plugin filters
  exactly those messages.
* sacrebleu says that hypotheses end in a tokenized period (three warnings) at every validation with
  ``--eval-bleu`` on tokenized text, such as the project's Multi30k recipes: once in a run says it; each distinct
  sacrebleu warning now passes once per process.

What cannot be filtered here: fairseq's "Please install tensorboardX" notice is logged while ``fairseq.tasks`` is
imported, before any ``--user-dir`` is read (``pip install tensorboardX`` silences it)."""

import logging
import warnings

# the start of each hydra warning fairseq 0.12 causes (matched at the message's start, leading blank lines aside)
HYDRA_MESSAGES = (
    r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental",
    r"The version_base parameter is not specified",
    r"In '[^']*': Usage of deprecated keyword in package header",
    r"'[^']*' is validated against ConfigStore schema with the same name",
    r"The strict flag in the compose API is deprecated",
)


class OncePerMessage(logging.Filter):
    """Passes each distinct message once."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def filter(self, record):
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


def install():
    for message in HYDRA_MESSAGES:
        warnings.filterwarnings("ignore", message=r"\s*" + message, category=UserWarning)
    sacrebleu = logging.getLogger("sacrebleu")
    if not any(isinstance(f, OncePerMessage) for f in sacrebleu.filters):
        sacrebleu.addFilter(OncePerMessage())
