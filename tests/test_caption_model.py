"""lstm_caption_smallvocab: the small softmax equals the full softmax masked to the candidates,
the feature width is checked, and REINFORCE samples inside the candidates without a source length."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from helpers import candidate_batch, make_dictionary


def _model():
    from fairseq_smallvocab.models.lstm_caption_smallvocab import (
        LSTMCaptionSmallVocabConfig,
        LSTMCaptionSmallVocabModel,
    )
    from fairseq_smallvocab.models.restricted import restrict

    d = make_dictionary(54)  # the specials and 50 words

    task = SimpleNamespace(target_dictionary=d, feature_dim=20)
    torch.manual_seed(0)
    model = restrict(LSTMCaptionSmallVocabModel.build_model(
        LSTMCaptionSmallVocabConfig(embed_dim=12, layers=2, dropout=0.0), task))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model.eval(), d


def test_small_logits_equal_full_softmax_masked():
    model, d = _model()
    bsz, steps, k = 4, 6, 14
    feats = torch.randn(bsz, 20)
    cands = candidate_batch(k, len(d), bsz=bsz)
    prev = cands.gather(1, torch.randint(2, k, (bsz, steps)))
    full, _ = model(feats, prev)
    small, extra = model(feats, prev, candidates=cands)
    assert torch.allclose(small, full.gather(2, cands.unsqueeze(1).expand(-1, steps, -1)), atol=1e-5)
    masked = full.masked_fill(~torch.zeros_like(full, dtype=torch.bool).scatter_(
        2, cands.unsqueeze(1).expand(-1, steps, -1), True), float("-inf"))
    target = cands.gather(1, torch.randint(4, k, (bsz, steps)))
    loss_small = F.cross_entropy(small.transpose(1, 2), model.get_targets({"target": target}, (small, extra)))
    loss_full = F.cross_entropy(masked.transpose(1, 2), target)
    assert torch.allclose(loss_small, loss_full, atol=1e-5)
    # incremental decoding (the generator's path) gives the teacher-forced logits
    enc = model.encoder(feats)
    state, steps_out = {}, []
    for t in range(steps):
        out, _ = model.decoder(prev[:, : t + 1], enc, incremental_state=state)
        steps_out.append(out)
    assert torch.allclose(torch.cat(steps_out, 1), full, atol=1e-5)


def test_feature_width_is_checked_by_the_model():
    model, _ = _model()
    with pytest.raises(ValueError, match="reads B x 20 features"):
        model(torch.randn(2, 21), torch.full((2, 3), 2))


def test_reinforce_samples_inside_candidates_and_needs_no_source_length():
    from fairseq_smallvocab.criterions.smallvocab_reinforce import (
        SmallVocabReinforceConfig,
        SmallVocabReinforceCriterion,
    )

    model, d = _model()
    task = SimpleNamespace(target_dictionary=d)
    bsz = 5
    cands = torch.cat([torch.arange(4).expand(bsz, 4), torch.arange(4, 10).expand(bsz, 6) + 3], 1)
    target = torch.tensor([[8, 9, 2]] * bsz)
    sample = {"net_input": {"features": torch.randn(bsz, 20), "padding_mask": torch.zeros(bsz, 1, dtype=torch.bool),
                            "prev_output_tokens": torch.tensor([[2, 8, 9]] * bsz), "candidates": cands},
              "target": target, "ntokens": 3 * bsz}
    crit = SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(max_sample_len=7))
    model.train()
    loss, size, log = crit(model, sample)
    loss.backward()
    assert size == bsz and torch.isfinite(loss) and 0 < log["sample_len"] <= 7 * bsz
    assert model.encoder.feature_proj.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="--sample-len-ratio needs source sentences"):
        SmallVocabReinforceCriterion(task, SmallVocabReinforceConfig(sample_len_ratio=1.5))(model, sample)

