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
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
