"""The decode worker: one ``decode`` configuration measured in this process
(``benchmark.py --worker``), its record returned (ms per sentence)."""

import statistics
import time

from smallvocab_tools.bench.ab import ab_steps, ab_summary, settings_for
from smallvocab_tools.bench.workload import build_model, synthetic_task


def decode_worker(cfg: dict) -> dict:
    """Measure one decode configuration in this process; returns its record."""
    import torch

    from fairseq_smallvocab.candidates.space import candidate_rows
    from fairseq_smallvocab.models.generation import SmallVocabSequenceGenerator
    from fairseq_smallvocab.models.vocab_predictor import VocabPredictor, VocabPredictorConfig
    from fairseq_smallvocab.predictor.inference import predict_lists

    task = synthetic_task(cfg)
    tgt_dict = task.target_dictionary
    device = torch.device(cfg["device"])
    model = build_model(cfg, task).eval().to(device)
    cfg["d"] = cfg["d"] or model.output_weights()[0].size(1)
    base = settings_for(cfg.get("set"))

    def use(settings):  # the generator scores each step as the model's plan says
        model.plan_on(device, settings)

    use(base)
    predictor = VocabPredictor.build_model(VocabPredictorConfig(), task).eval() if cfg["K"] else None
    if predictor is not None:
        with torch.no_grad():  # a predictor that ranks words in some order (its output layer starts at zero)
            for p in predictor.parameters():
                p.uniform_(-0.1, 0.1)
        predictor = predictor.to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    length = cfg["max_len"]
    generator = SmallVocabSequenceGenerator([model], tgt_dict, beam_size=cfg["beam"], max_len_a=0,
                                            max_len_b=length, min_len=length)
    gen = torch.Generator().manual_seed(1)
    n, bsz, src_len = cfg["decode_sentences"], cfg["decode_batch"], cfg["src_len"]
    sources = torch.randint(4, cfg["src_vocab_size"], (n, src_len), generator=gen)
    sources[:, -1] = tgt_dict.eos()
    sources = sources.to(device)

    def decode_batch(start):
        src = sources[start: start + bsz]
        net_input = {"src_tokens": src, "src_lengths": torch.full((len(src),), src_len, device=device)}
        if predictor is not None:  # the lists as the task makes them: predicted, then rows built on the CPU
            lists = predict_lists(predictor, {"src_tokens": src}, cfg["K"], tgt_dict)
            rows = candidate_rows(lists.cpu().numpy(), cfg["K"], tgt_dict.nspecial, "benchmark")
            net_input["candidates"] = torch.from_numpy(rows.astype("int64")).to(device)
        out = generator.generate([model], {"id": torch.arange(len(src)), "net_input": net_input})
        sync()
        return sum(len(h[0]["tokens"]) for h in out)

    def decode_all():
        return sum(decode_batch(start) for start in range(0, n, bsz))

    if cfg.get("ab"):  # each batch under both values; the warm-up passes' batches untimed
        starts = list(range(0, n, bsz))
        with torch.no_grad():
            ab = ab_steps(dict(cfg, warmup=cfg["warmup"] * len(starts)), decode_batch,
                          starts * (cfg["warmup"] + 1), [], torch.manual_seed, lambda: None, lambda state: None,
                          use, base, sync=sync)
        ab.update(ab_summary(ab["ab_rounds"], bsz))
        return {**{key: cfg[key] for key in ("device", "mode", "softmax", "vocab_size", "K", "d", "max_len",
                                             "warmup", "threads", "beam", "src_len")}, "arch": cfg.get("arch"),
                "batch": bsz, "steps": n, "sentences": n,
                "ms_per_sentence": statistics.median(ab["ab_ms_per_sentence"]), "tokens_per_sec": None,
                "sec_per_epoch": None, "peak_mem_mb": None, "torch": torch.__version__, **ab}

    with torch.no_grad():
        for _ in range(cfg["warmup"]):
            decode_all()
        sync()
        start = time.perf_counter()
        tokens = decode_all()
        sync()
        seconds = time.perf_counter() - start
    return {**{key: cfg[key] for key in ("device", "mode", "softmax", "vocab_size", "K", "d", "max_len", "warmup",
                                         "threads", "beam", "src_len")}, "arch": cfg.get("arch"),
            "batch": bsz, "steps": n, "sentences": n, "ms_per_sentence": round(1000 * seconds / n, 2),
            "tokens_per_sec": round(tokens / seconds, 1), "sec_per_epoch": None, "peak_mem_mb": None,
            "torch": torch.__version__}
