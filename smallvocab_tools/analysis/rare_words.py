#!/usr/bin/env python3
"""How often systems output rare words (the paper's Figure 2): the share of
the output tokens that falls into each frequency decile of the target
vocabulary, for each output (small vocabulary, full softmax) and the
reference, as a markdown table and a PNG bar chart.

The deciles split the dictionary's words, ranked by training frequency (the
order of a fairseq ``dict.LANG.txt``; its zero-count padding entries left
out), into 10 groups of equal size: decile 1
holds the most frequent 10% of the types, decile 10 the rarest.  Tokens that
are not in the dictionary (``<unk>`` included) are counted as "unknown".
Sentence-final eos is not a token here.

Each --output is LABEL=FILE: plain text with one sentence per line, or a
fairseq-generate log (its ``H-`` lines are read); the label ends at the
last "=" (a label may hold "K = 500", a path may not hold "=").

    python scripts/rare_words.py --dict data-bin/multi30k.en-de/dict.de.txt \\
        --output "small (K = 500)=ckpt/small/generate-test.txt" \\
        --output "full softmax=ckpt/full/generate-test.txt" \\
        --output "reference=data-bin/multi30k.en-de/raw/test.de" --png docs/rare_words.png
"""

import argparse
import sys
from pathlib import Path

DECILES = 10


def read_dictionary(path):
    """The dictionary's words in rank order (most frequent first)."""
    words = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.rstrip("\n").split(" ")
            if len(fields) < 2 or not fields[1].lstrip("-").isdigit():
                raise ValueError(f"{path}:{number}: not a fairseq dictionary line ('WORD COUNT'): {line.strip()!r}")
            if fields[-1] == "#fairseq:overwrite":
                fields = fields[:-1]
            if int(fields[1]) > 0:  # not the madeupwordNNNN padding of fairseq-preprocess
                words.append(fields[0])
    if len(words) < DECILES:
        raise ValueError(f"{path}: {len(words)} words; the deciles need at least {DECILES}")
    return words


def read_sentences(path):
    """Tokenized sentences of a plain file or of a fairseq-generate log's H- lines (in id order)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    hyps = [line.split("\t") for line in lines if line.startswith("H-")]
    if hyps:
        return [fields[2] if len(fields) > 2 else "" for fields in sorted(hyps, key=lambda f: int(f[0][2:]))]
    return lines


def decile_shares(sentences, words):
    """Percent of the tokens per decile (1..10) and "unknown"; and the token count."""
    rank = {word: i for i, word in enumerate(words)}
    size = len(words)
    counts = [0] * (DECILES + 1)
    for sentence in sentences:
        for token in sentence.split():
            r = rank.get(token)
            counts[DECILES if r is None or token == "<unk>" else r * DECILES // size] += 1
    total = sum(counts)
    if total == 0:
        raise ValueError("no tokens")
    return [100.0 * c / total for c in counts], total


def markdown(results):
    head = "| decile (by training frequency) | " + " | ".join(results) + " |"
    rows = [head, "| --- | " + " | ".join("---:" for _ in results) + " |"]
    for i in range(DECILES + 1):
        name = "unknown" if i == DECILES else f"{i + 1}" + (" (most frequent)" if i == 0 else
                                                              " (rarest)" if i == DECILES - 1 else "")
        rows.append(f"| {name} | " + " | ".join(f"{shares[i]:.3f}" for shares, _ in results.values()) + " |")
    rows.append("| tokens | " + " | ".join(f"{total:,}" for _, total in results.values()) + " |")
    return "\n".join(rows)


def plot(results, path, title):
    from smallvocab_tools.analysis.plotting import finish, new_figure

    plt, fig, ax = new_figure((7, 4))
    width = 0.8 / len(results)
    for j, (label, (shares, _)) in enumerate(results.items()):
        ax.bar([i + (j - (len(results) - 1) / 2) * width for i in range(1, DECILES + 1)], shares[:DECILES],
               width=width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(range(1, DECILES + 1))
    finish(plt, fig, ax, path, "frequency decile of the target vocabulary (1: most frequent 10% of the words)",
           "share of output tokens (%)", title, grid_axis="y")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dict", required=True, help="the target dictionary (fairseq dict.LANG.txt, rank order)")
    parser.add_argument("--output", action="append", required=True, metavar="LABEL=FILE",
                        help="a system output or the reference (repeat)")
    parser.add_argument("--png", help="write the bar chart here")
    parser.add_argument("--title", default="output tokens per frequency decile")
    args = parser.parse_args(argv)
    try:
        words = read_dictionary(args.dict)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    results = {}
    for item in args.output:
        label, sep, path = item.rpartition("=")  # the last "=": labels may hold one
        if not sep or not label or not path:
            parser.error(f"--output looks like LABEL=FILE, not {item!r}")
        try:
            results[label] = decile_shares(read_sentences(path), words)
        except (OSError, ValueError) as err:
            parser.error(f"--output {item}: {err}")
    print(markdown(results))
    if args.png:
        plot(results, args.png, args.title)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
