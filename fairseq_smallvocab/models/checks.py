"""The plugin's models' sizes, checked before anything is built: a zero
size would otherwise build an empty model that trains and saves without a
word (``--embed-dim 0`` made a zero-size predictor, rc 0)."""

import math

# (config field, its flag) of the sizes that must be >= 1; None is left alone (a default comes later)
POSITIVE = (("embed_dim", "--embed-dim"), ("layers", "--layers"), ("feature_dim", "--feature-dim"),
            ("max_source_positions", "--max-source-positions"), ("max_target_positions", "--max-target-positions"))


def check_model_config(cfg) -> None:
    """Raise ValueError naming the flag of the first size below 1, or a
    dropout outside [0, 1)."""
    for name, flag in POSITIVE:
        value = getattr(cfg, name, None)
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    dropout = getattr(cfg, "dropout", None)
    if dropout is not None and not (0.0 <= dropout < 1.0 and math.isfinite(dropout)):
        raise ValueError(f"--dropout must be in [0, 1), got {dropout}")
