"""``scripts/checkpoint_flags.py``: the flags that rebuild a checkpoint's model are its arch and the model flags
that differ from what the arch sets (a user met fairseq's "architectures match" error and a state-dict dump were all a
user got).  Here on model configs as checkpoints keep them; the slow README test fine-tunes a user's checkpoint
with the flags the command prints (a strict load: the oracle that they rebuild the model)."""

from argparse import Namespace

import pytest

from smallvocab_tools.analysis import checkpoint_flags
from smallvocab_tools.analysis.checkpoint_flags import FlagsError, architecture_flags


def _flags(monkeypatch, **model):
    monkeypatch.setattr(checkpoint_flags, "_model_config", lambda path: Namespace(**model))
    return architecture_flags("ckpt.pt")


def _transformer(**changed):
    """A transformer config as fairseq keeps it: every value the arch and the model's build filled in."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    model = Namespace(arch="transformer", max_source_positions=1024, max_target_positions=1024,
                      min_params_to_wrap=100000000, **changed)
    ARCH_CONFIG_REGISTRY["transformer"](model)
    return vars(model)


def test_only_what_differs_from_the_arch_is_printed(monkeypatch):
    import fairseq_smallvocab  # noqa: F401  (the plugin's archs)

    assert _flags(monkeypatch, **_transformer()) == ["--arch", "transformer"]
    # the decoder's dims follow the encoder's in this arch: one flag says both; the output dim follows the decoder
    assert _flags(monkeypatch, **_transformer(encoder_embed_dim=256, share_all_embeddings=True, dropout=0.3)) == [
        "--arch", "transformer", "--dropout", "0.3", "--encoder-embed-dim", "256", "--share-all-embeddings"]
    got = _flags(monkeypatch, **_transformer(encoder_embed_dim=256, decoder_embed_dim=128, decoder_layers=2))
    assert got == ["--arch", "transformer", "--encoder-embed-dim", "256", "--decoder-embed-dim", "128",
                   "--decoder-layers", "2"]
    iwslt = Namespace(arch="transformer_iwslt_de_en", max_source_positions=1024)
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY["transformer_iwslt_de_en"](iwslt)  # its 1024-wide ffn and 4 heads are its own
    assert _flags(monkeypatch, **vars(iwslt)) == ["--arch", "transformer_iwslt_de_en"]
    assert _flags(monkeypatch, **vars(iwslt), max_target_positions=256) == [
        "--arch", "transformer_iwslt_de_en", "--max-target-positions", "256"]  # set at build time: 1024


def test_the_plugins_archs_and_what_cannot_be_read(monkeypatch, tmp_path):
    import fairseq_smallvocab  # noqa: F401

    assert _flags(monkeypatch, arch="vocab_predictor", embed_dim=64) == ["--arch", "vocab_predictor",
                                                                         "--embed-dim", "64"]
    with pytest.raises(FlagsError, match="arch 'no_such_arch' is not registered"):
        _flags(monkeypatch, arch="no_such_arch")
    monkeypatch.undo()
    with pytest.raises(FlagsError, match="checkpoint not found"):
        architecture_flags(tmp_path / "missing.pt")


def test_a_checkpoint_of_another_architecture_is_said_with_the_command_that_fits_it():
    """fairseq's "architectures match" failure (its exception raised while torch's strict load failed) becomes
    one message: what differs, and the checkpoint_flags.py command for the checkpoint; another error is left
    alone. The slow README test meets it through fairseq-train."""
    import torch

    from fairseq_smallvocab.compat.train_checkpoints import _architecture_hint

    def fairseq_load(got, want):
        try:
            try:
                got.load_state_dict(want.state_dict(), strict=True)
            except Exception:  # (fairseq raises it so, without "from": the cause is __context__)
                message = "Cannot load model parameters from checkpoint ckpts/x.pt; please ensure that the " \
                    "architectures match."
                raise Exception(message)  # noqa: B904
        except Exception as err:
            return err

    err = fairseq_load(torch.nn.Sequential(*[torch.nn.Linear(4, 4)] * 5),
                       torch.nn.Sequential(*[torch.nn.Linear(4, 8) for _ in range(5)]))
    hint = str(_architecture_hint(err))
    assert "ckpts/x.pt does not fit the model this command builds" in hint
    assert "size mismatch for 0.weight: copying a param with shape torch.Size([8, 4]) from checkpoint" in hint
    assert "(and 7 more)" in hint and "`python scripts/checkpoint_flags.py ckpts/x.pt` prints" in hint
    err = fairseq_load(torch.nn.Sequential(torch.nn.Linear(4, 4)), torch.nn.Sequential(torch.nn.Linear(4, 4),
                                                                                        torch.nn.Linear(4, 4)))
    assert 'Unexpected key(s) in state_dict: "1.weight", "1.bias"' in str(_architecture_hint(err))
    assert _architecture_hint(ValueError("something else")) is None
