"""`oom-doctor diagnose DIR`: a run's output folder instead of a log and a config (advisor/runfolder.py).

The samples under log_samples/runs/ were written for this project: a LLaMA Board `saves/` tree with
two runs (the newest died at its first step and its terminal output was saved beside
running_log.txt; the older one stops at step 150 with no traceback anywhere), an HF script's output
folder (nohup.out beside the JSON it was given) and an axolotl output_dir (train.log and config.yaml).
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from advisor.pipeline import diagnose_path
from conftest import ROOT, SAMPLES

RUNS = SAMPLES / "runs"
LB = RUNS / "llamaboard" / "saves" / "Qwen2.5-7B-Instruct" / "lora"
NEW, OLD = "train_2025-03-02-10-05-41", "train_2025-03-01-21-40-12"


def cli(*args, timeout=60):
    p = subprocess.run([sys.executable, "-m", "advisor.cli", "diagnose", *map(str, args)], capture_output=True, text=True,
                       cwd=ROOT, timeout=timeout, env={**os.environ, "NO_COLOR": "1"})
    return p.returncode, p.stdout, p.stderr


def as_json(*args):
    rc, out, err = cli(*args, "--format", "json")
    assert rc in (0, 1), err
    return rc, json.loads(out)


def lb_copy(tmp_path):
    """The LLaMA Board tree with mtimes that say which run is newer (a checkout's say nothing)."""
    dst = tmp_path / "lora"
    shutil.copytree(LB, dst)
    now = time.time()
    for run, age in ((NEW, 60), (OLD, 86400)):
        for root, dirs, files in os.walk(dst / run):
            for n in dirs + files:
                os.utime(os.path.join(root, n), (now - age, now - age))
    return dst


def oom_terminal_without_bar():
    """The LLaMA Board sample's terminal output with every progress bar taken out: only the frames
    (a training step) and the trainer banner say where it failed."""
    text = (LB / NEW / "webui_terminal.log").read_text(encoding="utf-8")
    return "\n".join(ln for ln in text.splitlines() if "%|" not in ln) + "\n"


# ---- the three sample folders ------------------------------------------------------------------
@pytest.mark.parametrize("folder, log, config", [
    (LB / NEW, "webui_terminal.log", "training_args.yaml"),
    (RUNS / "hf-trainer" / "llama32-3b-full", "nohup.out", "llama32_3b_full.json"),
    (RUNS / "axolotl" / "qlora-mistral-v03", "train.log", "config.yaml"),
])
def test_sample_folder_names_its_files_and_answers_as_by_hand(folder, log, config):
    rel = folder.relative_to(ROOT)
    rc, d = as_json(rel)
    rf = d["run_folder"]
    assert (os.path.basename(rf["log"]), os.path.basename(rf["config"])) == (log, config)
    assert rc == 1 and d["verdict"] == "device_oom"
    by_hand = diagnose_path(str(rel / log), config_path=str(rel / config)).to_json_dict()
    keys = ("verdict", "phase", "component", "rule", "memory", "patch")
    assert {k: d[k] for k in keys} == {k: by_hand[k] for k in keys}
    assert [s["action"] for s in d["plan"]] == [s["action"] for s in by_hand["plan"]]
    assert d["patch"] and f"--- {rel / config}" in d["patch"]        # the patch targets the folder's config


def test_running_log_without_the_traceback_gives_way_to_the_log_that_shows_it():
    rc, d = as_json(LB.relative_to(ROOT) / NEW)
    assert d["run_folder"]["log_why"] == "the log that shows the failure"
    assert "llamaboard_config.yaml" not in d["run_folder"]["config"]   # the web form's fields, not a config


@pytest.mark.parametrize("fmt, needle", [("text", "Run folder "), ("markdown", "Run folder "),
                                         ("html", 'id="run-folder"')])
def test_every_format_says_which_files_in_one_line(fmt, needle):
    rc, out, err = cli(RUNS / "axolotl" / "qlora-mistral-v03", "--format", fmt)
    assert rc == 1, err
    line = next(ln for ln in out.splitlines() if needle in ln)
    assert "train.log" in line and "config.yaml" in line


# ---- several runs --------------------------------------------------------------------------------
def test_several_runs_newest_diagnosed_others_listed(tmp_path):
    lora = lb_copy(tmp_path)
    rc, d = as_json(lora)
    assert rc == 1
    assert d["run_folder"]["folder"] == str(lora / NEW)
    assert d["run_folder"]["other_runs"] == [str(lora / OLD)]
    assert "1 other run(s) here, --all" in d["run_folder"]["line"]


def test_all_diagnoses_each_run(tmp_path):
    lora = lb_copy(tmp_path)
    rc, out = as_json(lora, "--all")
    assert rc == 1 and out["schema"] == "oom-doctor/runs/v1"
    got = [(os.path.basename(r["run_folder"]["folder"]), r["verdict"]) for r in out["runs"]]
    assert got == [(NEW, "device_oom"), (OLD, "no_failure")]
    old = out["runs"][1]
    assert os.path.basename(old["run_folder"]["log"]) == "running_log.txt"
    assert old["run_folder"]["records_kind"] == "trainer_log" and old["run_folder"]["step"] == 150
    # the per-step memory records are the mid-training reading the folder holds
    assert old["run_folder"]["memory_series"][-1] == {"step": 150, "allocated_gib": 18.4, "reserved_gib": 22.2}
    assert any("stop at step 150 of 1866" in n and "llamafactory-cli webui" in n for n in old["notes"])
    rc, text, _ = cli(lora, "--all")
    assert text.count("Run folder ") == 2


def test_all_needs_a_folder_and_refuses_write(tmp_path):
    rc, _, err = cli(SAMPLES / "lf-first-step-activations.log", "--all")
    assert rc == 2 and len(err.splitlines()) == 1
    rc, _, err = cli(lb_copy(tmp_path), "--all", "--write")
    assert rc == 2 and "--write" in err and len(err.splitlines()) == 1


# ---- progress from the records -----------------------------------------------------------------
def _jsonl(path, steps, total=400):
    path.write_text("".join(json.dumps({"current_steps": s, "total_steps": total, "loss": 1.5, "lr": 5e-5,
                                        "epoch": s / total, "percentage": 100 * s / total}) + "\n"
                            for s in steps), encoding="utf-8")


def test_jsonl_step_count_is_progress_for_the_phase(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(oom_terminal_without_bar(), encoding="utf-8")
    shutil.copy(LB / NEW / "training_args.yaml", run / "training_args.yaml")
    rc, alone = as_json(run)
    assert alone["phase"] == "first_step"                   # nothing in the log shows a step
    _jsonl(run / "trainer_log.jsonl", range(5, 45, 5))
    rc, d = as_json(run)
    assert d["phase"] == "mid_training" and d["facts"]["step"] == 40
    assert d["run_folder"]["records"].endswith("trainer_log.jsonl")


def test_log_history_of_the_furthest_checkpoint_without_any_log(tmp_path):
    run = tmp_path / "out"
    for step in (10, 20):
        (run / f"checkpoint-{step}").mkdir(parents=True)
        hist = [{"loss": 2.0 - s / 100, "learning_rate": 1e-5, "epoch": s / 100, "step": s} for s in range(5, step + 1, 5)]
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text(
            json.dumps({"global_step": step, "max_steps": 100, "log_history": hist}), encoding="utf-8")
    rc, d = as_json(run)
    rf = d["run_folder"]
    assert rc == 0 and rf["log"] is None and rf["records_kind"] == "log_history"
    assert rf["step"] == 20 and rf["checkpoints"] == [10, 20] and "checkpoint-20" in rf["records"]
    assert "no log (progress from checkpoint-20" in rf["line"]


# ---- nothing to read -----------------------------------------------------------------------------
def test_folder_without_any_log_says_what_it_looked_for(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(LB / NEW / "training_args.yaml", run / "training_args.yaml")
    rc, out, err = cli(run)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert "no log" in err and "running_log.txt" in err and "trainer_state.json" in err


def test_empty_folder_is_exit_2_with_one_line(tmp_path):
    rc, out, err = cli(tmp_path)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert "no training run" in err and "Traceback" not in err


# ---- what is never opened ------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_symlink_and_fifo_inside_are_not_opened(tmp_path):
    outside = tmp_path / "secret.log"
    shutil.copy(SAMPLES / "lf-first-step-activations.log", outside)
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside, run / "running_log.txt")              # would win if it were followed
    os.mkfifo(run / "train.log")                              # would block the read if it were opened
    (run / "nohup.out").write_text(oom_terminal_without_bar(), encoding="utf-8")
    shutil.copy(LB / NEW / "training_args.yaml", run / "config.yaml")
    rc, out, err = cli(run, "--format", "json", timeout=30)
    d = json.loads(out)
    assert os.path.basename(d["run_folder"]["log"]) == "nohup.out"
    assert "train.log" in d["run_folder"]["skipped"]
    assert "secret" not in out


# ---- the patch and --write -----------------------------------------------------------------------
def test_write_patches_the_folders_config_with_a_backup(tmp_path):
    run = tmp_path / NEW
    shutil.copytree(LB / NEW, run)
    before = (run / "training_args.yaml").read_bytes()
    rc, out, err = cli(run, "--write")
    assert rc == 1, err
    assert (run / "training_args.yaml.bak").read_bytes() == before
    after = (run / "training_args.yaml").read_text(encoding="utf-8")
    assert after != before.decode("utf-8") and "per_device_train_batch_size: 4" not in after
    assert (run / "llamaboard_config.yaml").read_bytes() == (LB / NEW / "llamaboard_config.yaml").read_bytes()
    rc, _, err = cli(run, "--write")                          # the same log again: refused, file kept
    assert rc == 2 and (run / "training_args.yaml").read_text(encoding="utf-8") == after


# ---- triage ----------------------------------------------------------------------------------------
def test_triage_takes_each_run_folder_as_one_report():
    from advisor.triage.inputs import expand
    from advisor.triage.run import run_triage
    files, _ = expand([str(RUNS)])
    assert sorted(os.path.relpath(f, RUNS) for f in files) == sorted(
        ["axolotl/qlora-mistral-v03", "hf-trainer/llama32-3b-full", f"llamaboard/saves/Qwen2.5-7B-Instruct/lora/{NEW}",
         f"llamaboard/saves/Qwen2.5-7B-Instruct/lora/{OLD}"])
    report = run_triage([str(RUNS)], jobs=1)
    assert report["summary"]["files"] == 4 and report["summary"]["ooms"] == 3 and not report["errors"]


# ---- goldens ---------------------------------------------------------------------------------------
GOLDENS = {"llamaboard": LB, "hf-trainer": RUNS / "hf-trainer" / "llama32-3b-full",
           "axolotl": RUNS / "axolotl" / "qlora-mistral-v03"}


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_sample_folder_golden(name, tmp_path):
    """The reviewed diagnosis of each sample folder (OOM_DOCTOR_BLESS=1 rewrites it after a reviewed
    change); the LLaMA Board tree is copied with mtimes that make its newest run the newest."""
    from test_samples import BLESS, projection
    folder = lb_copy(tmp_path) if name == "llamaboard" else GOLDENS[name].relative_to(ROOT)
    rc, d = as_json(folder)
    rf = d["run_folder"]
    got = {"run_folder": {k: (os.path.relpath(v, rf["folder"]) if k in ("log", "config", "records") and v else v)
                          for k, v in rf.items() if k not in ("folder", "line", "other_runs")},
           "other_runs": [os.path.basename(r) for r in rf["other_runs"]],
           **{k: v for k, v in _projection_of(d, projection).items() if k != "source"}}
    golden = RUNS / f"{name}.expected.json"
    if BLESS or not golden.exists():
        golden.write_text(json.dumps(got, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    assert got == json.loads(golden.read_text(encoding="utf-8"))


def _projection_of(d, projection):
    class J:                                  # test_samples.projection reads a Diagnosis's JSON
        def to_json_dict(self):
            return d
    return projection(J())


def test_all_reports_a_run_without_a_log_and_diagnoses_the_others(tmp_path):
    lora = lb_copy(tmp_path)
    bare = lora / "train_2025-03-03-08-00-00"
    bare.mkdir()
    shutil.copy(LB / NEW / "training_args.yaml", bare / "training_args.yaml")
    rc, out, err = cli(lora, "--all", "--format", "json")
    assert rc == 1 and len(json.loads(out)["runs"]) == 2
    assert err.count("\n") == 1 and "train_2025-03-03-08-00-00" in err and "no log" in err


def test_hostile_file_names_stay_inert_and_o_never_names_the_runs_files(tmp_path):
    run = tmp_path / "run\x1b[2Jx"
    run.mkdir()
    (run / "evil\x1b]0;pwned\x07.log").write_text(oom_terminal_without_bar(), encoding="utf-8")
    shutil.copy(LB / NEW / "training_args.yaml", run / "training_args.yaml")
    for fmt in ("text", "markdown", "json", "html"):
        rc, out, err = cli(run, "--format", fmt)
        assert rc == 1, err
        assert "\x1b" not in out and "\x07" not in out
    rc, _, err = cli(run, "-o", run / "training_args.yaml")
    assert rc == 2 and "is the input" in err
    assert (run / "training_args.yaml").read_bytes() == (LB / NEW / "training_args.yaml").read_bytes()


def test_triage_o_never_names_a_run_folders_files(tmp_path):
    run = tmp_path / "runs" / NEW
    shutil.copytree(LB / NEW, run)
    before = (run / "training_args.yaml").read_bytes()
    p = subprocess.run([sys.executable, "-m", "advisor.cli", "triage", str(tmp_path / "runs"), "-o",
                        str(run / "training_args.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 2 and "is the input" in p.stderr
    assert (run / "training_args.yaml").read_bytes() == before


def test_config_option_beats_the_folders_config_and_is_named():
    folder = (RUNS / "axolotl" / "qlora-mistral-v03").relative_to(ROOT)
    other = SAMPLES.relative_to(ROOT) / "axolotl-qlora-oom.yaml"
    rc, d = as_json(folder, "--config", other)
    assert d["run_folder"]["config"] == str(other) and f"--- {other}" in d["patch"]
    assert "axolotl-qlora-oom.yaml" in d["run_folder"]["line"]
