"""Task ``translation_multi_smallvocab``: fairseq's multilingual
``translation_multi_simple_epoch`` with a small, input-specific target
vocabulary in every batch.

Everything is fairseq's multilingual task (``--lang-pairs``, ``--langs`` /
``--lang-dict``, ``--encoder-langtok``, ``--decoder-langtok``, sampling over
pairs, one shared dictionary with the language tokens appended), plus each
batch's ``net_input["candidates"]``: the rows of ``candidates.multilingual``,
predicted for each row's language pair by ``--vocab-predictor``
(``en-de:CKPT,en-fr:CKPT``), with fairseq's special symbols and, under
``--decoder-langtok``, the row's target language token in every row (not
counted in ``--small-vocab-size``).  Training rows hold every gold word;
validation, fairseq-generate and fairseq-interactive rows are the
predictions.  REINFORCE's samples (and greedy decodes) start with the row's
target language token, forced as fairseq's decoding forces it (no action: it
leaves the policy gradient); rewards see no language token, and a reward of
the user's gets each hypothesis's target language.  The model is restricted as in ``translation_smallvocab``
(``models.restricted``: the stock state-dict keys), so a stock multilingual
checkpoint fine-tunes here (``--finetune-from-model``) and a checkpoint
written here decodes with stock fairseq.  ``--small-vocab-size 0`` trains
the same model with the full softmax.  Every .idx/.bin pair it loads is
checked first, as the plugin's other tasks check theirs (``binarized``).

fairseq's ``--lang-tok-replacing-bos-eos`` (the language token in place of
the decoder's first input) is not supported: the generator would start from
a token outside the candidates.
"""

import logging
import os
from typing import Dict, List, Optional, Tuple

import torch
from fairseq.data.multilingual.multilingual_data_manager import MultilingualDatasetManager
from fairseq.data.multilingual.multilingual_utils import get_lang_tok
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

from fairseq_smallvocab.candidates.fit import MEASURED, batches_outside, log_fit
from fairseq_smallvocab.candidates.multilingual import PairPredictors, key_of, parse_predictors
from fairseq_smallvocab.candidates.space import default_small_vocab_size
from fairseq_smallvocab.compat.precision import check_training_precision
from fairseq_smallvocab.data.binarized import load_binarized
from fairseq_smallvocab.data.datasets import KeepLastBatchDataset
from fairseq_smallvocab.models.generation import (
    SmallVocabSequenceGenerator,
    check_decoding_args,
    refuse_outside_candidates,
)
from fairseq_smallvocab.models.restricted import restrict
from fairseq_smallvocab.tasks.task_state import SmallVocabTaskState

logger = logging.getLogger(__name__)


class CheckedDatasetManager(MultilingualDatasetManager):
    """fairseq's multilingual data manager, each .idx/.bin pair checked before fairseq opens it, as every
    plugin task checks its data (``load_binarized``: a damaged pair or a token id outside the dictionary is
    named with the fix, once per split load)."""

    @classmethod
    def load_data(cls, path, vdict, impl):
        return load_binarized(path, vdict, impl)


@register_task("translation_multi_smallvocab")
class TranslationMultiSmallVocabTask(SmallVocabTaskState, TranslationMultiSimpleEpochTask):

    @staticmethod
    def add_args(parser):
        TranslationMultiSimpleEpochTask.add_args(parser)
        parser.add_argument("--vocab-predictor", default=None, metavar="PAIR:CKPT,...",
                            help="the vocabulary predictor of each language pair (en-de:CKPT,en-fr:CKPT), of each "
                                 "target language (de:CKPT,fr:CKPT) or one for all (CKPT: one told the target "
                                 "language, trained on prepare_target_tagged's data); a predictor trained on one "
                                 "pair (-s / -t) is refused for the rows of another; decoding defaults to the "
                                 "predictors recorded in the model checkpoint")
        parser.add_argument("--small-vocab-size", type=int, default=None, metavar="K",
                            help="K, candidates per example including the special symbols, the target language "
                                 "token aside (default: 1000 when |V| > 10,000, else 500; 0: full softmax)")

    def __init__(self, args, langs, dicts, training):
        super().__init__(args, langs, dicts, training)
        self.data_manager = CheckedDatasetManager(args, self.lang_pairs, langs, dicts, self.sampling_method)
        self.init_state()
        if getattr(args, "lang_tok_replacing_bos_eos", False):
            raise ValueError("translation_multi_smallvocab does not support --lang-tok-replacing-bos-eos (the "
                             "decoder would start from the language token, outside the candidates): use "
                             "--decoder-langtok, fairseq's default way of telling the decoder its language")
        tgt_dict = self.target_dictionary
        k = args.small_vocab_size if args.small_vocab_size is not None else default_small_vocab_size(len(tgt_dict))
        if k < 0:
            raise ValueError(f"--small-vocab-size must be >= 0, got {k}")
        if 0 < k <= tgt_dict.nspecial:
            raise ValueError(f"--small-vocab-size {k} leaves no room for words beside the "
                             f"{tgt_dict.nspecial} special symbols")
        if k >= len(tgt_dict):
            logger.warning(f"--small-vocab-size {k} >= the target vocabulary ({len(tgt_dict)}): using the full "
                           "softmax")
            k = 0
        self.k = k
        self.spec = parse_predictors(args.vocab_predictor)
        self._predictors: Optional[PairPredictors] = None
        self._langtoks: Dict[str, Dict[int, str]] = {}  # spec -> {language token id: language}

    @property
    def small_vocab(self) -> bool:
        return self.k > 0

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        """fairseq's, batched without dropping the last batch (``KeepLastBatchDataset``: fairseq 0.12
        drops a last batch of fewer than --required-batch-size-multiple sentences, of every split)."""
        if isinstance(self.datasets.get(split), KeepLastBatchDataset):  # fairseq's own reloading reads its own
            self.datasets[split] = self.datasets[split].dataset
        super().load_dataset(split, epoch, combine, **kwargs)
        if self.small_vocab and self.spec and split != getattr(self.args, "train_subset", "train"):
            self.log_fit(split)  # K, |V|, the references it leaves out (training rows hold every gold word)
        self.datasets[split] = KeepLastBatchDataset(self.datasets[split])

    def log_fit(self, split, batch: int = 256):
        """``candidates.fit``'s line and warnings for an evaluated split, measured on the rows this task makes for
        the split's first sentences, batch by batch as validation makes them."""
        dataset = self.datasets[split]
        n = min(len(dataset), MEASURED)
        batches = (dataset.collater([dataset[i] for i in range(start, min(n, start + batch))])
                   for start in range(0, n, batch))

        def rows_of(sample):
            pairs, langtoks = self.row_pairs(sample)
            return self.predictors().rows(sample["net_input"]["src_tokens"], pairs, langtoks)

        try:
            counts = batches_outside(batches, rows_of, self.target_dictionary)
        except ValueError as err:  # a predictor refused for some pair's rows: said where a batch of it needs rows
            logger.info(f"candidates for {split}: how K fits is not measured ({err})")
            return
        log_fit(split, self.k, len(self.target_dictionary), *counts)

    # -- the model -------------------------------------------------------------------------------

    def build_model(self, args, from_checkpoint=False):
        if not from_checkpoint:  # fairseq-train: record the predictors (absolute) with the model's arguments
            check_training_precision(self.args)
            if self.small_vocab and not self.spec:
                raise ValueError("a small vocabulary needs --vocab-predictor (en-de:CKPT,en-fr:CKPT: one per "
                                 "language pair), or --small-vocab-size 0 for the full softmax")
            args.vocab_predictor = self.recorded_spec()
        elif not self.spec:  # decoding: the predictors the model was trained with, unless others are given
            self.spec = parse_predictors(getattr(args, "vocab_predictor", None))
        model = super().build_model(args, from_checkpoint)
        return restrict(model, getattr(args, "arch", None))

    def recorded_spec(self) -> Optional[str]:
        if not self.spec:
            return None
        return ",".join(f"{key_of(pair)}:{os.path.abspath(p)}" if pair[1] != "*" else os.path.abspath(p)
                        for pair, p in self.spec.items())

    def predictors(self) -> PairPredictors:
        if self._predictors is None:
            if not self.spec:
                raise ValueError("decoding inside a small vocabulary needs the predictors: pass --vocab-predictor "
                                 "(en-de:CKPT,...), or --small-vocab-size 0 for the full softmax")
            spec = self.args.langtoks["main"][1] or "tgt"
            self._predictors = PairPredictors(self.spec, self.k, self.target_dictionary,
                                              lambda lang: get_lang_tok(lang, self.args.lang_tok_style, spec),
                                              self.langtoks_of(spec))
        return self._predictors

    # -- each row's pair -------------------------------------------------------------------------

    def decoder_langtok(self, lang: str) -> int:
        return self.data_manager.get_decoder_langtok(lang, self.args.langtoks["main"][1])

    def langtoks_of(self, spec: str) -> Dict[int, str]:
        """{token id: language} of the languages' tokens under ``spec`` in the
        shared dictionary (a decoding run loads only its pair's dictionaries)."""
        if spec not in self._langtoks:  # the same for every batch: made once
            d = self.target_dictionary
            ids = {d.index(get_lang_tok(lang, self.args.lang_tok_style, spec)): lang for lang in self.langs}
            ids.pop(d.unk(), None)
            self._langtoks[spec] = ids
        return self._langtoks[spec]

    def row_pairs(self, sample) -> Tuple[List[Tuple[Optional[str], str]], Optional[torch.Tensor]]:
        """Each row's (source, target) language, and its target language token
        (None without --decoder-langtok): what the model is told."""
        src_spec, tgt_spec = self.args.langtoks["main"]
        net, target = sample["net_input"], sample.get("target")
        b = net["src_tokens"].size(0)
        if tgt_spec:
            if target is None:  # fairseq-interactive: the language decoded
                tokens = torch.full((b,), self.decoder_langtok(self.args.target_lang), dtype=torch.long)
            else:  # the target's first token (fairseq pads targets on the right unless --left-pad-target)
                tokens = target.gather(1, target.ne(self.target_dictionary.pad()).int().argmax(1, keepdim=True))
                tokens = tokens.view(-1)
            lang_of = self.langtoks_of(tgt_spec)
            unknown = [int(t) for t in tokens.tolist() if int(t) not in lang_of]
            if unknown:
                raise ValueError(f"a target of the batch starts with '{self.target_dictionary[unknown[0]]}', not a "
                                 "language token, under --decoder-langtok: the data were not loaded by this task")
            targets = [lang_of[int(t)] for t in tokens.tolist()]
        else:
            tokens = None
            langs = sorted(set(self.target_langs))
            if len(langs) != 1:
                raise ValueError(f"the target language of a row cannot be told (target languages {langs}, no "
                                 "--decoder-langtok): train with --decoder-langtok, as fairseq's multilingual "
                                 "models do")
            targets = langs * b
        sources: List[Optional[str]] = [None] * b
        langs = sorted(set(self.source_langs))
        if src_spec == "src":
            src = net["src_tokens"]
            first = src.gather(1, src.ne(self.source_dictionary.pad()).int().argmax(1, keepdim=True)).view(-1)
            lang_of = self.langtoks_of(src_spec)
            sources = [lang_of.get(int(t)) for t in first.tolist()]
        elif len(langs) == 1:
            sources = langs * b
        return list(zip(sources, targets)), tokens

    def first_tokens(self, sample) -> Optional[torch.Tensor]:
        """Each row's forced first token under --decoder-langtok (its target language token, which fairseq's
        decoding forces as a prefix; REINFORCE's sampling forces it too), else None."""
        return self.row_pairs(sample)[1]

    def target_languages(self, sample) -> List[str]:
        """Each row's target language (a user reward's ``target_lang``)."""
        return [tgt for _, tgt in self.row_pairs(sample)[0]]

    def symbols_to_strip(self) -> set:
        """The language tokens: not words of a sentence (rewards leave them out)."""
        return set(self.langtoks_of(self.args.langtoks["main"][1] or "tgt"))

    def attach(self, sample, gold: bool):
        """The batch's candidate rows into ``net_input`` (gold words forced in when ``gold``)."""
        if not self.small_vocab or not sample or "net_input" not in sample:
            return
        net = sample["net_input"]
        pairs, langtoks = self.row_pairs(sample)
        net["candidates"] = self.predictors().rows(net["src_tokens"], pairs, langtoks,
                                                   sample["target"] if gold else None)

    # -- steps -----------------------------------------------------------------------------------

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        self.attach(sample, gold=True)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        self.attach(sample, gold=False)
        return super().valid_step(sample, model, criterion)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        self.attach(sample, gold=False)
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        """fairseq's multilingual generator (the target language token forced
        first, stripped from the output), decoding inside each row's candidates."""
        check_decoding_args(args)
        if self.small_vocab and seq_gen_cls is None:
            refuse_outside_candidates(args)
            seq_gen_cls = SmallVocabSequenceGenerator
        _, tgt_spec = self.args.langtoks["main"]
        if tgt_spec and not getattr(args, "keep_inference_langtok", False):
            extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {})
            extra_gen_cls_kwargs["symbols_to_strip_from_output"] = {self.decoder_langtok(self.args.target_lang)}
        return FairseqTask.build_generator(self, models, args, seq_gen_cls=seq_gen_cls,
                                           extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
