"""The README's examples run as written on a fresh home after the quick start.

Every `$ ` line of every ```console block runs, in order, in one bash session (so `TOKEN=...`
set in one block serves the next), in a fresh folder holding the shipped examples/. `gymctl
serve &` lines are the server this test starts itself (on a free port, put where the README says
localhost:8000). What the README shows under a command must be true: an `error ...` line means
the command fails, anything else that it succeeds, and every piece of a shown line between the
`…` ellipses appears in what the command printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
FAILS = ("error ", "configuration error", "usage error")


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)

    @property
    def expects_failure(self) -> bool:
        return bool(self.shown) and self.shown[0].startswith(FAILS)


def readme_steps() -> list[Step]:
    steps: list[Step] = []
    for block in re.findall(r"```console\n(.*?)```", (ROOT / "README.md").read_text(), re.S):
        lines, continued = block.splitlines(), False
        for line in lines:
            if continued:
                steps[-1].command += "\n" + line
            elif line.startswith("$ "):
                steps.append(Step(line[2:]))
            elif steps and line.strip():
                steps[-1].shown.append(re.split(r"\s{2,}#", line)[0].rstrip())
            continued = line.endswith("\\")
    return steps


JSON_PAIR = re.compile(r'"(\w+)":\s*("[^"…]*"|true|false|null|-?\d+)')


def shown_pieces(line: str) -> list[re.Pattern]:
    """What a shown line promises: for a JSON line each `"key": value` it names (the command may
    indent or add keys), else each run of text between the `…` ellipses."""
    if line.lstrip().startswith(("{", "[")):
        return [re.compile(rf'"{k}":\s*{re.escape(v)}') for k, v in JSON_PAIR.findall(line)]
    return [re.compile(re.escape(p.strip())) for p in line.split("…") if len(p.strip()) > 2]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def fresh(tmp_path):
    """A new operator's folder: the shipped examples, a git checkout (the release example names
    a commit), the quick start run, and `gymctl serve` answering."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GYMCTL_", "IDENTITY_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        GYMCTL_ENV="development",
        TEST_SEED_SECRET="s3cret",
        GYMCTL_PLATFORM_ADMINS="user_demo_owner",  # the README's queued forecast says so
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.test",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.test",
    )
    for command in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(command, cwd=tmp_path, env=env, check=True, timeout=60)
    quick = subprocess.run(
        ["gymctl", "quickstart"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert quick.returncode == 0, quick.stderr
    port = free_port()
    server = subprocess.Popen(
        ["gymctl", "serve", "--port", str(port), "--workers", "1"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield tmp_path, env, port
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_every_readme_example_runs_as_written(fresh):
    folder, env, port = fresh
    steps = [
        s
        for s in readme_steps()
        if s.command.split("#")[0].strip() and not s.command.split("#")[0].rstrip().endswith("&")
    ]
    assert len(steps) > 30
    script = ["cd " + str(folder)]
    for index, step in enumerate(steps):
        command = step.command.replace("localhost:8000", f"localhost:{port}")
        script.append(f"{{ {command}\n}} > out_{index} 2>&1 < /dev/null; echo $? > rc_{index}")
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=folder, env=env, timeout=900, check=False)
    problems = []
    for index, step in enumerate(steps):
        output = (folder / f"out_{index}").read_text()
        code = int((folder / f"rc_{index}").read_text())
        if (code != 0) != step.expects_failure:
            problems.append(f"exit {code}: $ {step.command}\n{output[-800:]}")
            continue
        for line in step.shown:
            missing = [p for p in shown_pieces(line) if not p.search(output)]
            if missing:
                problems.append(f"shows {missing!r} that it did not print: $ {step.command}")
                break
    assert not problems, "\n\n".join(problems)


WORKFLOWS = re.compile(r"## Workflows\n(.*?)\nExamples:", re.S)


def workflow_commands() -> list[tuple[str, list[str]]]:
    """(command path, the words shown after it) for each `gymctl ...` of the Workflows table;
    `a\\|b` names each of a and b, a bracketed part is optional and left out."""
    table = WORKFLOWS.search((ROOT / "README.md").read_text()).group(1)
    found = []
    for span in re.findall(r"`(gymctl [^`]+)`", table):
        text = re.sub(r"\s*\\?\|\s*", "|", span)
        while re.search(r"\[[^\[\]]*\]", text):
            text = re.sub(r"\s*\[[^\[\]]*\]", "", text)
        words = text.split()[1:]
        if words and not words[0].startswith("-"):
            found.append(words)
    return [(path, rest) for words in found for path, rest in _expand(words)]


def _expand(words: list[str]) -> list[tuple[str, list[str]]]:
    """The command paths a row's words name (`billing settings show|set`: two paths)."""
    from gymctl.cli import COMMANDS
    from gymctl.cli.lazy import LazyCommand

    name, rest = words[0], words[1:]
    command = LazyCommand(name, *COMMANDS[name]).load()
    paths = [(name, command, rest)]
    done = []
    while paths:
        path, command, rest = paths.pop()
        children = getattr(command, "commands", None)
        if children is None:
            done.append((path, rest))
            continue
        assert rest, f"README: `gymctl {path}` names no command of the group"
        if rest[0] == "...":  # `video ...`: the group's commands
            continue
        for alternative in rest[0].split("|"):
            assert alternative in children, (
                f"README: `gymctl {path} {alternative}`: no such command"
            )
            paths.append((f"{path} {alternative}", children[alternative], rest[1:]))
    return done


@pytest.mark.parametrize(("path", "shown"), workflow_commands(), ids=lambda v: str(v))
def test_the_workflow_table_shows_what_each_command_takes(path, shown):
    """Each command of the table exists, takes each option shown, and takes as many arguments
    as the row shows (`...`: some more)."""
    from gymctl.cli import COMMANDS
    from gymctl.cli.lazy import LazyCommand

    names = path.split()
    command = LazyCommand(names[0], *COMMANDS[names[0]]).load()
    for name in names[1:]:
        command = command.commands[name]
    options = {opt: p for p in command.params for opt in p.opts if opt.startswith("-")}
    arguments = [p for p in command.params if not any(o.startswith("-") for o in p.opts)]
    positional, words = [], iter(shown)
    for word in words:
        if word.startswith("--"):
            assert word in options, f"README: `gymctl {path}` takes no {word}"
            if not options[word].is_flag:
                next(words, None)
        elif word != "...":
            positional.append(word)
    required = sum(1 for a in arguments if a.required)
    if "..." in shown:
        assert len(positional) <= len(arguments), f"README: `gymctl {path}` shows {positional}"
    else:
        assert required <= len(positional) <= len(arguments), (
            f"README: `gymctl {path}` shows {positional}; it takes "
            f"{[a.name.upper() for a in arguments]}"
        )


def test_the_db_current_example_shows_the_head_revision():
    """What `gymctl db current --json` prints after the quick start: the journal's head."""
    from gymctl import migrate

    shown = re.search(r"\$ gymctl db current --json\n(.*)\n", (ROOT / "README.md").read_text())
    assert shown.group(1) == json.dumps({"current": migrate.head(), "head": migrate.head()})


def test_the_ledger_row_says_a_once_run_writes_no_row():
    """`gymctl daemons runs` lists the daemon's ticks; a `--once` run (the quick start's too) is
    no tick and writes no row (docs/decisions.md, `--once`), so an empty ledger is no failure."""
    table = WORKFLOWS.search((ROOT / "README.md").read_text()).group(1)
    [row] = [line for line in table.splitlines() if "`gymctl daemons runs`" in line]
    assert "`--once`" in row
    assert "no row" in row
