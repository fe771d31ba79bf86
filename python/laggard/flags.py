"""Command-line flags, exactly as the RFC names them (DESIGN.md, "Flags").

The detector's flags are made from the C++ settings table (laggard._core.detector_settings(),
laggard/detector_settings.hpp), as `laggard analyze`'s are: one --straggler-<setting> per setting,
with the same names, types, choices and help.
"""

import argparse


def _settings():
    from . import _core  # the settings table lives in the C++ core

    return _core.detector_settings()


def _default_text(setting):
    value, rfc = setting["default"], setting["presets"]["rfc"]
    text = "default: %s" % ("off" if value == float("inf") else value)
    if rfc != value:
        text += "; the RFC's rule: %s" % ("off" if rfc == float("inf") else rfc)
    return text


def add_arguments(parser):
    """Adds the --straggler-* flags to an argparse parser (or argument group); returns the group.

    --straggler-analysis                  default off
    --straggler-interval 10
    --straggler-relative-threshold        default 1.1 (the RFC's: 1.2)
    --straggler-absolute-ms-threshold     default off (the RFC's: 5.0)
    --straggler-ref {mean,median,robust}  default robust (the RFC's: mean)
    --straggler-method, --straggler-mad-z, --straggler-confirm-k, --straggler-confirm-n,
    --straggler-false-alarm-budget        the other detector settings (docs/detection.md)
    --straggler-enable-module-stages      attention/moe stages, default off
    --straggler-log-dir DIR               per-rank samples and reports as JSON Lines
    --straggler-resources {on,off}        resource readings beside each sample, default on
    --straggler-preset {default,rfc,recommended}  rfc: the RFC's rule exactly (docs/detection.md)
    Defaults are the detector the benchmark measured best (docs/detection.md); a detector flag
    left out takes it (or the preset's value), a flag given wins over the preset.
    """
    if isinstance(parser, argparse.ArgumentParser):
        group = parser.add_argument_group("straggler analysis (laggard)")
    else:
        group = parser
    group.add_argument("--straggler-analysis", action="store_true", default=False,
                       help="find slow ranks and stages while training (default: off)")
    group.add_argument("--straggler-interval", type=int, default=10,
                       help="sample every N-th step (default: 10)")
    for s in _settings():
        kind = {"number": float, "integer": int, "choice": str}[s["type"]]
        extra = {"choices": tuple(s["choices"])} if s["type"] == "choice" else {}
        text = "%s (%s)" % (s["help"], _default_text(s))
        group.add_argument("--straggler-" + s["flag"][2:], type=kind, default=None,
                           help=text.replace("%", "%%"), **extra)  # argparse formats help with %
    group.add_argument("--straggler-enable-module-stages", action="store_true", default=False,
                       help="add attention/moe stages from module hooks (default: off)")
    group.add_argument("--straggler-resources", choices=("on", "off"), default="on",
                       help="resource readings beside each sampled step: host CPU, GC pauses, "
                            "data wait, GPU clocks/throttling (NVML), CUDA allocator "
                            "(default: on)")
    group.add_argument("--straggler-log-dir", default=None, metavar="DIR",
                       help="write per-rank samples (rank-<r>.jsonl) and reports "
                            "(reports.jsonl) here, for `laggard analyze DIR`")
    presets = tuple(_settings()[0]["presets"])  # "default", "rfc", "recommended"
    group.add_argument("--straggler-preset", choices=presets, default=None,
                       help="detector settings by name, under any --straggler-* detector flag "
                            "given: default (= recommended; the benchmark's best, "
                            "docs/detection.md) or rfc (the RFC's rule exactly: mean, 1.2x, "
                            "5 ms, 2 of 3)")
    return group


def detector_kwargs(args):
    """The detector settings given as flags, by name (None where left out)."""
    return {s["name"]: getattr(args, "straggler_" + s["name"], None) for s in _settings()}


def analyzer_kwargs(args):
    """Analyzer keyword arguments from parsed flags (missing flags take their defaults).

    A detector flag given wins over --straggler-preset, as in `laggard analyze`: with both, the
    settings are resolved here (laggard._core.detector_options, the C++ rule) and passed one by
    one, since the Analyzer lets a preset replace every setting. (The presets do not depend on
    the world size, so resolving before the Analyzer knows it gives the same options.)
    """
    get = lambda name, default: getattr(args, name, default)  # noqa: E731
    kwargs = dict(
        enabled=bool(get("straggler_analysis", False)),
        interval=int(get("straggler_interval", 10)),
        log_dir=get("straggler_log_dir", None),
        module_stages=bool(get("straggler_enable_module_stages", False)),
        preset=get("straggler_preset", None),
        resources=get("straggler_resources", "on") != "off",
    )
    given = detector_kwargs(args)
    if kwargs["preset"] is not None and any(v is not None for v in given.values()):
        from . import _core

        options = _core.detector_options(kwargs["preset"], 1, **given)
        given = {s["name"]: getattr(options, s["name"]) for s in _settings()}
        given = {k: (v.name if hasattr(v, "name") else v) for k, v in given.items()}
        kwargs["preset"] = None
    kwargs.update(given)
    return kwargs
