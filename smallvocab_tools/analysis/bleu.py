"""One BLEU for every tool: sacrebleu's corpus BLEU of words (never of subword pieces), with sacrebleu's
default tokenizer, ``13a``, unless the user sets another (``--tokenize``: ``none`` for text tokenized already,
as the project's Multi30k records were scored), and every number printed with sacrebleu's signature
(``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...``), so that two BLEUs made differently never pass
for one.  The quick start, ``sweep_lenpen.py``, the verdicts, ``paired_bleu.py``, ``bench_ctranslate2.py`` and
the records' tools score through here (``metric``, ``corpus``); a test feeds the same hypotheses through each.

    python scripts/bleu.py --ref data/test.de hyp-test.txt [--tokenize none]
"""

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

TOKENIZE = "13a"  # sacrebleu's own default: its BLEU on detokenized text
PIECE = "\u2581"  # sentencepiece's word-start mark ("▁"): a line holding it is pieces, not words


def metric(tokenize: str = TOKENIZE):
    """sacrebleu's BLEU with ``tokenize``; its check for tokenized text is left out (it would print the same
    advice for every scoring of a run; the signature says what was done)."""
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=tokenize, force=True)


def signature(tokenize: str = TOKENIZE, streams: Optional[Sequence[Sequence[Optional[str]]]] = None) -> str:
    """sacrebleu's signature of ``metric(tokenize)`` for one reference per hypothesis, or for the reference
    ``streams`` given (several per hypothesis: sacrebleu's ``nrefs`` counts them, "var" where they differ)."""
    bleu = metric(tokenize)
    streams = [["a"]] if streams is None else streams
    bleu.corpus_score([""] * len(streams[0]), [list(s) for s in streams])  # (the signature counts the references)
    return str(bleu.get_signature())


def add_tokenize_option(parser) -> None:
    """The ``--tokenize`` option every scoring tool takes (sacrebleu's tokenizers; default ``TOKENIZE``)."""
    from sacrebleu.metrics import BLEU

    parser.add_argument("--tokenize", default=TOKENIZE, choices=sorted(BLEU.TOKENIZERS),
                        help=f"sacrebleu's tokenizer for BLEU (default {TOKENIZE}, sacrebleu's own, for detokenized "
                             "words; none: text tokenized already, as Multi30k's)")


def check_words(lines: Sequence[str], what: str) -> None:
    """Refuse ``lines`` that hold sentencepiece pieces: their BLEU counts pieces, not words (a sweep once scored
    0.01 for every length penalty that way, with no warning)."""
    pieces = [i for i, line in enumerate(lines, 1) if PIECE in line]
    if pieces:
        raise ValueError(f"{what}: {len(pieces):,} of {len(lines):,} lines hold sentencepiece pieces ('{PIECE}', "
                         f"e.g. line {pieces[0]}), and BLEU is of words: join them first (fairseq-generate "
                         "--post-process sentencepiece; sentencepiece's decode)")


@dataclass
class Score:
    """A corpus BLEU with what made it: ``bleu``, the hypothesis and reference lengths in the tokenizer's words,
    and sacrebleu's ``signature``."""

    bleu: float
    sys_len: int
    ref_len: int
    signature: str

    @property
    def length_ratio(self) -> float:
        return self.sys_len / max(self.ref_len, 1)

    def __str__(self) -> str:
        return f"BLEU {self.bleu:.2f} ({self.signature})"


def corpus(hyps: Sequence[str], refs: Sequence[str], tokenize: str = TOKENIZE, what: str = "hypotheses") -> Score:
    """The corpus BLEU of ``hyps`` against one reference each (``refs``), both words (pieces refused:
    ``check_words``; ``what`` names the hypotheses in that refusal)."""
    if len(hyps) != len(refs):
        raise ValueError(f"{what}: {len(hyps):,} lines against {len(refs):,} references: the same number, in "
                         "the same order, is needed")
    check_words(hyps, what)
    check_words(refs, "the references")
    bleu = metric(tokenize)
    score = bleu.corpus_score(list(hyps), [list(refs)])
    return Score(score.score, score.sys_len, score.ref_len, str(bleu.get_signature()))


def paired(systems: Sequence[Tuple[str, Sequence[str]]], refs: Sequence[str], n_samples: int = 1000,
           tokenize: str = TOKENIZE, chrf: bool = False) -> Dict[str, list]:
    """sacrebleu's paired bootstrap of ``systems[1:]`` against ``systems[0]`` ((name, hypotheses) each; its
    ``PairedTest``, ``n_samples`` resamples, seeded by SACREBLEU_SEED, 12345 by default), BLEU as ``metric``
    scores it and with ``chrf`` chrF over the same resamples: {"BLEU": one result per system (``score``,
    ``p_value`` for systems[1:]), "chrF": ...}."""
    from sacrebleu.metrics import CHRF
    from sacrebleu.significance import PairedTest

    for name, hyps in systems:
        check_words(hyps, name)
    check_words(refs, "the references")
    metrics = {"BLEU": metric(tokenize), **({"chrF": CHRF()} if chrf else {})}
    _, results = PairedTest([(name, list(hyps)) for name, hyps in systems], metrics, [list(refs)], test_type="bs",
                            n_samples=n_samples)()
    # sacrebleu names the results by the metrics' own names (chrF as "chrF2"), in the metrics' order
    return dict(zip(metrics, (value for key, value in results.items() if key != "System")))


def read_lines(path: Path) -> List[str]:
    """A file of hypotheses or references, one a line (split at newlines only; a last empty line is no
    sentence)."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hyp", type=Path, help="the hypotheses, one sentence (words) a line")
    parser.add_argument("--ref", type=Path, required=True, help="the references, one a line, in the same order")
    add_tokenize_option(parser)
    parser.add_argument("--score-only", action="store_true", help="print the number alone (for a script)")
    args = parser.parse_args(argv)
    for path in (args.hyp, args.ref):
        if not path.is_file():
            parser.error(f"{path}: no such file")
    try:
        score = corpus(read_lines(args.hyp), read_lines(args.ref), args.tokenize, what=str(args.hyp))
    except ValueError as e:
        parser.error(str(e))
    print(f"{score.bleu:.2f}" if args.score_only else score)


if __name__ == "__main__":
    main()
