"""What the tests of agent runs share: the work containers of one run."""

from __future__ import annotations

import docker

from tests.helpers.benches import Sforge


def run_containers(client: docker.DockerClient, sf: Sforge, run_id: str) -> list:
    """This test's work containers of a run (other sessions may run the same run ids)."""
    folder = str(sf.results / sf.name / "runs" / run_id)
    return [c for c in client.containers.list(all=True, filters={"label": "sforge.run"})
            if c.labels.get("sforge.run.dir", "").startswith(folder + "/")]
