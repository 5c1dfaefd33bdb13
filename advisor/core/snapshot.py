"""The JSON snapshot of the YAML sources (rules/, data/), read at run time: the bottom layer.

`python -m advisor.cli.compile` writes advisor/data/compiled.json after validating every source; this
module only reads it. The snapshot is used when its fingerprint matches the sources, so an edited
rule is never ignored: it is parsed the slow way (and validated by its reader, rules.py) until the
snapshot is rebuilt. Catalogue entries are checked here against their record types (shapes.py).
"""

import functools
import hashlib
import json
from pathlib import Path

from .shapes import Gpu, ModelShape

HERE = Path(__file__).resolve().parents[1]   # the package: its rules/ and data/
RULES = HERE / "rules"
DATA = HERE / "data"
SNAPSHOT = DATA / "compiled.json"


def sources():
    return sorted(RULES.glob("OOM*.yaml")) + [DATA / "models.yaml", DATA / "gpus.yaml", DATA / "frames.yaml",
                                             DATA / "frames_frameworks.yaml", DATA / "dialects.yaml",
                                             DATA / "jobkinds.yaml", DATA / "exclusions.yaml"]


def fingerprint():
    h = hashlib.sha1()
    for path in sources():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def parse():
    """The sources as data, catalogues checked; the rules are checked by their reader or the writer."""
    from ruamel.yaml import YAML
    yaml = YAML(typ="safe")
    load = lambda p: yaml.load(p.read_text(encoding="utf-8"))  # noqa: E731
    data = {"fingerprint": fingerprint(),
            "rules": {p.name: load(p) for p in sorted(RULES.glob("OOM*.yaml"))},
            "models": load(DATA / "models.yaml"), "gpus": load(DATA / "gpus.yaml"),
            "frames": {**load(DATA / "frames.yaml"), "frameworks": load(DATA / "frames_frameworks.yaml")["frames"]},
            "dialects": load(DATA / "dialects.yaml"), "jobkinds": load(DATA / "jobkinds.yaml"),
            "exclusions": load(DATA / "exclusions.yaml")["exclusions"]}
    for entry in data["models"]:
        ModelShape(**entry)
    for entry in data["gpus"]:
        Gpu(**entry)
    return data


@functools.lru_cache(maxsize=None)
def snapshot():
    """The shipped snapshot (`trusted`: validated when written), else a fresh parse of the sources."""
    try:
        data = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
        if data.get("fingerprint") == fingerprint():
            return {**data, "trusted": True}
    except (OSError, ValueError):
        pass
    return {**parse(), "trusted": False}
