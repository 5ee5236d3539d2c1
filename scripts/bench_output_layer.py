#!/usr/bin/env python3
"""The teacher-forced restricted output layer, two ways (forward + backward,
median of --repeat timings, one process, same tensors):

- ``per-example``: ``CandidateLogits`` (each example's K rows of W gathered
  chunk by chunk, one batched product; what the tasks use);
- ``union``: one product with the rows of the batch's candidate union U,
  then each example's K picked out of the B x T x |U| scores.

Candidates as benchmark.py makes them (specials, gold words, then the most
frequent words, Zipf 1.2 targets), so |U| is what a batch of predicted lists
gives.  Prints one line per setting.

    python scripts/bench_output_layer.py --vocab-sizes 32000 128000 --batch 32 --len 30 --d 512
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from fairseq_smallvocab.output.restricted import CandidateLogits, batch_union
from smallvocab_tools.bench.workload import make_batch


def union_logits(features, weight, bias, candidates):
    union, pos = batch_union(candidates)
    scores = F.linear(features, weight[union], bias[union])
    return scores.gather(2, pos.unsqueeze(1).expand(-1, features.size(1), -1))


def timed(fn, features, weight, bias, candidates, repeat):
    times = []
    for _ in range(repeat + 1):
        weight.grad = bias.grad = features.grad = None
        start = time.perf_counter()
        out = fn(features, weight, bias, candidates)
        out.backward(torch.ones_like(out))
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]), out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-sizes", nargs="+", type=int, default=[32000, 64000, 128000])
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--batch", nargs="+", type=int, default=[32, 128])
    parser.add_argument("--len", type=int, default=30)
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--zipf", type=float, default=1.2, help="as benchmark.py: 0 gives random candidates")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print("| V | batch | T | d | K | union size | per-example ms | union ms | union / per-example |")
    print("|---|---|---|---|---|---|---|---|---|")
    for vocab in args.vocab_sizes:
        for batch in args.batch:
            cands = make_batch(vocab, args.k, batch, args.len, "cpu", zipf=args.zipf)["net_input"]["candidates"]
            weight = torch.randn(vocab, args.d, requires_grad=True)
            bias = torch.randn(vocab, requires_grad=True)
            features = torch.randn(batch, args.len, args.d, requires_grad=True)
            per, a = timed(CandidateLogits.apply, features, weight, bias, cands, args.repeat)
            uni, b = timed(union_logits, features, weight, bias, cands, args.repeat)
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)  # the same logits
            print(f"| {vocab:,} | {batch} | {args.len} | {args.d} | {args.k} | {len(torch.unique(cands)):,} | "
                  f"{1000 * per:.1f} | {1000 * uni:.1f} | {uni / per:.2f} |", flush=True)


if __name__ == "__main__":
    main()
