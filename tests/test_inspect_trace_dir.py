"""``inspect eval mcp_resili/SUITE -T trace_dir=DIR``: a DIR with commas, or one YAML reads as no path.

inspect reads each ``-T`` value as YAML and splits a plain string at every comma, so the task got a
list (a review finding: a comma in DIR broke the eval). The arguments here go through the function
``inspect eval`` itself parses ``-T`` with. The tasks are built for the tiny suite (its entry point is
installed in this process); the one eval plays ResiliBench, since inspect starts each sample's stdio
server with the MCP SDK's default environment, where only an installed package's suite is found.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval

# Private, but it is exactly what `inspect eval -T ... --task-config ...` calls (inspect_ai/_cli/eval.py).
from inspect_ai._cli.util import parse_cli_config
from inspect_ai.log import read_eval_log

from mcp_resili.integrations.inspect.episode import SampleEpisode
from mcp_resili.integrations.inspect.errors import ArgumentError
from mcp_resili.integrations.inspect.tasks import SUITE_TASKS

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

#: A ResiliBench task the naive scripted agent makes calls in (so the episode writes a trace).
RESILIBENCH_TASK = "task_3cea3129"


def cli_arguments(*assignments: str) -> dict[str, object]:
    """The task arguments ``inspect eval ... -T A -T B`` passes, parsed by inspect itself."""
    return parse_cli_config(assignments, None)


def test_inspect_splits_a_comma_path_and_the_task_joins_it_back(tmp_path: Path) -> None:
    where = tmp_path / "traces,run 1, v2"
    arguments = cli_arguments(f"trace_dir={where}", "time_scale=0")
    assert arguments["trace_dir"] == [str(tmp_path / "traces"), "run 1", " v2"]  # what inspect does
    SUITE_TASKS["tiny"](**arguments)
    assert where.is_dir() and not (tmp_path / "traces").exists()
    assert list(where.iterdir()) == []  # the write probe left nothing


def test_an_eval_writes_its_traces_into_a_directory_with_a_comma(tmp_path: Path) -> None:
    where = tmp_path / "a,b"
    task = SUITE_TASKS["resilibench"](**cli_arguments(f"trace_dir={where}", "time_scale=0"))
    (log,) = inspect_eval(
        task,
        model="mcp_resili/naive",
        sample_id=RESILIBENCH_TASK,
        epochs=1,
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    log = read_eval_log(log.location)
    assert log.status == "success", log.error
    assert log.samples is not None
    (sample,) = log.samples
    episode = SampleEpisode.from_store(sample.store["mcp_resili:episode"])
    assert Path(episode.trace_dir) == where and not episode.temporary
    assert (where / f"{episode.id}.jsonl").is_file()  # kept: the directory is the user's
    assert not (tmp_path / "a").exists()


def test_a_trace_dir_yaml_reads_as_no_path_is_refused_in_one_line_and_quoting_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for value in ("010", "2024-01-01", "true"):  # YAML: 8, a date, a boolean: the text is gone
        with pytest.raises(ArgumentError) as err:
            SUITE_TASKS["tiny"](**cli_arguments(f"trace_dir={value}"))
        message = str(err.value)
        assert "-T trace_dir must be a directory path" in message and "\n" not in message
    SUITE_TASKS["tiny"](**cli_arguments('trace_dir="010"'))
    assert (tmp_path / "010").is_dir() and not (tmp_path / "8").exists()
