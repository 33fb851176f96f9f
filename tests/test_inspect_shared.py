"""inspect at native speed: one server per eval, one episode per sample, the runner's scores.

One in-process ``eval()`` of two tasks: the default (the task's samples share one server built in
inspect's event loop) and ``-T server=process`` (a ``mcp-resili serve`` process per sample, the
former default), 2 ResiliBench tasks x 2 epochs each, compared score for score with ``mcp-resili run``.
CPU is measured in bench/inspect_cpu.py, never here.
"""

from __future__ import annotations

import anyio
import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import read_eval_log

from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.integrations.inspect import solver
from mcp_resili.integrations.inspect.tasks import SUITE_TASKS, ArgumentError, suite_task
from mcp_resili.server import app
from mcp_resili.store import Store

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

TASKS = ("task_3cea3129", "task_37568ce7")  # naive trials with calls inspect refuses itself
EPOCHS = 2


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    work = tmp_path_factory.mktemp("shared")
    built: list[object] = []
    stdio_servers: list[object] = []
    monkey = pytest.MonkeyPatch()
    original_init, original_server = app.ResiliServer.__init__, solver.mcp_server

    def counting_init(self, *args, **kwargs):
        built.append(self)
        original_init(self, *args, **kwargs)

    def counting_server(*args, **kwargs):
        stdio_servers.append(args)
        return original_server(*args, **kwargs)

    monkey.setattr(app.ResiliServer, "__init__", counting_init)
    monkey.setattr(solver, "mcp_server", counting_server)
    try:
        shared_log, process_log = inspect_eval(
            [
                SUITE_TASKS["resilibench"](time_scale=0, faults="resilibench"),
                SUITE_TASKS["resilibench"](time_scale=0, server="process"),
            ],
            model="mcp_resili/naive",
            sample_id=list(TASKS),
            epochs=EPOCHS,
            log_dir=str(work / "logs"),
            display="none",
        )
    finally:
        monkey.undo()
    in_eval = len(built)
    config = RunConfig(models=("scripted:naive",), tasks=TASKS, trials=EPOCHS, time_scale=0, db=work / "r.db")
    result = anyio.run(execute, config)
    store = Store(work / "r.db", read_only=True)
    rows = store.episodes(result.run_id)
    store.close()
    return {
        "shared": read_eval_log(shared_log.location),
        "process": read_eval_log(process_log.location),
        "servers_built_in_eval": in_eval,
        "stdio_servers": stdio_servers,
        "runner": {(r.task_id, r.trial): r for r in rows},
    }


@pytest.mark.parametrize("case", ["shared", "process"])
def test_every_sample_scores_as_mcp_resili_run_scores_the_same_trial(evaluated, case):
    log = evaluated[case]
    assert log.status == "success", log.error
    samples = {(str(s.id), s.epoch - 1): s for s in log.samples}
    assert sorted(samples) == sorted(evaluated["runner"]) and len(samples) == len(TASKS) * EPOCHS
    for key, sample in samples.items():
        score = sample.scores["resili_scorer"]
        ours = evaluated["runner"][key]
        assert score.metadata["fault_key"] == f"{key[0]}/{key[1]}"
        assert (score.answer, score.metadata["score"]) == (ours.label, ours.score)
        # Each sample is its own episode, named as the runner names them, with its own trace.
        assert score.metadata["episode"].startswith(f"{key[0]}-t{key[1]}-")
        assert score.metadata["trace"]["header"]["episode"] == score.metadata["episode"]


def test_the_default_builds_one_server_for_the_whole_eval_and_starts_no_process(evaluated):
    # Four samples of the shared task: one server object in this process; the `process` task's four
    # samples each started their own `serve` (in a child process, so built nowhere here).
    assert evaluated["servers_built_in_eval"] == 1
    assert len(evaluated["stdio_servers"]) == len(TASKS) * EPOCHS
    episodes = {s.scores["resili_scorer"].metadata["episode"] for s in evaluated["shared"].samples}
    assert len(episodes) == len(TASKS) * EPOCHS  # one episode per sample, never shared


def test_a_server_argument_that_is_neither_a_url_nor_process_is_refused():
    with pytest.raises(ArgumentError, match="or 'process'"):
        suite_task("resilibench", server="stdio")
