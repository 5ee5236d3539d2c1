"""A hydra config that sets a former option of one of the plugin's dataclasses (``+criterion.rl_capture=off``:
the device options ``--rl-engine`` replaced) is refused naming what replaced it, instead of omegaconf's
``ConfigKeyError: Key 'rl_capture' not in 'SmallVocabReinforceConfig'`` traceback.

fairseq merges each section of a hydra config into its registered dataclass in ``add_defaults``
(``fairseq.dataclass.utils.merge_with_parent``, which ``add_defaults`` looks up when it runs, once the plugin
is loaded); the wrapper asks the dataclass (its classmethod ``former_option(name, value, hydra=True)``: the
refusal, or None) about each key first.  A dataclass without that method, or a merge that drops unknown keys
(``remove_missing``: a checkpoint's config), goes to fairseq's merge unchanged."""

_WRAPPED = "_smallvocab_wrapped"


class FormerOptionError(ValueError):
    """A config key that names a former option, with what replaced it."""


def refuse_former_options(dc, cfg) -> None:
    """Raise ``FormerOptionError`` for the first key of ``cfg`` that the dataclass ``dc`` names a former
    option of."""
    said = getattr(dc, "former_option", None)
    if said is None or not hasattr(cfg, "keys"):
        return
    for key in list(cfg.keys()):
        try:
            value = cfg[key]
        except Exception:  # an interpolation that does not resolve: the key alone says enough
            value = None
        message = said(str(key), value, hydra=True)
        if message:
            raise FormerOptionError(message)


def _merge(original):
    def merge_with_parent(dc, cfg, remove_missing=False):
        if not remove_missing:
            refuse_former_options(dc, cfg)
        return original(dc, cfg, remove_missing)

    setattr(merge_with_parent, _WRAPPED, True)
    return merge_with_parent


def install():
    from fairseq.dataclass import utils

    if not getattr(utils.merge_with_parent, _WRAPPED, False):
        utils.merge_with_parent = _merge(utils.merge_with_parent)
