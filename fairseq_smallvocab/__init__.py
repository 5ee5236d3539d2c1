"""fairseq-smallvocab: fast reinforcement learning for sentence generation by
vocabulary prediction (Hashimoto & Tsuruoka, NAACL 2019), as a fairseq plugin.

Load it with ``--user-dir path/to/fairseq_smallvocab`` on any fairseq command
line, or ``import fairseq_smallvocab`` from Python.  Importing the package
registers the plugin's tasks, models and criteria with fairseq's registries,
and installs what the plugin changes in fairseq and torch (safe checkpoint
loading under torch >= 2.6, literal-only config evaluation, fairseq-train's
checkpoint files and pace, ...): ``compat/__init__.py`` lists each change, and
``SMALLVOCAB_COMPAT=off`` (or ``-NAME,...``) leaves them out.
"""

__version__ = "0.1.0"

try:
    import fairseq  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without fairseq
    if exc.name != "fairseq":
        raise
    raise ImportError(
        "fairseq_smallvocab needs fairseq 0.12 (on Python >= 3.11 install the "
        "PyPI package 'fairseq-fixed==0.12.3.1', which imports as 'fairseq'); "
        "see README.md, 'Installing into an existing fairseq environment'"
    ) from exc

from fairseq_smallvocab import compat  # noqa: E402

compat.install()

from fairseq_smallvocab import criterions, models, tasks  # noqa: E402,F401
