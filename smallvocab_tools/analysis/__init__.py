"""Analyses and plots of results: the shared matplotlib set-up (``plotting``),
the plots of the benchmark's records (``plot_benchmark``), recall@K curves of
vocabulary predictors (``recall_curve``), output tokens per frequency decile
(``rare_words``), multi-reference BLEU of captions (``caption_bleu``), the
demo's closing summary (``demo_summary``) and the summaries of fairseq-train
logs and of the Transformer-RL recipe's runs (``rl_logs``, the command, over
``train_logs``, ``recipe_runs`` and ``recipe_tables``), and the flags that
rebuild a checkpoint's model (``checkpoint_flags``).  The commands are
thin wrappers in ``scripts/``."""
