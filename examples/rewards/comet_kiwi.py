"""COMET-Kiwi, a reference-free quality estimator, as the REINFORCE reward:

    PYTHONPATH=examples/rewards fairseq-train ... --criterion smallvocab_reinforce --reward python:comet_kiwi.score

Needs ``pip install unbabel-comet`` and the model (``Unbabel/wmt22-cometkiwi-da`` by default, gated on
the Hugging Face hub: accept its licence and log in once; or ``COMET_KIWI_MODEL=/path/to/checkpoints/
model.ckpt`` for a local copy).  Each batch's (source, hypothesis) pairs are scored in one call, on the
GPU where torch sees one (``COMET_KIWI_BATCH`` pairs at a time, 64 by default).  The reward is a score
near [0, 1]; a quality estimator can be gamed (He et al. 2024), so keep some CE in the loss
(``--ce-weight``) and watch a reference-based metric on the validation set (``--eval-bleu``)."""

import os
from functools import lru_cache

import torch


@lru_cache(maxsize=1)
def _model():
    from comet import download_model, load_from_checkpoint

    name = os.environ.get("COMET_KIWI_MODEL", "Unbabel/wmt22-cometkiwi-da")
    return load_from_checkpoint(name if os.path.isfile(name) else download_model(name))


def score(hypotheses, references, sources, target_lang):
    if sources is None:
        raise ValueError("COMET-Kiwi scores a translation against its source, and this task gives none")
    pairs = [{"src": src, "mt": hyp} for src, hyp in zip(sources, hypotheses)]
    out = _model().predict(pairs, batch_size=int(os.environ.get("COMET_KIWI_BATCH", "64")),
                           gpus=1 if torch.cuda.is_available() else 0, progress_bar=False)
    return [float(x) for x in out.scores]


score.needs_references = False  # references are not read: the criterion passes None
