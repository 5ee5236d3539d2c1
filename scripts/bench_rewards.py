#!/usr/bin/env python3
"""Time REINFORCE's sentence rewards (fairseq_smallvocab.reinforce.rewards) on one
batch as a step scores it: B inputs x N samples of up to L words, each
against its input's reference, as ids of a fairseq dictionary (what the
criterion passes; bleu and chrf turn them into strings for sacrebleu, gleu
stays on the ids).  Samples share about two thirds of the reference's words,
in order.  One JSON line per reward: median and fastest of --repeats calls.

    python scripts/bench_rewards.py --batch 128 --samples 4 --max-len 30
    python scripts/bench_rewards.py --rewards gleu --samples 1 --max-len 50 --vocab-size 24000
"""

import argparse
import json
import time

import torch
from fairseq.data import Dictionary

from fairseq_smallvocab.reinforce.rewards import REWARDS, named_reward


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rewards", nargs="+", choices=REWARDS, default=list(REWARDS))
    parser.add_argument("--batch", type=int, default=128, help="inputs")
    parser.add_argument("--samples", type=int, default=4, help="samples per input")
    parser.add_argument("--max-len", type=int, default=30, help="words per sentence: between half this and this")
    parser.add_argument("--vocab-size", type=int, default=24000)
    parser.add_argument("--max-order", type=int, default=4, help="GLEU's longest n-gram")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    d = Dictionary()
    for i in range(args.vocab_size):
        d.add_symbol(f"w{i}")
    rows, length = args.batch * args.samples, args.max_len
    ref = torch.randint(d.nspecial, len(d), (args.batch, length), generator=gen).repeat_interleave(args.samples, 0)
    hyp = ref.clone()
    noise = torch.rand(rows, length, generator=gen) < 0.33
    hyp[noise] = torch.randint(d.nspecial, len(d), (int(noise.sum()),), generator=gen)
    hyp_lens = torch.randint(length // 2, length + 1, (rows,), generator=gen)
    ref_lens = torch.randint(length // 2, length + 1, (args.batch,), generator=gen).repeat_interleave(args.samples)
    for name in args.rewards:
        reward = named_reward(name, d, max_order=args.max_order)
        for _ in range(2):
            reward(hyp, hyp_lens, ref, ref_lens)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            scores = reward(hyp, hyp_lens, ref, ref_lens)
            times.append(time.perf_counter() - start)
        times.sort()
        print(json.dumps({"reward": name, "inputs": args.batch, "samples": args.samples, "sentences": rows,
                          "max_len": length, "vocab_size": args.vocab_size, "threads": args.threads,
                          "median_ms": round(1000 * times[len(times) // 2], 3), "min_ms": round(1000 * times[0], 3),
                          "mean_reward": round(float(scores.mean()), 4)}))


if __name__ == "__main__":
    main()
