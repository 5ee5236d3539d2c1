"""fairseq's data-buffer thread is stopped before the interpreter's teardown, so that a run that has finished its
work exits 0 instead of aborting.

fairseq's ``BufferedIterator`` (``--data-buffer-size``, 10 by default) collates the next batches in a daemon thread
(``BackgroundConsumer``).  When ``--max-update`` (or an early stop) ends training, that thread may still be
inside torch, collating; Python's exit then ends it inside torch's release of the GIL, and the process aborts
("terminate called without an active exception", exit 134 / -6: pytorch/pytorch#38228) after its checkpoints
and logs were written.  A script that runs fairseq-train under ``set -e`` stops there.  The thread is idle
(blocked on its full queue) once the buffer is full, so the abort comes from short runs and busy machines.

The patch wraps ``BufferedIterator._create_consumer`` to keep a weak reference to each consumer it starts, and
registers (once) an exit handler, which Python runs before its teardown, that stops each consumer still
running: its item limit set to what it has produced, so that it ends after the item under way, and its queue
emptied until it has (a consumer blocked on a full queue ends at once).  A consumer that does not end within
``STOP_SECONDS`` is left as fairseq leaves it.  What the iterator yields is unchanged: the handler runs only at
exit, after the last batch was taken."""

import atexit
import queue
import time
import weakref

STOP_SECONDS = 30.0  # a consumer collates one batch at a time: far longer than any batch takes
_CONSUMERS = weakref.WeakSet()
_WRAPPED = "_smallvocab_wrapped"


def stop_consumers(deadline: float = STOP_SECONDS) -> int:
    """Stop every consumer still running (see the module); returns how many are left running."""
    end = time.monotonic() + deadline
    for consumer in list(_CONSUMERS):
        consumer._max_len = 0  # it ends after the item under way (its count is at least 1 then)
        while consumer.is_alive() and time.monotonic() < end:
            try:
                consumer._queue.get(timeout=0.05)  # room for its item and its end marker
            except queue.Empty:
                pass
            consumer.join(timeout=0.01)
    return sum(consumer.is_alive() for consumer in list(_CONSUMERS))


def _create_consumer(original):
    registered = []

    def create_consumer(self):
        original(self)
        _CONSUMERS.add(self._consumer)
        if not registered:
            atexit.register(stop_consumers)
            registered.append(True)

    setattr(create_consumer, _WRAPPED, True)
    return create_consumer


def install():
    from fairseq.data.iterators import BufferedIterator

    if not getattr(BufferedIterator._create_consumer, _WRAPPED, False):
        BufferedIterator._create_consumer = _create_consumer(BufferedIterator._create_consumer)
