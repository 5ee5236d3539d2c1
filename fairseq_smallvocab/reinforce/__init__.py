"""REINFORCE inside the candidates (the paper's section 2.2): drawing samples
from the restricted policy and scoring them (``sampler``; one step of its
loop, ``loop``, runs on a decoding state made once per batch,
``static_state``, and on a GPU is captured and replayed per token,
``capture``; a recurrent decoder's teacher-forced passes are replayed with
their backward, ``graphed_pass``), the sentence
rewards (``rewards``: GLEU, BLEU, chrF, constant) and the baselines
(``baselines``: learned, leave-one-out, self-critical, none).  The loss that
puts them together is the ``reinforce_gleu`` criterion
(``criterions/reinforce_gleu.py``)."""
