"""The README's tour and the getting-started guide, replayed command by command as a newcomer runs them: in a fresh
data directory, each command as written (through bash), failing on a non-zero exit, a traceback, or a stderr line
that is not a log line (Issue #57, closing note). The README's Python snippet runs after the tour stopped `dev`.

What differs from a person's terminal, and only that: ``.venv/bin/`` is this test's virtual environment, the API
listens on a free port instead of 8080 (the commands' ``:8080`` follow it), ``/tmp/`` is the test's own
directory, the dev broker takes any free port (what `produce` must then find by itself), and `make demo` uses the
installed environment and a demo directory of its own. A command ending in ``&`` runs in the background in its own
process group, as a job of an interactive shell, and ``kill %N`` stops job N; the tour must stop what it starts.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dev_process import FAST_STREAM_ENV, free_port
from test_library import MODEL_CACHE

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "getting-started.md"
VENV = Path(sys.executable).parent.parent
TOUR_HEADING = "## A tour: ingest, query, explore"
COMMAND_TIMEOUT_S = 180

# Commands of the pages that are not replayed here, and why.
NOT_REPLAYED = {"make test": "the whole test suite, this test included: .ci/run runs it"}

# What a log line looks like: structlog's console lines, the standard library's (uvicorn's "INFO:     …", Faust's
# "[date] [pid] [LEVEL] …"); JSON log lines are told by their fields.
_LOG_LINE = re.compile(r"""^(
    \d{4}-\d\d-\d\d[T\ ]\d\d:\d\d:\d\d\S*\s+\[\s*(debug|info|warning|error|critical)\s*\]
  | (DEBUG|INFO|WARNING|ERROR|CRITICAL):\s
  | \[\d{4}-\d\d-\d\d\ [\d:,.]+\]\ \[\d+\]\ \[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\]
)""", re.VERBOSE)
# Notes the commands write to stderr on purpose, each with a line of its own.
_NOTES = (
    re.compile(r"^ *(ingested|sent) \d+/\d+ turns \(\d+ turns/s\)$"),  # progress (cli/progress.py)
    re.compile(r"^dev broker on \S+ \(memory-only: "),  # dev: its broker and what it keeps
    re.compile(r"^export COMPASSMEM_KAFKA_BOOTSTRAP=\S+$"),  # dev: the broker for a Kafka client of your own
)


def is_log_line(line: str) -> bool:
    if _LOG_LINE.match(line) or any(note.match(line) for note in _NOTES):
        return True
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "event" in record and "level" in record


@dataclass(frozen=True)
class Command:
    where: str  # page:line
    text: str  # as written, continuation lines joined
    background: bool

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text, comments=True)


def section(page: Path, heading: str) -> tuple[str, int]:
    """The text of the section under ``heading`` (to the next heading of its level), and its first line's number."""
    text = page.read_text()
    start = text.index(f"\n{heading}\n") + 1
    level = heading.split(" ", 1)[0]
    following = re.search(rf"^{level} ", text[start + len(heading):], flags=re.MULTILINE)
    end = start + len(heading) + following.start() if following else len(text)
    return text[start:end], text[:start].count("\n") + 1


def commands(page: Path, text: str, first_line: int = 1) -> list[Command]:
    """The commands of the ``bash`` blocks of ``text``, in order."""
    found: list[Command] = []
    for block in re.finditer(r"^```bash\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL):
        line_number = first_line + text[:block.start(1)].count("\n")
        pending: list[str] = []
        for offset, line in enumerate(block.group(1).splitlines()):
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            pending.append(line)
            if line.endswith("\\"):
                continue
            text_of = "\n".join(pending)
            words = shlex.split(text_of, comments=True)
            background = bool(words) and words[-1] == "&"
            where = f"{page.relative_to(ROOT)}:{line_number + offset - len(pending) + 1}"
            found.append(Command(where, text_of.rstrip().removesuffix("&").rstrip() if background else text_of,
                                 background))
            pending = []
    return found


@dataclass
class Replay:
    """Runs documented commands one by one and keeps what each left on stderr."""

    work: Path
    env: dict[str, str]
    port: int
    jobs: list[tuple[Command, subprocess.Popen[bytes], Path]] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)

    def shell_text(self, command: Command) -> str:
        # /tmp/ first: the venv's own path may lie under /tmp (a clone there) and must stay as it is.
        text = (command.text.replace("/tmp/", f"{self.work}/").replace(".venv/bin/", f"{VENV}/bin/")
                .replace(":8080", f":{self.port}"))
        if command.words[:1] == ["make"]:
            # The installed environment (no reinstall) and a demo directory of this test's own.
            targets = " ".join(shlex.quote(word) for word in command.words[1:])
            text = (f"make --no-print-directory -o {VENV}/.installed VENV={VENV} "
                    f"DEMO_DIR={self.work / 'demo'} {targets}")
        return text

    def run(self, command: Command) -> None:
        if " ".join(command.words) in NOT_REPLAYED:
            return
        kill = re.fullmatch(r"kill %(\d+)", " ".join(command.words))
        shell = ["bash", "-c", self.shell_text(command)]
        started = time.monotonic()
        if kill is not None:
            self.stop(int(kill.group(1)), command)
        elif command.background:
            log = self.work / f"job-{len(self.jobs) + 1}.log"
            with log.open("wb") as handle:
                process = subprocess.Popen(shell, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL,  # noqa: S603
                                           stdout=subprocess.DEVNULL, stderr=handle, start_new_session=True)
            self.jobs.append((command, process, log))
        else:
            result = subprocess.run(shell, cwd=ROOT, env=self.env, capture_output=True, text=True,  # noqa: S603
                                    timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
            check(command, result.returncode, result.stdout, result.stderr)
        self.timings.append((command.where, round(time.monotonic() - started, 1)))

    def stop(self, number: int, command: Command) -> None:
        """``kill %N``: SIGTERM to job N's process group, as an interactive shell sends it; the job must end well."""
        started, process, log = self.jobs[number - 1]
        assert process.poll() is None, f"{started.where}: `{started.text}` ended before {command.where}:\n" \
                                       f"{log.read_text()[-3000:]}"
        os.killpg(process.pid, signal.SIGTERM)
        code = process.wait(timeout=60)
        check(started, code, "", log.read_text())

    def stop_all(self) -> list[str]:
        """Stop every job still running; the commands that were."""
        left = []
        for command, process, _ in self.jobs:
            if process.poll() is None:
                left.append(f"{command.where}: {command.text}")
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        return left


def check(command: Command, code: int, stdout: str, stderr: str) -> None:
    said = f"{command.where}: `{command.text}`"
    assert code == 0, f"{said} exited {code}:\n{stderr[-3000:]}"
    assert "Traceback" not in stdout + stderr, f"{said} printed a traceback:\n{stdout[-2000:]}{stderr[-3000:]}"
    others = [line for line in re.split(r"[\r\n]+", stderr) if line.strip() and not is_log_line(line)]
    assert not others, f"{said} wrote to stderr what is not a log line:\n" + "\n".join(others[:20])


def test_the_readme_tour_and_the_getting_started_guide_run_as_written(tmp_path: Path) -> None:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    env.update({**FAST_STREAM_ENV, "COMPASSMEM_DATA_DIR": str(tmp_path / "memory"),
                "COMPASSMEM_API_PORT": str(port), "COMPASSMEM_DEV_BROKER_PORT": "0",
                "COMPASSMEM_EMBEDDER_CACHE_DIR": str(MODEL_CACHE), "HF_HUB_OFFLINE": "1"})
    replay = Replay(tmp_path, env, port)
    tour = commands(README, *section(README, TOUR_HEADING))
    assert any(c.background for c in tour) and any(c.words[:2] == ["kill", "%1"] for c in tour)
    try:
        for command in tour:
            replay.run(command)
        assert not replay.stop_all(), "the tour leaves a background job running: stop it in the tour"
        # The README's Python snippet, in the tour's data directory now that `dev` has let it go.
        [snippet] = re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.MULTILINE | re.DOTALL)
        python = [sys.executable, "-c", snippet]
        result = subprocess.run(python, cwd=tmp_path, env=env, capture_output=True, text=True,  # noqa: S603
                                timeout=COMMAND_TIMEOUT_S)
        check(Command("README.md (python)", "the Python snippet", False), result.returncode, result.stdout,
              result.stderr)
        assert "['1']" in result.stdout.splitlines()
        for command in commands(GUIDE, GUIDE.read_text()):
            replay.run(command)
    finally:
        replay.stop_all()
    print("seconds per command:", replay.timings)


def test_the_tour_streams_turns_memory_does_not_have_yet() -> None:
    """Step 4 used to produce the file step 1 had ingested: a replay, so nothing new appeared in the explorer."""
    tour = commands(README, *section(README, TOUR_HEADING))
    ingested = {c.words[-1] for c in tour if c.words[1:2] == ["ingest"]}
    produced = {c.words[2] for c in tour if c.words[1:2] == ["produce"]}
    assert ingested and produced

    def turns(paths: set[str]) -> set[tuple[str, str]]:
        lines = [line for path in paths for line in (ROOT / path).read_text().splitlines() if line.strip()]
        return {(turn["conversation_id"], turn["turn_id"]) for turn in map(json.loads, lines)}

    assert turns(produced) and not turns(produced) & turns(ingested)
