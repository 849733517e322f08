"""The agent's prompt: the task's instruction.md after a short preamble about the loop."""

from __future__ import annotations

import json

from sforge.benchmark.games import game_preamble, is_game
from sforge.benchmark.model import Task
from sforge.core.config import games_settings

PREAMBLE = """\
# How this run works

You are working in `{cwd}` inside a container{net}. You have {minutes} of wall-clock time
(until {deadline} UTC); when it runs out the run stops.

Submit your work for grading with `sforge-submit` (run it from `{cwd}`). It packs {paths}
{exclude}from `{cwd}`, sends them to the judge and prints the score, whether the submission is
valid, and the judge's summary and details. `sforge-submit --list` shows your submissions so
far and your best score; `sforge-submit --result ID` shows one again.
{limits}
The best valid score among your submissions counts (direction: {direction}), and the files
you leave in `{cwd}` when the time runs out are graded too, as a last submission. Submit
early and often; never stop before the time is up if you can still improve.

# The task

"""


GAME_PREAMBLE = """\
# How this run works

You are working in `{cwd}` inside a container{net}. You have {minutes} of wall-clock time
(until {deadline} UTC); when it runs out the run stops.

{game}
# The task

"""


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes >= 120:
        return f"{minutes / 60:.1f} hours"
    return f"{minutes} minutes" if minutes != 1 else "1 minute"


def build_prompt(task: Task, instruction: str, timeout_s: float, deadline_iso: str,
                 budget: int | None = None, cooldown_s: float | None = None,
                 games: dict | None = None) -> str:
    """`games`: the service's games settings (sforge.core.config.games_settings), for the
    preamble of a game task, which is played with sforge-game instead of submitted."""
    net = " with internet access" if task.environment.internet else " with no internet"
    if is_game(task):
        text = GAME_PREAMBLE.format(
            cwd=task.environment.cwd, minutes=_duration(timeout_s), deadline=deadline_iso,
            net=net, game=game_preamble(task, games or games_settings({})))
        return text + instruction.strip() + "\n"
    paths = ", ".join(f"`{p}`" for p in task.submission.paths)
    exclude = (f"(minus {', '.join(f'`{e}`' for e in task.submission.exclude)}) "
               if task.submission.exclude else "")
    limits = []
    if budget is not None:
        limits.append(f"You may submit at most {budget} times.")
    if cooldown_s:
        limits.append(f"Wait at least {cooldown_s:g} s between submissions.")
    text = PREAMBLE.format(
        cwd=task.environment.cwd, minutes=_duration(timeout_s), deadline=deadline_iso,
        net=net, paths=paths, exclude=exclude, direction=task.score.direction,
        limits=("\n" + " ".join(limits) + "\n") if limits else "")
    return text + instruction.strip() + "\n"


def submit_env(task: Task) -> dict[str, str]:
    """What sforge-submit reads to pack a submission: the task's [submission] rules."""
    return {"SFORGE_SUBMIT_PATHS": json.dumps(list(task.submission.paths)),
            "SFORGE_SUBMIT_EXCLUDE": json.dumps(list(task.submission.exclude))}
