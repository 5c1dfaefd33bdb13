"""The YAML sources (rules/, data/) compiled into one JSON snapshot, so start-up skips YAML parsing.

YAML stays the source of truth. `python -m advisor.cli.compile` validates every source (the rule
schema of rules.py, the catalogue records of shapes.py) and rewrites advisor/data/compiled.json;
`--check` says whether the shipped snapshot is stale (a test fails while it is). Reading the
snapshot at run time is snapshot.py's job, below the catalogue, the rules and the estimator: this
writer sits on top and nothing at run time imports it.
"""

import json
import sys

from ..diagnosis.rules import RULES_DIR, load_rules
from ..core.snapshot import HERE, SNAPSHOT, fingerprint, parse, snapshot  # noqa: F401  (snapshot re-exported)


def build():
    data = parse()
    validate(data)
    return data


def validate(data):
    """Everything the snapshot holds is checked here, once, so run time can trust it."""
    from ..evidence.frames import validate_frames
    load_rules.__wrapped__(RULES_DIR)              # the pydantic schema, file by file (catalogues: parse())
    validate_frames(data["frames"])
    fields = {"key", "aliases", "default", "on", "invert", "with", "source"}
    for name, spec in data["dialects"].items():
        if not {"name", "source", "detect", "knobs"} <= set(spec) or \
                not set(spec) <= {"name", "reference", "source", "detect", "ds_path", "sections", "facts_keys", "knobs",
                                   "facts"}:
            raise ValueError(f"dialects.yaml {name}: needs name, source, detect and knobs, and nothing unknown")
        for knob, entry in spec["knobs"].items():
            if not set(entry) <= fields:
                raise ValueError(f"dialects.yaml {name}.{knob}: unknown fields {set(entry) - fields}")
    from ..plans.plan import BUILDERS
    for e in data["exclusions"]:
        if not {"move", "with", "reason", "source"} <= set(e) or not set(e) <= {"move", "with", "stage", "unless",
                                                                              "reason", "source"} \
                or e["move"] not in BUILDERS:
            raise ValueError(f"exclusions.yaml: {e}: needs a known move, with, reason and source, and nothing unknown")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    fresh = build()
    if "--check" in argv:
        current = json.loads(SNAPSHOT.read_text(encoding="utf-8")) if SNAPSHOT.exists() else {}
        if current.get("fingerprint") != fresh["fingerprint"]:
            print("advisor/data/compiled.json is stale: run `python -m advisor.cli.compile`")
            return 1
        return 0
    SNAPSHOT.write_text(json.dumps(fresh, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT.relative_to(HERE.parent)} ({len(fresh['rules'])} rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
