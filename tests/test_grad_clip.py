"""fairseq 0.12 computes the gradient norm on the GPU whenever one is visible, also for --cpu training, and then
fails to scale the CPU gradients (seen on an H100: every fairseq-train --cpu --clip-norm).  The plugin's
replacement (compat/grad_clip.py) keeps the norm on the CPU there, and is installed only there."""

import pytest
import torch
from fairseq import utils as fairseq_utils

from fairseq_smallvocab.compat import grad_clip


@pytest.fixture
def fairseqs_own(monkeypatch):
    """fairseq's function in place, as on a machine without a GPU; each test's installs undone afterwards."""
    original = grad_clip._fairseq_clip_grad_norm or fairseq_utils.clip_grad_norm_
    monkeypatch.setattr(fairseq_utils, "clip_grad_norm_", original)
    monkeypatch.setattr(grad_clip, "_fairseq_clip_grad_norm", None)
    return original


def test_without_a_visible_gpu_fairseqs_clipping_stays(fairseqs_own, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    grad_clip.install()
    assert fairseq_utils.clip_grad_norm_ is fairseqs_own


def test_clip_norm_on_cpu_gradients_when_a_gpu_is_visible(fairseqs_own, monkeypatch):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn_like(p) * 5
    twins = [torch.nn.Parameter(torch.zeros_like(p)) for p in params]
    for twin, p in zip(twins, params):
        twin.grad = p.grad.clone()
    want = torch.nn.utils.clip_grad_norm_(twins, 1.0)  # torch's own, for comparison
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    grad_clip.install()
    assert fairseq_utils.clip_grad_norm_ is grad_clip.clip_grad_norm_
    norm = fairseq_utils.clip_grad_norm_(params, 1.0)
    assert norm.device.type == "cpu" and norm.item() == pytest.approx(want.item(), rel=1e-6)
    for p, twin in zip(params, twins):
        torch.testing.assert_close(p.grad, twin.grad)
