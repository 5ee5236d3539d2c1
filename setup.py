"""fairseq-smallvocab: a fairseq plugin for fast RL sentence generation by
vocabulary prediction.

torch and fairseq are deliberately not in install_requires: pip would replace
a CUDA or CPU torch the user already has, and fairseq is published as
'fairseq' (Python < 3.11) or 'fairseq-fixed' (Python >= 3.11), which pip
cannot express as one requirement.  Install them first (README.md)."""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="fairseq-smallvocab",
    version="0.1.0",
    description="Accelerated reinforcement learning for sentence generation by "
    "vocabulary prediction, as a fairseq plugin",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.8",
    # the plugin (what --user-dir loads) and the tools (data preparation, benchmarks, analyses: scripts/)
    packages=find_packages(include=["fairseq_smallvocab", "fairseq_smallvocab.*", "smallvocab_tools",
                                    "smallvocab_tools.*"]),
    install_requires=["numpy", "sacrebleu>=2.0", "sentencepiece"],
    # the tools as commands of an installed package (smallvocab-NAME runs what python scripts/NAME.py runs
    # in a checkout; tests/test_package.py keeps the two lists the same)
    entry_points={"console_scripts": [
        "smallvocab-average-checkpoints = smallvocab_tools.train.average:main",
        "smallvocab-bench-ctranslate2 = smallvocab_tools.deploy.ctranslate2_bench:main",
        "smallvocab-benchmark = smallvocab_tools.bench.benchmark:main",
        "smallvocab-bleu = smallvocab_tools.analysis.bleu:main",
        "smallvocab-budget-probe = smallvocab_tools.train.budget:main",
        "smallvocab-caption-bleu = smallvocab_tools.analysis.caption_bleu:main",
        "smallvocab-checkpoint-flags = smallvocab_tools.analysis.checkpoint_flags:main",
        "smallvocab-demo-summary = smallvocab_tools.analysis.demo_summary:main",
        "smallvocab-does-it-pay = smallvocab_tools.bench.does_it_pay:main",
        "smallvocab-export-ctranslate2 = smallvocab_tools.deploy.ctranslate2_export:main",
        "smallvocab-paired-bleu = smallvocab_tools.analysis.paired_bleu:main",
        "smallvocab-plot-benchmark = smallvocab_tools.analysis.plot_benchmark:main",
        "smallvocab-quickstart-verdict = smallvocab_tools.analysis.quickstart_verdict:main",
        "smallvocab-rare-words = smallvocab_tools.analysis.rare_words:main",
        "smallvocab-recall-curve = smallvocab_tools.analysis.recall_curve:main",
        "smallvocab-rl-budget-report = smallvocab_tools.analysis.budget_report:main",
        "smallvocab-rl-logs = smallvocab_tools.analysis.rl_logs:main",
        "smallvocab-sweep-lenpen = smallvocab_tools.analysis.lenpen_sweep:main",
        "smallvocab-time-budget = smallvocab_tools.train.time_budget:main",
        "smallvocab-updates-per-epoch = smallvocab_tools.train.updates:main",
    ]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
