"""compat/quiet_logs.py: the hydra warnings fairseq 0.12 causes on every command are left out (their texts as
hydra 1.3 words them), other warnings are not; each distinct sacrebleu warning passes once."""

import logging
import warnings

from fairseq_smallvocab.compat import quiet_logs

HYDRA_TEXTS = [  # as hydra 1.3 words them under fairseq 0.12 (a fairseq-train log of this project)
    "hydra.experimental.initialize() is no longer experimental. Use hydra.initialize()",
    "\nThe version_base parameter is not specified.\nPlease specify a compatability version level, or None.\n"
    "Will assume defaults for version 1.1",
    "hydra.experimental.compose() is no longer experimental. Use hydra.compose()",
    "In 'config': Usage of deprecated keyword in package header '# @package _group_'.\nSee https://hydra.cc/docs/1.2/"
    "upgrades/1.0_to_1.1/changes_to_package_header for more information",
    "\n'config' is validated against ConfigStore schema with the same name.\nThis behavior is deprecated in Hydra 1.1 "
    "and will be removed in Hydra 1.2.",
    "\nThe strict flag in the compose API is deprecated.\nSee https://hydra.cc/docs/1.2/upgrades/0.11_to_1.0/"
    "strict_mode_flag_deprecated for more info.",
]


def test_fairseqs_hydra_warnings_are_left_out_and_others_are_not():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_logs.install()  # in front of pytest's own filters, as it is in front of none in a fairseq command
        for text in HYDRA_TEXTS:
            warnings.warn(text, UserWarning, stacklevel=1)
        warnings.warn("hydra.initialize() needs a config path", UserWarning, stacklevel=1)  # not one of fairseq's
        warnings.warn("The version_base parameter is not specified", DeprecationWarning, stacklevel=1)  # other kind
    assert [str(w.message) for w in caught] == ["hydra.initialize() needs a config path",
                                                "The version_base parameter is not specified"]


def test_each_sacrebleu_warning_passes_once(caplog, monkeypatch):
    logger = logging.getLogger("sacrebleu")
    # a fresh filter: an earlier test in this process (a length penalty sweep) may have passed these texts already
    monkeypatch.setattr(logger, "filters", [f for f in logger.filters if not isinstance(f, quiet_logs.OncePerMessage)])
    quiet_logs.install()
    with caplog.at_level(logging.WARNING, logger="sacrebleu"):
        for _ in range(3):  # three validations
            logger.warning("That's 100 lines that end in a tokenized period ('.')")
            logger.warning("It looks like you forgot to detokenize your test data, which may hurt your score.")
        logger.warning("a warning of its own")
    assert [r.getMessage() for r in caplog.records if r.name == "sacrebleu"] == [
        "That's 100 lines that end in a tokenized period ('.')",
        "It looks like you forgot to detokenize your test data, which may hurt your score.",
        "a warning of its own"]
