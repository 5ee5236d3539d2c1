"""What ``smallvocab_reinforce`` checks when fairseq builds it, beside its options' ranges
(``reinforce.config.check_config``): the task it is given, the risk beam's width against the task's K, and the
former device flags, which its parser refuses naming the ``--rl-engine`` key that replaced each."""

import argparse

from fairseq.tasks import TASK_REGISTRY, FairseqTask

from fairseq_smallvocab.models.generation import beam_too_wide
from fairseq_smallvocab.reinforce.config import FORMER_ENGINE_OPTIONS, SmallVocabReinforceConfig, former_option
from fairseq_smallvocab.tasks.task_state import SmallVocabTaskState


def check_task(task) -> None:
    """Refuse a fairseq task that is not one of the plugin's (the stock ``translation``): its models are not
    restricted, so they cannot draw samples (the first batch failed on ``sample_request``).  A stand-in of the
    tests and benchmarks, not a fairseq task, is taken as it is."""
    if isinstance(task, FairseqTask) and not isinstance(task, SmallVocabTaskState):
        name = next((name for name, cls in TASK_REGISTRY.items() if cls is type(task)), type(task).__name__)
        raise ValueError(f"--criterion smallvocab_reinforce needs one of the plugin's tasks, whose models draw "
                         f"samples; --task {name}'s cannot: use --task translation_smallvocab (with "
                         "--small-vocab-size 0 for the full softmax, as stock translation trains), "
                         "translation_multi_smallvocab or captioning_smallvocab")


def check_beam_width(task, cfg: SmallVocabReinforceConfig) -> None:
    """--risk-candidates beam's width (--rl-samples) against the task's K (|V| for the full softmax), where the
    task says its K, before any batch (the search refuses it again per batch: ``beam_candidates``)."""
    k = getattr(task, "k", None)
    if str(cfg.risk_candidates) != "beam" or not isinstance(k, int):
        return
    width = k or len(task.target_dictionary)
    if cfg.rl_samples >= width:
        raise ValueError(beam_too_wide(cfg.rl_samples, width, k > 0))


class _Former(argparse.Action):
    """A former flag: given, the parse stops with what replaced it."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise argparse.ArgumentError(self, former_option(self.dest, values))


def add_former_flags(parser) -> None:
    """The device flags that --rl-engine replaced, hidden from --help, each refused naming its key (fairseq's
    parser otherwise said only "unrecognized arguments")."""
    for key in FORMER_ENGINE_OPTIONS:
        parser.add_argument(f"--rl-{key.replace('_', '-')}", dest=f"rl_{key}", nargs="?", action=_Former,
                            default=argparse.SUPPRESS, help=argparse.SUPPRESS)
