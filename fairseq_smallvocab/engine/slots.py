"""Tensors at fixed addresses, owned by the default path: a decoder family's static decoding state
(``transformer_state``, ``recurrent_state``) keeps its tensors in ``Slots`` when it is made for a shape bucket
(the device modes' captured step, ``device_modes/capture.py``), and as they are when made for one batch."""

from typing import Dict

from torch import Tensor


def enlarged(shape, sizes: Dict[int, int]) -> list:
    """``shape`` with each dim in ``sizes`` ({dim: size}) set to its size."""
    shape = list(shape)
    for dim, size in sizes.items():
        shape[dim] = size
    return shape


def unmask_first_position(mask: Tensor, real_rows: int, rows_dim: int, src_dim: int) -> Tensor:
    """In place, in a True-at-padding source mask padded to a bucket's rows: each row after ``real_rows``
    attends to its first (zero) source position, so that its attention's softmax is over one key, not over
    nothing (NaN, which a backward would carry into the weights' gradients)."""
    mask.narrow(rows_dim, real_rows, mask.size(rows_dim) - real_rows).narrow(src_dim, 0, 1).fill_(False)
    return mask


class Slots:
    """Tensors at fixed addresses for a captured step, sized for a shape
    bucket: ``put`` copies a batch's tensor into the front of its slot (made
    at the first put, each dim in ``sizes`` enlarged to the bucket's) and
    fills the rest with ``fill``.  A state made for one batch has no slots:
    it keeps the batch's tensors as they are."""

    def __init__(self, rows: int, src_len: int):
        self.rows, self.src_len = rows, src_len
        self.slots: Dict[str, Tensor] = {}

    def put(self, name: str, value: Tensor, sizes: Dict[int, int], fill=0) -> Tensor:
        slot = self.slots.get(name)
        if slot is None:
            slot = self.slots[name] = value.new_empty(enlarged(value.shape, sizes))
        if any(n > m for n, m in zip(value.shape, slot.shape)):
            raise ValueError(f"{name}: a batch of shape {tuple(value.shape)} does not fit its bucket "
                             f"{tuple(slot.shape)}")
        slot.fill_(fill)
        slot[tuple(slice(0, n) for n in value.shape)].copy_(value)
        return slot
