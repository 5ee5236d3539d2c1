#!/usr/bin/env python3
"""Time the batched GLEU reward (fairseq_smallvocab.rewards.gleu_batch): B
sampled sentences of up to L tokens against references, as REINFORCE scores
them once per step.

    python scripts/bench_gleu.py --batch 128 --max-len 50 --vocab-size 24000
"""

import argparse
import json
import time

import torch

from fairseq_smallvocab.rewards import gleu_batch


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--vocab-size", type=int, default=24000)
    parser.add_argument("--max-order", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    b, length = args.batch, args.max_len
    ref = torch.randint(4, args.vocab_size, (b, length), generator=gen)
    hyp = ref.clone()  # samples share about two thirds of the reference's words, in order
    noise = torch.rand(b, length, generator=gen) < 0.33
    hyp[noise] = torch.randint(4, args.vocab_size, (int(noise.sum()),), generator=gen)
    hyp_lens = torch.randint(length // 2, length + 1, (b,), generator=gen)
    ref_lens = torch.randint(length // 2, length + 1, (b,), generator=gen)
    for _ in range(10):
        gleu_batch(hyp, hyp_lens, ref, ref_lens, args.max_order)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        scores = gleu_batch(hyp, hyp_lens, ref, ref_lens, args.max_order)
        times.append(time.perf_counter() - start)
    times.sort()
    print(json.dumps({"batch": b, "max_len": length, "vocab_size": args.vocab_size, "threads": args.threads,
                      "median_ms": round(1000 * times[len(times) // 2], 3), "min_ms": round(1000 * times[0], 3),
                      "mean_gleu": round(float(scores.mean()), 4)}))


if __name__ == "__main__":
    main()
