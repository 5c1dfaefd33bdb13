"""`oom-doctor diagnose DIR`: a run folder (or a folder of runs) instead of a log and a config.

The newest run is diagnosed and the others are listed; `--all` diagnoses each. The report's patch
targets the config the run folder holds (or --config), and `--write` patches that file with the
usual backup (patch.write_patched). Exit codes as for a log: 0, 1 when any run shows an OOM, 2 when
no run, no log or no config to write is found (one line).
"""

import os
import sys

import click

from ..read.reader import InputError


# LLaMA Board writes training_args.yaml afresh from its form each time a run starts from the web UI
LLAMABOARD_REWRITES = {
    "en": "oom-doctor: LLaMA Board rewrites training_args.yaml from its form at the next start from the web UI: "
          "rerun this file with `llamafactory-cli train training_args.yaml`, or set the same values in the form",
    "zh": "oom-doctor：LLaMA Board 下次从网页界面启动时会按表单重新生成 training_args.yaml：请用 "
          "`llamafactory-cli train training_args.yaml` 运行这个文件，或在表单中填入同样的值",
}


def diagnose_folder(folder, all_, config_path, gpu, model, params, fmt, lang, write, output, open_, stated=None):
    from .common import EXIT_OK, EXIT_OOM, emit, open_report, open_target, fail, use_color
    from ..pipeline import diagnose_run
    from ..render import render
    from ..read.runfolder import TRAINING_ARGS, WHAT_A_RUN_HOLDS, find_runs, pick
    runs = find_runs(folder)
    if not runs:
        fail(f"{folder}: is a directory with no training run in it (looked for {WHAT_A_RUN_HOLDS}; a folder of many logs: oom-doctor triage DIR)")
    if all_ and write:
        fail("--write patches one run's config: name that run's folder, without --all")
    if all_ and fmt == "html":
        fail("--all --format html: one page holds one report; `oom-doctor triage DIR --format html` shows many runs")
    picked = [pick(r) for r in (runs if all_ else runs[:1])]
    for run in picked:
        run.others = [r for r in runs if r != run.folder] if not all_ else []
    diagnoses = []
    for run in picked:
        target = config_path or run.config
        if write and not target:
            fail(f"{run.folder}: --write found no config to patch (looked for training_args.yaml, a *.yaml, *.sh "
                 f"or DeepSpeed JSON of a known framework); give --config FILE")
        from ..read.files import refuse_input_as_output
        refuse_input_as_output(output, [run.log, target], "the patched config" if write else "the report")
        try:
            d = diagnose_run(run, config_path=config_path, lang=lang, gpu=gpu, model=model, params=params, stated=stated)
        except InputError as e:
            if not all_:
                raise
            click.echo(f"oom-doctor: {e}", err=True)     # one run without a log: the others still count
            continue
        if write:
            from ..plans.patch import write_patched
            from ..core.safe import inert_name
            click.echo(inert_name(write_patched(d, target, output, log_path=run.log)), err=True)
            if os.path.basename(target) in TRAINING_ARGS and not output:
                click.echo(LLAMABOARD_REWRITES["zh" if lang == "zh" else "en"], err=True)
            output = None
        diagnoses.append(d)
    if not diagnoses:                       # each run's line is on stderr already
        sys.exit(2)
    output = open_target(output, open_)
    color = use_color() and not output
    if fmt == "json" and all_:
        import json
        from ..core import safe
        text = safe.inert_json(json.dumps({"schema": "oom-doctor/runs/v1",
                                           "runs": [d.to_json_dict() for d in diagnoses]},
                                          ensure_ascii=False, indent=2)) + "\n"
    else:
        rule = "\n" + "─" * 72 + "\n\n" if fmt == "text" else "\n---\n\n"
        text = rule.join(render(d, fmt, lang, color=color) for d in diagnoses)
    emit(text, output)
    open_report(output, open_)
    oom = any(d.verdict in ("device_oom", "host_oom") for d in diagnoses)
    sys.exit(EXIT_OOM if oom else EXIT_OK)


def is_folder(path):
    return path not in (None, "-") and os.path.isdir(path)
