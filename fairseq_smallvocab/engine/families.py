"""Decoder families: what the engine must know of a decoder, asked of one
small adapter per family instead of type switches.

A ``DecoderFamily`` says, for the decoders it ``accepts``:

- ``recurrent``: its states come one step after another and a step's graph
  does not grow with t, so the sampler keeps the sampling steps' graph for
  the backward (no second pass over the samples);
- ``why_not(decoder)``: why the static state cannot follow this decoder
  exactly (a subclass may compute otherwise), None where it can: a model's
  fact, asked once by the plan (``follower``); ``takes(encoder_out,
  keep_graph)``: whether this batch samples on it (a call's facts);
- ``static_state(decoder, encoder_out, steps, slots)``: the decoding state
  made once per batch (``transformer_state``, ``recurrent_state``), its
  tensors in ``slots`` (``Slots``: at fixed addresses) where it is made for a
  captured step's shape bucket;
- ``source_length(encoder_out)``: the source length a capture's bucket
  rounds up;
- ``parts``: the encoder output's tensors that a graphed teacher-forced pass
  takes and pads (``EncoderParts``; None: the decoder's own pass).

Families are registered (``register``), as fairseq registers models: the
engine registers fairseq's Transformer and LSTM decoders, the plugin's
models register theirs (``models/``), and a user's decoder family can be
added the same way (a subclass of a decoder that computes otherwise: a
family with its own ``decoder_class`` and ``state_class``).  ``family_of``
gives the family of a decoder's nearest class, or None (sampled on
fairseq's incremental state, passes eager).
"""

import weakref
from typing import Callable, Dict, List, Optional, Tuple

from torch import Tensor

# -- a static state's tensors at fixed addresses: kept in ``Slots`` when the state is made for a shape bucket (the
# device modes' captured step, ``device_modes/capture.py``), as they are when made for one batch

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


class Part:
    """One tensor of an encoder's output as a graphed pass pads it: its rows dim, its source dim (None:
    none), whether it is the True-at-padding source mask."""

    def __init__(self, rows_dim: int, src_dim: Optional[int] = None, mask: bool = False):
        self.rows_dim, self.src_dim, self.mask = rows_dim, src_dim, mask


class EncoderParts:
    """An encoder output's tensors, in order (``parts``), how to take them out of it (``take``) and how to
    build an encoder output from them again (``build``)."""

    def __init__(self, parts: List[Part], take: Callable, build: Callable):
        self.parts, self.take, self.build = parts, take, build


class DecoderState:
    """A static state's decoder, held weakly: a bucket keeps its state in a store weakly keyed by the decoder
    (``buckets.BucketStore``), and a strong reference from the bucket would keep the decoder, its buckets and
    their graphs alive for as long as the process runs."""

    def __init__(self, decoder):
        self._decoder = weakref.ref(decoder)

    @property
    def decoder(self):
        return self._decoder()

    def own_tensors(self) -> List[Tensor]:
        """The tensors the state made besides its slots (a bucket's memory counts them)."""
        return []


class DecoderFamily:
    """The adapter of one decoder family (see the module).  By default the family is ``decoder_class``
    (accepted with its subclasses, followed exactly only for the class itself) and its static state
    ``state_class(decoder, encoder_out, slots)``; a family may override each answer."""

    recurrent = False
    parts: Optional[EncoderParts] = None
    decoder_class: Optional[type] = None
    state_class: Optional[type] = None

    # the default answers below need the family's classes: a family without them overrides those answers

    def accepts(self, decoder) -> bool:
        assert self.decoder_class is not None
        return isinstance(decoder, self.decoder_class)

    def why_not(self, decoder) -> Optional[str]:
        assert self.decoder_class is not None
        if type(decoder) is not self.decoder_class:
            return f"{type(decoder).__name__} subclasses {self.decoder_class.__name__}"
        return None

    def static_state(self, decoder, encoder_out, steps: int, slots=None):
        assert self.state_class is not None
        return self.state_class(decoder, encoder_out, slots)

    def source_length(self, encoder_out) -> int:
        """The encoder output's source length (fairseq's dict: ``encoder_out``'s first dim, 0 for none)."""
        enc = encoder_out.get("encoder_out") or []
        return enc[0].size(0) if enc and isinstance(enc[0], Tensor) and enc[0].dim() == 3 else 0

    def takes(self, encoder_out, keep_graph: bool = False) -> bool:
        """Whether a decoder this family follows (``why_not`` None: asked once, by the plan) samples this
        batch on the static state (``keep_graph``: the sampler keeps the steps' graph)."""
        return True


_FAMILIES: List[DecoderFamily] = []


def register(family: DecoderFamily) -> DecoderFamily:
    """Add ``family`` (registering a family of the same class again replaces it, so a module imported twice
    registers once)."""
    for i, known in enumerate(_FAMILIES):
        if type(known) is type(family):
            _FAMILIES[i] = family
            return family
    _FAMILIES.append(family)
    return family


def family_of(decoder) -> Optional[DecoderFamily]:
    """The registered family that accepts ``decoder`` (of several, the one of the nearest class in its
    method resolution order, as ``functools.singledispatch`` picks: a family registered for a subclass wins
    over its base class's), or None."""
    mro = type(decoder).__mro__

    def distance(family):
        return mro.index(family.decoder_class) if family.decoder_class in mro else len(mro)

    return min((family for family in _FAMILIES if family.accepts(decoder)), key=distance, default=None)


def is_recurrent(decoder) -> bool:
    """Whether ``decoder``'s sampling keeps the step graph (its family is recurrent)."""
    family = family_of(decoder)
    return family is not None and family.recurrent


def follower(decoder) -> Tuple[Optional[DecoderFamily], str]:
    """The family whose static state follows ``decoder`` exactly, or None and why not ("no registered decoder
    family accepts it", or its family's ``why_not``): a model's fact, which ``passes.plan`` asks once."""
    family = family_of(decoder)
    why = "no registered decoder family accepts it" if family is None else family.why_not(decoder)
    return (None, why) if why else (family, "")


def static_state(decoder, encoder_out, steps: int, keep_graph: bool = False, slots=None):
    """The static state for ``decoder``, or None where it keeps fairseq's incremental state (no family follows
    it, or this batch it cannot: ``takes``), asked of the decoder every call (a plan asks once: its
    ``static_state``).  ``keep_graph``: the sampler keeps the steps' graph.  ``slots``: a captured step's
    state, at the bucket's sizes (``load`` then takes each next batch)."""
    return state_of(follower(decoder)[0], decoder, encoder_out, steps, keep_graph, slots)


def state_of(family: Optional[DecoderFamily], decoder, encoder_out, steps: int, keep_graph: bool = False,
             slots=None):
    """``family``'s static state for this batch, or None (no family, or one that does not take this batch)."""
    if family is None or not family.takes(encoder_out, keep_graph):
        return None
    return family.static_state(decoder, encoder_out, steps, slots)
