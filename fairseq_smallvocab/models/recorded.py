"""What the plugin's tasks record in the config of a model they train
(``TranslationSmallVocabTask.build_model``), saved with every checkpoint
and read when the model is loaded to decode: declared here for the plugin's
own architectures, whose configs are dataclasses (a stock architecture's
argparse Namespace takes them as they come)."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import FairseqDataclass


@dataclass
class TaskRecords(FairseqDataclass):
    vocab_predictor: Optional[str] = field(
        default=None, metadata={"help": "set by the plugin's task when training: the vocabulary predictor behind the "
                                        "training candidates (decoding uses it when none is given)"})
    source_dict_fingerprint: Optional[int] = field(
        default=None, metadata={"help": "set by the plugin's task when training: the fingerprint of the source "
                                        "dictionary (decoding refuses another)"})
    target_dict_fingerprint: Optional[int] = field(
        default=None, metadata={"help": "set by the plugin's task when training: the fingerprint of the target "
                                        "dictionary (decoding refuses another)"})
    trained_small_vocab_size: Optional[int] = field(
        default=None, metadata={"help": "set by the plugin's task when training: the K it trained with, 0 for the "
                                        "full softmax (decoding without --small-vocab-size uses it)"})
