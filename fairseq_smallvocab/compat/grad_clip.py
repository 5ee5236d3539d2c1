"""Gradient clipping for ``--cpu`` training on a machine that has a GPU.

fairseq 0.12's ``fairseq.utils.clip_grad_norm_`` (behind every ``--clip-norm``)
computes the total norm of several gradient tensors on
``torch.cuda.current_device()`` whenever ``torch.cuda.is_available()`` and
NVIDIA's apex is not installed, even when the model and its gradients are on
the CPU (``--cpu``).  It then scales the CPU gradients by a CUDA scalar,
which torch refuses: ``RuntimeError: scalar tensor is expected to be on cpu
but is on cuda:0``.  So ``fairseq-train --cpu --clip-norm 1.0`` fails on any
machine where torch sees a GPU (found by the project's test suite on an H100).

Loading the plugin on a machine where torch sees a GPU (and only there: elsewhere
fairseq's function is right and stays) replaces that function with one that
computes the norm where the gradients are when they are all on the CPU, and
otherwise calls fairseq's own: the same norm (2-norm of the per-tensor norms, in float32,
expert gradients of mixture-of-experts layers left out of the norm and
clipped with the others), the same ``aggregate_norm_fn`` and clipping.
fairseq's optimizers look the function up on ``fairseq.utils`` at each call,
so the replacement covers all of them.
"""

import torch

_fairseq_clip_grad_norm = None


def clip_grad_norm_(params, max_norm, aggregate_norm_fn=None) -> torch.Tensor:
    """fairseq's ``utils.clip_grad_norm_``, with the norm computed on the CPU
    when every gradient is there."""
    params_list = [params] if torch.is_tensor(params) else list(params)
    with_grad = [p for p in params_list if getattr(p, "grad", None) is not None]
    if not with_grad or any(p.grad.device.type != "cpu" for p in with_grad):  # installed only where a GPU is seen
        return _fairseq_clip_grad_norm(params_list, max_norm, aggregate_norm_fn)
    grads = [p.grad.detach() for p in with_grad if not hasattr(p, "expert")]
    expert_grads = [p.grad.detach() for p in with_grad if hasattr(p, "expert")]
    if not grads:
        return params_list[0].new_tensor(0.0)
    total_norm = torch.norm(torch.stack([torch.norm(g, p=2, dtype=torch.float32) for g in grads]))
    if aggregate_norm_fn is not None:
        total_norm = aggregate_norm_fn(total_norm)
    if max_norm > 0:
        clip_coef = (float(max_norm) / (total_norm + 1e-6)).clamp_(max=1)
        torch._foreach_mul_(grads + expert_grads, clip_coef)
    return total_norm


def install():
    """Put ``clip_grad_norm_`` in place of fairseq's (once), where torch sees a GPU: the only case in which
    fairseq's goes wrong (CPU gradients; GPU gradients still go to fairseq's)."""
    global _fairseq_clip_grad_norm
    from fairseq import utils

    if torch.cuda.is_available() and utils.clip_grad_norm_ is not clip_grad_norm_:
        _fairseq_clip_grad_norm = utils.clip_grad_norm_
        utils.clip_grad_norm_ = clip_grad_norm_
