"""Game tasks: what every part of sforge needs to know about `[game] server_cmd`.

A game task is played, not submitted: the agent talks to the task's game server through
the judge service (`sforge-game` in the work container), and each finished session's
score is a result of the run. The session machinery is sforge.service.games; this module
holds the answers the CLI, runs and the service share.
"""

from __future__ import annotations

from typing import Any

from sforge.benchmark.model import Task

# The transcript file inside a session's archive (what `[judge] cmd` re-scores).
TRANSCRIPT = "session.jsonl"


def is_game(task: Task) -> bool:
    """A game task: its run grades no final workspace and the service takes no archives."""
    return bool(task.game and task.game.get("server_cmd"))


def server_cmd(task: Task) -> str:
    """The game server's command of a game task; ValueError for any other task."""
    if not is_game(task):
        raise ValueError(f"task {task.id} has no [game] server_cmd")
    return str(task.game["server_cmd"])  # type: ignore[index]


def game_preamble(task: Task, settings: dict[str, Any]) -> str:
    """The part of an agent's prompt that explains `sforge-game` (runs add it to the
    preamble of a game task, in place of `sforge-submit`'s). `settings` are the service's
    games settings (sforge.core.config.games_settings)."""
    per_run = settings["max_sessions_per_run"]
    return (
        "This task is a game: you play it through the `sforge-game` command, not by "
        "submitting files (`sforge-submit` is refused).\n"
        "- `sforge-game new` starts a session and prints the game's opening message.\n"
        "- `sforge-game step '<JSON request>'` sends one request and prints the game's "
        "reply (one JSON line). `sforge-game step -` sends each line of stdin and prints "
        "each reply.\n"
        "- `sforge-game status` shows the session (steps, time left, score once over); "
        "`sforge-game close` ends it; `sforge-game list` shows all your sessions.\n"
        f"- You may start {per_run} session(s) in all, {settings['max_open_per_run']} open "
        f"at a time; a session ends after {settings['idle_timeout_s']:g} s without a step "
        f"or {settings['max_session_s']:g} s in all, and takes at most "
        f"{settings['steps_per_s']:g} steps per second.\n"
        "- Your result is the best score among the sessions you play to the end; a "
        "session closed or timed out before the game is over does not count.\n"
        "The game's own rules and request format are in the instruction above.\n"
    )
