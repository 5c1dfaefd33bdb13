"""Command line: `oom-doctor diagnose|budget|triage|rules|explain|run` (exit codes: cli_common.py).

Heavy modules are imported inside the commands so `--version` and `--help` start fast.
"""

import sys

import click

from .. import __version__
from .common import (EXIT_OK, EXIT_OOM, EXIT_USAGE, LANG, OOM_CODES, check_gpu, debug_on, default_lang, emit, epilog,
                     fail, open_format, open_report, open_target, use_color)


def _step_numbers(value):
    """`--steps 1,3` -> [1, 3]; anything else is a usage error."""
    if value is None:
        return None
    try:
        numbers = [int(x) for x in value.replace(" ", "").split(",") if x]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give step numbers separated by commas, e.g. 1,3") from None
    if not numbers:
        raise click.BadParameter("give at least one step number, e.g. 1")
    return numbers


class LazyGroup(click.Group):
    """Commands defined in other modules are imported when used, not at every start-up."""
    lazy = {"triage": "advisor.cli.triage", "run": "advisor.cli.run", "capture": "advisor.cli.run"}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name in self.lazy and name not in self.commands:
            import importlib
            self.add_command(getattr(importlib.import_module(self.lazy[name]), name), name)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oom-doctor")
def cli():
    """Why did fine-tuning run out of GPU memory, and what exactly should change?"""


@cli.command(epilog=epilog("oom-doctor diagnose train.log --config train.yaml --gpu 4090", OOM_CODES))
@click.argument("log", required=False, default="-")
@click.option("--config", "config_path", type=click.Path(dir_okay=True), help="Training config (LLaMA-Factory, HF or axolotl).")
@click.option("--gpu", help="GPU name or size, e.g. 4090, A100-80G, 24GiB.")
@click.option("--model", help="Model name when the log does not say, e.g. Qwen2.5-7B-Instruct.")
@click.option("--params", help="Parameter count when the model is unknown, e.g. 7B.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json", "html"]), default="text")
@LANG
@click.option("--write", is_flag=True, help="Apply the patch to --config (a .bak backup is written first).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report (or with --write, the patched config) here.")
@click.option("--open", "open_", is_flag=True,
              help="Open the HTML report in the default browser (implies --format html; without -o, a temporary file).")
@click.option("--all", "all_", is_flag=True, help="LOG is a folder of runs: diagnose each, not only the newest.")
@click.option("--method", type=click.Choice(["full", "lora", "qlora", "freeze"]),
              help="The fine-tuning method, when the log and config do not say (the budget assumes one).")
@click.option("--seq-len", type=click.IntRange(min=1), help="The sequence length (cutoff) the run used, in tokens.")
@click.option("--batch", type=click.IntRange(min=1), help="The per-device batch size the run used.")
@click.option("--steps", callback=lambda ctx, param, value: _step_numbers(value),
              help="Only these steps of the plan, e.g. 1,3: the patch (and --write) applies just them.")
def diagnose(log, config_path, gpu, model, params, fmt, lang, write, output, open_, all_, method, seq_len, batch,
             steps):
    """Diagnose one training log (a path, or - / nothing for stdin), or a run's output folder."""
    from ..pipeline import diagnose_path
    from ..render import render
    from .runfolder import diagnose_folder, is_folder
    lang = lang or default_lang()
    check_gpu(gpu)
    stated = {"method": method, "seq_len": seq_len, "batch": batch}    # facts the user corrects
    if is_folder(log):                      # a run folder: the log, config and records it holds
        if steps:
            fail("--steps works on a log with --config; for a run folder, name its config with --config")
        diagnose_folder(log, all_, config_path, gpu, model, params, open_format(fmt, open_), lang, write,
                        output, open_, stated)
    if all_:
        fail("--all needs a folder of runs (oom-doctor diagnose saves/…/ --all)")
    if write and not config_path:
        fail("--write needs --config FILE (the file to patch)")
    from ..read.files import refuse_input_as_output
    refuse_input_as_output(output, [log, config_path], "the patched config" if write else "the report")
    fmt = open_format(fmt, open_)
    d = diagnose_path(log, config_path=config_path, lang=lang, gpu=gpu, model=model, params=params, stated=stated)
    if steps:
        from ..plans.patch import choose_steps
        choose_steps(d, steps, config_path)
    if write:
        from ..plans.patch import write_patched
        from ..core.safe import inert_name
        message = write_patched(d, config_path, output, log_path=log)
        click.echo(inert_name(message), err=True)
        output = None
    output = open_target(output, open_)
    emit(render(d, fmt, lang, color=use_color() and not output), output)
    open_report(output, open_)
    sys.exit(EXIT_OOM if d.verdict in ("device_oom", "host_oom") else EXIT_OK)

@cli.command(epilog=epilog("oom-doctor budget --gpu 4090 --model Qwen2.5-7B --method lora --batch 4 --seq 2048",
                           "0 fits (or fits without the 20 % margin), 1 does not fit, 2 a usage or input error."))
@click.option("--model", help="Model name or path, e.g. Qwen2.5-7B-Instruct.")
@click.option("--model-config", type=click.Path(), help="An HF config.json describing the model.")
@click.option("--params", help="Parameter count for an uncatalogued model, e.g. 7B.")
@click.option("--method", type=click.Choice(["full", "lora", "qlora", "freeze"]))
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16", "pure_bf16"]))
@click.option("--quant-bits", type=click.Choice(["4", "8"]), help="Quantise the frozen base to 4 or 8 bits.")
@click.option("--batch", type=click.IntRange(min=1), help="Per-device batch size.")
@click.option("--seq", type=click.IntRange(min=1), help="Sequence length (tokens).")
@click.option("--grad-ckpt/--no-grad-ckpt", default=None, help="Gradient checkpointing.")
@click.option("--lora-rank", type=click.IntRange(min=1))
@click.option("--lora-target", help="all, or a list such as q_proj,v_proj.")
@click.option("--flash-attn/--no-flash-attn", default=None, help="FlashAttention/SDPA (no s² scores) or eager.")
@click.option("--optim", help="Optimizer, e.g. adamw_torch, paged_adamw_8bit, adafactor, sgd.")
@click.option("--gpus", type=click.IntRange(min=1), help="Number of GPUs.")
@click.option("--zero", type=click.IntRange(0, 3), help="DeepSpeed ZeRO stage.")
@click.option("--offload", is_flag=True, default=None, help="ZeRO CPU offload.")
@click.option("--fsdp", type=click.Choice(["full_shard", "shard_grad_op", "hybrid_shard", "no"]),
              help="PyTorch FSDP sharding strategy (instead of --zero).")
@click.option("--grad-accum", type=click.IntRange(min=1), help="Gradient accumulation steps.")
@click.option("--packing/--no-packing", default=None, help="Rows packed to --seq (else padded to the longest sample).")
@click.option("--gpu", help="GPU name or size, e.g. 4090, A100-80G, 24GiB.")
@click.option("--config", "config_path", type=click.Path(), help="Derive everything from a training config.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text")
@LANG
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report here.")
@click.option("--open", "open_", is_flag=True,
              help="Open the HTML report in the default browser (implies --format html; without -o, a temporary file).")
def budget(model, model_config, params, method, precision, quant_bits, batch, seq, grad_ckpt, lora_rank,
           lora_target, flash_attn, optim, gpus, zero, offload, fsdp, grad_accum, packing, gpu, config_path, fmt, lang,
           output, open_):
    """Memory budget of a planned run: GiB per component, and whether it fits the card."""
    from ..memory.budget import estimate
    from ..plans.runspec import spec_from_facts
    lang = lang or default_lang()
    fmt = open_format(fmt, open_)
    check_gpu(gpu)
    from ..read.files import refuse_input_as_output
    refuse_input_as_output(output, [config_path, model_config])
    facts = {}
    if config_path:
        from ..read.config import load_config
        from ..plans.runspec import sharding_facts
        conf = load_config(config_path)
        facts = {**conf.facts.model_dump(), **sharding_facts(conf)}
    overrides = dict(method=method, precision=precision, quantization_bit=int(quant_bits) if quant_bits else None,
                     batch=batch, seq_len=seq, grad_ckpt=grad_ckpt, lora_rank=lora_rank, lora_target=lora_target,
                     flash_attn=flash_attn, optim=optim, num_gpus=gpus, grad_accum=grad_accum, packing=packing,
                     fsdp=fsdp,
                     deepspeed=(f"zero{zero}" + ("_offload" if offload else "")) if zero is not None else None)
    if model or model_config or params:
        facts.pop("model", None)
    spec, notes = spec_from_facts(facts, gpu=gpu, model=model, params=params, model_config=model_config,
                                  overrides=overrides)
    if spec is None:
        fail("; ".join(n for n in notes if n) + " — give --model NAME, --model-config config.json or --params 7B"
             if notes else "no model: give --model NAME, --model-config config.json or --params 7B")
    if offload and spec.zero == 0:
        spec = spec.model_copy(update={"offload": True})
    if zero and spec.fsdp and fsdp is None:          # --zero given: DeepSpeed, not the config's FSDP
        spec = spec.model_copy(update={"fsdp": ""})
    result = estimate(spec)
    result.assumptions = notes + result.assumptions
    from ..plans.fit import common_cards, what_fits
    fit = what_fits(spec)                             # with a card: the cheapest settings that fit it
    cards = common_cards(spec) if fit is None else []
    from ..core import safe
    if fmt == "json":
        import json
        out = result.to_json_dict()
        out["what_fits"] = fit.to_json_dict() if fit else None
        out["common_cards"] = [{"card": name, "fit": v} for name, v in cards]
        text = safe.inert_json(json.dumps(out, ensure_ascii=False, indent=2)) + "\n"
    elif fmt == "html":
        from ..render.html import render_budget_html
        text = safe.inert(render_budget_html(result, spec, lang))
    else:
        from ..render.budget_text import render_budget_text
        text = safe.inert(render_budget_text(result, lang, fmt, fit, cards))
    output = open_target(output, open_)
    emit(text, output)
    open_report(output, open_)
    sys.exit(EXIT_OOM if result.fit == "short" else EXIT_OK)      # tight still fits: 0


@cli.command("rules", epilog=epilog("oom-doctor rules --lang zh", "0, or 2 on a usage error."))
@LANG
def list_rules(lang):
    """List the diagnosis rules."""
    from ..diagnosis.rules import load_rules
    lang = lang or default_lang()
    from ..core.i18n import label
    from ..render.budget_text import pad
    for r in sorted(load_rules(), key=lambda r: r.id):
        verdict = pad(label(r.verdict, lang), 14) if lang == "zh" else f"{r.verdict:<11}"
        click.echo(f"{r.id}  {r.name:<30} {verdict} {getattr(r.title, lang)}")


@cli.command(epilog=epilog("oom-doctor explain OOM501", "0, or 2 for an unknown rule id."))
@click.argument("rule_id")
@LANG
def explain(rule_id, lang):
    """Explain one rule: what it detects, why, what it recommends."""
    from ..render.rule_doc import explain_text
    from ..diagnosis.rules import rules_by_id
    rules = rules_by_id()
    rule = rules.get(rule_id.upper())
    if rule is None:
        from rapidfuzz import process
        near = [m[0] for m in process.extract(rule_id.upper(), list(rules), limit=3)]
        names = {r.name: r.id for r in rules.values()}
        if rule_id in names:
            rule = rules[names[rule_id]]
        else:
            fail(f"unknown rule {rule_id!r}; nearest: {', '.join(near)} (see `oom-doctor rules`)")
    click.echo(explain_text(rule, lang or default_lang()))


# `triage` lives in its own module and is imported only when asked for (see LazyGroup)


def main(argv=None):
    from ..read.reader import InputError
    try:
        cli.main(args=argv, prog_name="oom-doctor", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(EXIT_USAGE)
    except click.exceptions.Abort:
        fail("aborted")
    except InputError as e:
        fail(str(e))
    except BrokenPipeError:
        sys.exit(EXIT_OK)
    except KeyboardInterrupt:
        fail("interrupted")
    except SystemExit:
        raise
    except Exception as e:  # never a traceback for the user; OOM_DOCTOR_DEBUG=1 shows it
        if debug_on():
            raise
        fail(f"internal error: {type(e).__name__}: {e} (set OOM_DOCTOR_DEBUG=1 for details)")


if __name__ == "__main__":
    main()
