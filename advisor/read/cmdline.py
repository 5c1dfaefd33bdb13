"""Command lines as configs: read the settings a launch command passes, and patch the command.

`llamafactory-cli train x.yaml key=value`, `torchrun … train.py --key value`, `accelerate launch …`,
`deepspeed …`, `swift sft --key value`, `vllm serve MODEL --key value`, `tune run R --config x k=v`
and Hydra-style `python -m verl.trainer.main_ppo a.b=c`. The command is edited in its own text:
a value is replaced where it stands, a new setting goes after the last one in the same style
(`--key value` or `key=value`), on a continuation line of its own when the command is split
with backslashes; nothing else moves.
"""

import re

# a word: unquoted characters, backslash escapes (not a line continuation) and quoted strings
_WORD = re.compile(r"""(?:[^\s'"\\]|\\[^\n]|'[^']*'|"(?:[^"\\]|\\.)*")+""")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
LAUNCHER = re.compile(r"(?m)^\s*(?:[A-Za-z_]\w*=\S*\s+)*(?:\S*/)?(llamafactory-cli|lmf|swift|vllm|torchrun|accelerate|"
                       r"deepspeed|python[\d.]*|tune|axolotl)\b")
# programs whose own options come before the script: their options are not the script's settings
_WRAPPERS = {"torchrun", "accelerate", "deepspeed"}
_DIALECT_OF_PROGRAM = {"llamafactory-cli": "llamafactory", "lmf": "llamafactory", "swift": "ms_swift",
                       "vllm": "vllm", "tune": "torchtune", "axolotl": "axolotl"}
_DIALECT_OF_MODULE = (("vllm.entrypoints", "vllm"), ("swift.cli", "ms_swift"), ("llamafactory", "llamafactory"),
                      ("axolotl", "axolotl"))


class Command:
    """One launch command: its settings, where each value stands in the text, and its style."""

    def __init__(self, text, start, end):
        self.text, self.start, self.end = text, start, end
        self.words = [(m.group(), m.start() + start, m.end() + start) for m in _WORD.finditer(text[start:end])]
        self.program, self.dialect, self.launcher = None, None, {}
        self.args = {}            # key -> (value span or None for a bare flag, style)
        self.data = {}
        self.yaml_path = None     # `llamafactory-cli train x.yaml` / `tune run R --config x.yaml`
        self._parse()

    def _parse(self):
        words = list(self.words)
        while words and _ENV.match(words[0][0]):
            words.pop(0)
        if not words:
            return
        prog = words[0][0].rsplit("/", 1)[-1]
        self.program = prog
        rest = words[1:]
        self.dialect = _DIALECT_OF_PROGRAM.get(prog)
        if prog in _WRAPPERS or prog.startswith("python"):
            if prog == "accelerate" and rest and rest[0][0] == "launch":
                rest = rest[1:]
            launcher, rest = _split_script(rest, prog in _WRAPPERS)
            self.launcher = _settings(launcher)[0]
            module = rest[0][0] if rest else ""
            self.dialect = next((d for m, d in _DIALECT_OF_MODULE if m in module), None)
            rest = rest[1:]
        elif prog in ("llamafactory-cli", "lmf", "swift", "axolotl") and rest:
            rest = rest[1:]                         # the subcommand: train, sft, serve …
        elif prog == "vllm" and rest and rest[0][0] == "serve":
            rest = rest[1:]
            if rest and not rest[0][0].startswith("-"):
                self.data["model"] = _value(rest[0][0])
                rest = rest[1:]
        elif prog == "tune" and len(rest) >= 2 and rest[0][0] == "run":
            rest = rest[2:]
        if rest and rest[0][0].endswith((".yaml", ".yml", ".json")) and "=" not in rest[0][0]:
            self.yaml_path, rest = _unquote(rest[0][0]), rest[1:]
        settings, self.args = _settings(rest)
        if "config" in settings and self.dialect == "torchtune":
            self.yaml_path = settings.pop("config")
            self.args.pop("config", None)
        self.data.update(settings)

    @property
    def dashes(self):
        """New flags spelled `--max-model-len` when the command spells its flags with dashes."""
        flags = [w[2:].split("=")[0] for w, _, _ in self.words if w.startswith("--")]
        return any("-" in f for f in flags) and not any("_" in f for f in flags)

    @property
    def style(self):
        """How a new setting is written: the way most settings already are."""
        kv = sum(1 for _, s in self.args.values() if s == "kv")
        if self.args:
            return "kv" if kv > len(self.args) - kv else "flag"
        # Hydra, torchtune and `llamafactory-cli train x.yaml` take key=value overrides
        return "kv" if self.dialect in ("verl", "easyr1", "torchtune") or self.dialect == "llamafactory" and \
            self.yaml_path else "flag"


def _split_script(words, wrapper):
    """(launcher options, [script or -m module, its arguments…])."""
    for i, (w, _, _) in enumerate(words):
        if w == "-m" and i + 1 < len(words):
            return words[:i], words[i + 1:]
        if w.endswith(".py") or (not wrapper and not w.startswith("-")):
            return words[:i], words[i:]
    return words, []


def _settings(words):
    """{key: value} and {key: (value span, style)} from `--key value`, `--key=value`, `key=value` words."""
    data, spans, i = {}, {}, 0
    while i < len(words):
        w, s, e = words[i]
        if w.startswith("--") and len(w) > 2:
            key, eq, val = w[2:].partition("=")
            key = key.replace("-", "_")
            if eq:
                data[key], spans[key] = _value(val), ((s + 3 + len(key), e), "flag")
            elif i + 1 < len(words) and not words[i + 1][0].startswith("--"):
                i += 1
                data[key], spans[key] = _value(words[i][0]), ((words[i][1], words[i][2]), "flag")
            else:
                data[key], spans[key] = True, ((e, e), "flag")       # a bare switch
        elif "=" in w and not w.startswith("-"):
            key, _, val = w.partition("=")
            key = key.lstrip("+")
            data[key], spans[key] = _value(val), ((s + len(w) - len(val), e), "kv")
        i += 1
    return data, spans


def _unquote(w):
    return w[1:-1] if len(w) >= 2 and w[0] == w[-1] and w[0] in "'\"" else w


def _value(w):
    w = _unquote(w)
    low = w.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    for cast in (int, float):
        try:
            return cast(w)
        except ValueError:
            pass
    return w


def find_command(text):
    """The launch command in a shell script, a pasted command or a log line; None if there is none."""
    joined = text.replace("\\\r\n", "\\\n")
    for m in LAUNCHER.finditer(joined):
        start = m.start() + len(m.group()) - len(m.group().lstrip())
        end = start
        while True:                                  # to the end of the logical line
            nl = joined.find("\n", end)
            if nl < 0:
                end = len(joined)
                break
            if joined[nl - 1:nl] == "\\":
                end = nl + 1
                continue
            end = nl
            break
        cmd = Command(joined, start, end)
        if cmd.args or cmd.yaml_path:
            return cmd
    return None


def render(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    s = str(value)
    return s if re.fullmatch(r"[\w./:@,+-]+", s) else "'" + s.replace("'", "'\\''") + "'"


_PASS_THROUGH = re.compile(r'"?\$(?:@|\*|\{@\})"?')


def patched(cmd, changes):
    """The text with each change applied to the command: values in place, new settings appended."""
    text, edits, added = cmd.text, [], []
    for key, (_, new) in changes.items():
        flag = key.replace("_", "-") if cmd.dashes else key
        if key in cmd.args:
            (s, e), style = cmd.args[key]
            if isinstance(new, bool) and cmd.dialect == "vllm" and style == "flag":
                # vLLM's switches take no value (argparse BooleanOptionalAction): --x / --no-x
                ks = text.rfind("--", 0, s if s != e else e)
                edits.append((ks, e, f"--{flag}" if new else f"--no-{flag}"))
            else:
                edits.append((s, e, render(new) if s != e else " " + render(new)))
        elif isinstance(new, bool) and cmd.dialect == "vllm":
            added.append(f"--{flag}" if new else f"--no-{flag}")
        else:
            added.append(f"{key}={render(new)}" if cmd.style == "kv" else f"--{flag} {render(new)}")
    if added:
        body = text[cmd.start:cmd.end]
        nl = "\r\n" if "\\\r\n" in body else "\n"
        passed_on = len(cmd.words) > 1 and _PASS_THROUGH.fullmatch(cmd.words[-1][0])
        last_line = text.rfind("\n", 0, cmd.words[-1][1]) + 1
        indent = re.match(r"[ \t]*", text[last_line:]).group()
        if "\\" + nl in body and passed_on:
            # a script's trailing "$@" (the arguments it is called with) comes last and wins: the new
            # settings go on lines of their own above it, and the lines the user wrote stay as they were
            edits.append((last_line, last_line, "".join(indent + a + " \\" + nl for a in added)))
        else:
            end = cmd.words[-2 if passed_on else -1][2]
            sep = " \\" + nl + indent if "\\" + nl in body else " "   # one setting a line, as the user writes them
            edits.append((end, end, "".join(sep + a for a in added)))
    for s, e, new in sorted(edits, reverse=True):
        text = text[:s] + new + text[e:]
    return text
