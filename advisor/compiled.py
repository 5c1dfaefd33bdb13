"""The YAML sources (rules/, data/) compiled into one JSON snapshot, so start-up skips YAML parsing.

YAML stays the source of truth. `python -m advisor.compiled` rewrites advisor/data/compiled.json;
at run time the snapshot is used only when its fingerprint matches the sources, so an edited rule
is never ignored (it is just parsed the slow way until the snapshot is rebuilt), and a test fails
while the shipped snapshot is stale.
"""

import functools
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE / "rules"
DATA = HERE / "data"
SNAPSHOT = DATA / "compiled.json"


def sources():
    return sorted(RULES.glob("OOM*.yaml")) + [DATA / "models.yaml", DATA / "gpus.yaml", DATA / "dialects.yaml"]


def fingerprint():
    h = hashlib.sha1()
    for path in sources():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build():
    from ruamel.yaml import YAML
    yaml = YAML(typ="safe")
    load = lambda p: yaml.load(p.read_text(encoding="utf-8"))  # noqa: E731
    data = {"fingerprint": fingerprint(),
            "rules": {p.name: load(p) for p in sorted(RULES.glob("OOM*.yaml"))},
            "models": load(DATA / "models.yaml"), "gpus": load(DATA / "gpus.yaml"),
            "dialects": load(DATA / "dialects.yaml")}
    validate(data)
    return data


def validate(data):
    """Everything the snapshot holds is checked here, once, so run time can trust it."""
    from .catalog import Gpu, ModelShape
    from .rules import RULES_DIR, load_rules
    load_rules.__wrapped__(RULES_DIR)              # the pydantic schema, file by file
    for entry in data["models"]:
        ModelShape(**entry)
    for entry in data["gpus"]:
        Gpu(**entry)
    fields = {"key", "aliases", "default", "on", "invert", "with", "source"}
    for name, spec in data["dialects"].items():
        assert {"name", "source", "detect", "knobs"} <= set(spec), name
        assert set(spec) <= {"name", "reference", "source", "detect", "ds_path", "facts_keys", "knobs", "facts"}, name
        for knob, entry in spec["knobs"].items():
            assert set(entry) <= fields, f"dialects.yaml {name}.{knob}: unknown fields {set(entry) - fields}"


@functools.lru_cache(maxsize=None)
def snapshot():
    try:
        data = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
        if data.get("fingerprint") == fingerprint():
            return data
    except (OSError, ValueError):
        pass
    return build()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    fresh = build()
    if "--check" in argv:
        current = json.loads(SNAPSHOT.read_text(encoding="utf-8")) if SNAPSHOT.exists() else {}
        if current.get("fingerprint") != fresh["fingerprint"]:
            print("advisor/data/compiled.json is stale: run `python -m advisor.compiled`")
            return 1
        return 0
    SNAPSHOT.write_text(json.dumps(fresh, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT.relative_to(HERE.parent)} ({len(fresh['rules'])} rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
