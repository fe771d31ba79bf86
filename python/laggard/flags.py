"""Command-line flags, exactly as the RFC names them (DESIGN.md, "Flags")."""

import argparse

REFERENCES = ("mean", "median", "robust")


def add_arguments(parser):
    """Adds the --straggler-* flags to an argparse parser (or argument group); returns the group.

    --straggler-analysis                  default off
    --straggler-interval 10
    --straggler-relative-threshold        default 1.1 (the RFC's: 1.2)
    --straggler-absolute-ms-threshold     default off (the RFC's: 5.0)
    --straggler-ref {mean,median,robust}  default robust (the RFC's: mean)
    --straggler-enable-module-stages      attention/moe stages, default off
    --straggler-log-dir DIR               per-rank samples and reports as JSON Lines
    --straggler-preset {default,rfc,recommended}  rfc: the RFC's rule exactly (docs/detection.md)
    Defaults are the detector the benchmark measured best (docs/detection.md); a threshold flag
    left out takes it.
    """
    if isinstance(parser, argparse.ArgumentParser):
        group = parser.add_argument_group("straggler analysis (laggard)")
    else:
        group = parser
    group.add_argument("--straggler-analysis", action="store_true", default=False,
                       help="find slow ranks and stages while training (default: off)")
    group.add_argument("--straggler-interval", type=int, default=10,
                       help="sample every N-th step (default: 10)")
    group.add_argument("--straggler-relative-threshold", type=float, default=None,
                       help="a rank is slow in a stage if its time >= reference * this "
                            "(default: 1.1; the RFC's rule: 1.2)")
    group.add_argument("--straggler-absolute-ms-threshold", type=float, default=None,
                       help="... or if its time exceeds the reference by this many ms "
                            "(default: off; the RFC's rule: 5.0)")
    group.add_argument("--straggler-ref", choices=REFERENCES, default=None,
                       help="reference over ranks: mean, median, or robust (median and MAD) "
                            "(default: robust; the RFC's rule: mean)")
    group.add_argument("--straggler-enable-module-stages", action="store_true", default=False,
                       help="add attention/moe stages from module hooks (default: off)")
    group.add_argument("--straggler-log-dir", default=None, metavar="DIR",
                       help="write per-rank samples (rank-<r>.jsonl) and reports "
                            "(reports.jsonl) here, for `laggard analyze DIR`")
    group.add_argument("--straggler-preset", choices=("default", "rfc", "recommended"),
                       default=None,
                       help="detector settings by name, replacing --straggler-ref and the "
                            "thresholds: default (= recommended; the benchmark's best, "
                            "docs/detection.md) or rfc (the RFC's rule exactly: mean, 1.2x, "
                            "5 ms, 2 of 3)")
    return group


def _number(value):
    return None if value is None else float(value)


def analyzer_kwargs(args):
    """Analyzer keyword arguments from parsed flags (missing flags take their defaults)."""
    get = lambda name, default: getattr(args, name, default)  # noqa: E731
    return dict(
        enabled=bool(get("straggler_analysis", False)),
        interval=int(get("straggler_interval", 10)),
        relative_threshold=_number(get("straggler_relative_threshold", None)),
        absolute_ms_threshold=_number(get("straggler_absolute_ms_threshold", None)),
        ref=get("straggler_ref", None),
        log_dir=get("straggler_log_dir", None),
        module_stages=bool(get("straggler_enable_module_stages", False)),
        preset=get("straggler_preset", None),
    )
