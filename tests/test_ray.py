"""The Ray executor on a real local Ray instance (worker processes, not local mode), started once here.

Ray comes with the [test] extra, so these tests always run. The instance binds loopback only, reports
no usage statistics and writes nothing under ~/.ray (a token of this process only). Runs play the tiny
suite (tests/tiny_suite): Ray's worker processes inherit this process's PYTHONPATH, where it is installed,
and each worker resolves it by name, as it would an installed package's suite.
"""

import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
from dataclasses import replace

import anyio
import pytest
from fakes.model_server import FakeModelServer, oracle_policy, serve
from servers import signal_mid_run

from mcp_resili.cli import main
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.integrations.ray import RayExecutor
from mcp_resili.integrations.ray.executor import reread_ray_env

pytestmark = pytest.mark.anyio

RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": secrets.token_hex(32),
}


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray instance of 2 CPUs for this file (one test worker runs the whole file)."""
    saved = {key: os.environ.get(key) for key in RAY_ENV}
    os.environ.update(RAY_ENV)  # read when ray is imported and when its processes start
    import ray

    reread_ray_env()  # another test file on this test worker may have imported ray already

    # Ray's unix sockets live under its temp dir: keep the path short (108-byte limit).
    temp = tempfile.mkdtemp(prefix="ray")
    context = ray.init(
        num_cpus=2,
        num_gpus=0,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        object_store_memory=80 * 1024 * 1024,
        namespace="mcp-resili-tests",
        _temp_dir=temp,
    )
    yield context
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def comparable(result):
    """Every stored field of every episode, with the run id (which differs between runs) masked."""
    out = []
    for r in result.rows:
        fields = (
            r.episode_id,
            r.termination,
            r.label,
            r.value,
            repr(r.score),
            r.trace,
            r.input_tokens,
            r.output_tokens,
            r.cost_usd,
            r.stop_rule,
        )
        out.append(tuple(str(f).replace(result.run_id, "RUN") for f in fields))
    return sorted(out)


CONFIG = {"suite": "tiny", "trials": 1, "limit": 4, "stratified": True, "seed": 3, "time_scale": 0.0}


@pytest.fixture(scope="module")
async def local_rows(tmp_path_factory):
    result = await execute(RunConfig(db=tmp_path_factory.mktemp("local") / "r.db", **CONFIG))
    assert any(r.label != "full" for r in result.rows)  # faults fired: the comparison means something
    return comparable(result)


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


async def test_one_ray_worker_stores_exactly_what_the_local_executor_stores(
    ray_cluster, local_rows, tmp_path
):
    # Two workers give the same rows too: the killed-worker test below compares them.
    workers = 1
    executor = RayExecutor(workers=workers)
    result = await execute(RunConfig(db=tmp_path / "r.db", **CONFIG), executor=executor)
    assert comparable(result) == local_rows
    assert result.executor == "ray" and executor.replayed == 0
    # Real worker processes, one per worker, none of them this one.
    assert len(set(executor.pids)) == workers and os.getpid() not in executor.pids


async def test_two_workers_one_killed_mid_run_store_exactly_the_local_rows_each_once(
    ray_cluster, local_rows, tmp_path
):
    killed = []

    def kill_the_first_worker_handed_a_batch(index, pid, episodes):
        # Whichever worker is handed work first (on a loaded machine one may start long before the
        # other and could play the whole run alone).
        if not killed:
            os.kill(pid, signal.SIGKILL)  # before the batch can come back: it is in flight
            killed.append(episodes)

    executor = RayExecutor(workers=2, on_dispatch=kill_the_first_worker_handed_a_batch)
    result = await execute(RunConfig(db=tmp_path / "r.db", **CONFIG), executor=executor)
    assert killed and executor.replaced >= 1
    assert 1 <= executor.replayed <= 4  # what was in flight on the dead worker, nothing else
    assert len({r.episode_id for r in result.rows}) == len(result.rows) == len(local_rows)
    assert comparable(result) == local_rows
    assert len(set(executor.pids)) == 2 and os.getpid() not in executor.pids


async def test_reflexion_chains_stay_whole_on_two_workers_so_later_trials_start_with_the_first_ones_lesson(
    ray_cluster, tmp_path
):
    # The first call of every tool meets a connection reset: the learner's first trial fails, and
    # only a trial that starts with that trial's reflection (played after it, same memory) passes.
    # On ReliabilityBench: its learner is the agent whose later trials depend on the reflection.
    faults = tmp_path / "first-calls.json"
    faults.write_text(
        '{"kind": "rules", "rules": [{"tool": "*", "calls": [1], "fault": {"type": "connection_reset"}}]}'
    )
    config = {
        "suite": "reliabilitybench",
        "models": ("scripted:learner",),
        "faults": (str(faults),),
        "architecture": "reflexion",
        "trials": 3,
        "limit": 2,
        "time_scale": 0.0,
    }
    local = await execute(RunConfig(db=tmp_path / "l.db", **config))
    executor = RayExecutor(workers=2)
    result = await execute(RunConfig(db=tmp_path / "r.db", **config), executor=executor)
    assert comparable(result) == comparable(local) and executor.replayed == 0
    assert sorted((r.trial, r.label) for r in result.rows) == [(0, "failure")] * 2 + [
        (1, "full"),
        (1, "full"),
        (2, "full"),
        (2, "full"),
    ]


async def test_the_cost_cap_holds_for_the_whole_run_across_ray_workers_even_with_one_never_placed(
    ray_cluster, tmp_path
):
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."openai:fake"]\ninput = 1000.0\noutput = 1000.0\n')
    fake = FakeModelServer(oracle_policy())
    async with serve(fake.app) as url:  # the workers call it over loopback HTTP
        config = RunConfig(
            suite="tiny",
            db=tmp_path / "r.db",
            models=("openai:fake",),
            faults=("none",),
            trials=2,
            limit=6,
            concurrency=4,
            base_url=f"{url}/v1",
            prices=prices,
            max_cost=1.0,
        )
        # Three workers asked of a 2-CPU instance: Ray places two; the third must not hold up the run.
        executor = RayExecutor(workers=3)
        with anyio.fail_after(120):
            result = await execute(config, executor=executor)
    assert sum(pid is not None for pid in executor.pids) == 2
    # One call here costs ~$0.13 (120-130 tokens at $1000/M): every call started before the cap was
    # reached, and no more, so the spend passes the cap by at most one call per episode in flight.
    assert result.stopped == "max_cost" and result.spent_usd is not None
    assert 1.0 <= result.spent_usd < 1.0 + 4 * 0.14
    assert len(result.rows) + result.budget_stopped + result.skipped == 12
    # Episodes in flight when the cap is reached are budget-stopped: at most one per slot, and none
    # when the call that reached it ended the last episode in flight (a loaded machine's schedule).
    assert result.budget_stopped <= 4
    assert all(r.cost_usd > 0 for r in result.rows)


async def test_sigterm_stops_a_ray_run_in_one_line_and_gives_the_cluster_its_cpus_back(ray_cluster, tmp_path):
    import ray

    fake = FakeModelServer(oracle_policy(), hold_after_finishes=3)
    async with serve(fake.app) as url:
        run_args = [
            *("--executor", "ray", "--ray-address", ray_cluster.address_info["gcs_address"]),
            *("--ray-workers", "2", "--model", "openai:fake", "--base-url", f"{url}/v1"),
            *("--suite", "tiny", "--limit", "4", "--trials", "2", "--concurrency", "4"),
        ]
        returncode, stderr = await signal_mid_run(run_args, tmp_path / "r.db", signal.SIGTERM)
        fake.release.set()
    # Ray's own SIGTERM handling would exit 15 after a native stack dump ("*** SIGTERM received").
    assert returncode == 143, stderr
    assert stderr.splitlines()[-1].startswith(
        "mcp-resili: stopped by SIGTERM; finished episodes are stored (resume: mcp-resili run --resume "
    )
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr
    # The run's worker actors were killed on the way out: the cluster gets both CPUs back.
    with anyio.fail_after(60):
        while ray.available_resources().get("CPU", 0) < 2:
            await anyio.sleep(0.05)  # Ray frees an actor's CPU asynchronously; nothing is timed


def test_an_unreachable_ray_address_is_one_line_before_anything_is_stored(tmp_path, capsys, monkeypatch):
    import socket
    import threading

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # where `ray start` records its instance
    record = tmp_path / "ray" / "ray_current_cluster"
    # A bound port that does not listen refuses connections (Ray would retry it for minutes).
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        asked = "is `ray start --head` running there?"
        cases = [
            (["--ray-address", address], None, address, asked),
            (["--ray-address", f"ray://{address}"], None, f"ray://{address}", asked),
            # A `ray start` instance that is gone without `ray stop`: Ray would try to join it.
            ([], "record", address, f"from `ray start` here, recorded in {record} until `ray stop`"),
            (
                ["--ray-address", "auto"],
                "record",
                address,
                f"from `ray start` here, recorded in {record} until `ray stop`",
            ),
            ([], "RAY_ADDRESS", address, "from RAY_ADDRESS"),  # Ray joins it when given no address
        ]
        for flags, source, named, why in cases:
            if source == "record":
                record.parent.mkdir(exist_ok=True)
                record.write_text(address + "\n")
            elif source == "RAY_ADDRESS":
                record.unlink()
                monkeypatch.setenv("RAY_ADDRESS", address)
            db = tmp_path / "r.db"
            argv = ["run", "--suite", "tiny", "--executor", "ray", *flags, "--limit", "1", "--db", str(db)]
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err == f"mcp-resili: error: cannot reach Ray at {named}: Connection refused ({why})\n"
            assert not db.exists()
    # Review findings: a listener that is not Ray (here an HTTP server) hung the run for minutes, and
    # `auto` with no instance, or an address of no known form, left an empty run in the store.
    record.unlink(missing_ok=True)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        http = f"127.0.0.1:{listener.getsockname()[1]}"

        def answer_like_http() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(1024)
                connection.sendall(b"HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Length: 0\r\n\r\n")

        answering = threading.Thread(target=answer_like_http)
        answering.start()
        refusals = [
            (http, "something answers there, but not Ray (it does not speak gRPC)"),
            ("auto", "--ray-address auto found no running Ray instance here"),
            ("127.0.0.1:notaport", "--ray-address '127.0.0.1:notaport' is not HOST:PORT"),
        ]
        for flag, message in refusals:
            db = tmp_path / "r.db"
            assert (
                main(
                    [
                        "run",
                        "--suite",
                        "tiny",
                        "--executor",
                        "ray",
                        "--ray-address",
                        flag,
                        "--limit",
                        "1",
                        "--db",
                        str(db),
                    ]
                )
                == 2
            )
            err = capsys.readouterr().err
            assert err.startswith("mcp-resili: error: ") and message in err and err.count("\n") == 1
            assert not db.exists()
        answering.join(timeout=30)


async def test_a_token_protected_instance_is_joined_by_default_and_by_address_with_ray_auth_mode(
    ray_cluster, tmp_path
):
    # What `ray start --head` leaves for a later `ray.init()`: its address recorded under Ray's
    # temporary directory, and token auth with the token in ~/.ray/auth_token.
    home, ray_tmp = tmp_path / "home", tmp_path / "t"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(RAY_ENV["RAY_AUTH_TOKEN"])
    (ray_tmp / "ray").mkdir(parents=True)
    address = ray_cluster.address_info["gcs_address"]
    (ray_tmp / "ray" / "ray_current_cluster").write_text(address)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    env.update(HOME=str(home), RAY_TMPDIR=str(ray_tmp))

    async def run(*flags, **extra_env):
        argv = [
            "run",
            "--suite",
            "tiny",
            "--executor",
            "ray",
            *flags,
            "--limit",
            "2",
            "--trials",
            "1",
            "--json",
        ]
        argv += ["--db", str(tmp_path / f"{len(flags)}-{len(extra_env)}.db")]
        with anyio.fail_after(120):
            return await anyio.run_process(
                [sys.executable, "-m", "mcp_resili", *argv], env={**env, **extra_env}, check=False
            )

    # Before, the run set a token of its own for a new instance, and could not join this one.
    joined = await run()
    assert joined.returncode == 0, joined.stderr.decode()[-500:]
    assert json.loads(joined.stdout)["episodes"] == 4
    # By address, Ray looks for no token: the line says what is missing (one retry keeps it quick).
    refused = await run("--ray-address", address, RAY_NUM_REDIS_GET_RETRIES="1")
    assert refused.returncode == 2
    assert refused.stderr.decode().splitlines()[-1] == (
        f"mcp-resili: error: cannot start or reach Ray at {address}: Failed to connect to Ray cluster at "
        f"{address} (a cluster with token auth also needs RAY_AUTH_MODE=token, and its token in "
        "RAY_AUTH_TOKEN or ~/.ray/auth_token)"
    )
    joined = await run("--ray-address", address, RAY_AUTH_MODE="token")
    assert joined.returncode == 0, joined.stderr.decode()[-500:]
    assert json.loads(joined.stdout)["episodes"] == 4


def test_worker_shares_split_the_concurrency_exactly_over_no_more_workers_than_slots_or_work():
    from mcp_resili.integrations.ray.executor import worker_shares

    assert worker_shares(8, 2, 100) == [4, 4]
    assert worker_shares(5, 2, 100) == [3, 2]  # 5 in flight, not 2 x ceil(5/2) = 6
    assert worker_shares(3, 16, 100) == [1, 1, 1]  # more workers than slots: 3 workers
    assert worker_shares(8, 100_000, 4) == [2, 2, 2, 2]  # a typo'd --ray-workers: 4 items, 4 workers
    assert worker_shares(1, 1, 0) == [1]


def test_a_workers_feeders_keep_exactly_its_share_in_flight():
    """Review finding: 128 in flight asked, 64 kept (batches capped at 16, 2 per worker); a share of 5
    kept 4 and a share of 1 kept 2."""
    from mcp_resili.integrations.ray.executor import WINDOW, feeder_batches

    for share in (1, 2, 3, 5, 64, 1000):
        batches = feeder_batches(share)
        assert len(batches) == WINDOW and sum(batches) == share and max(batches) - min(batches) <= 1
    assert feeder_batches(1) == [1, 0] and feeder_batches(64) == [32, 32]


async def test_more_ray_workers_than_concurrency_start_no_more_actors_than_slots(
    ray_cluster, local_rows, tmp_path
):

    config = replace(RunConfig(db=tmp_path / "r.db", **CONFIG), concurrency=2)
    executor = RayExecutor(workers=100_000)
    with anyio.fail_after(120):
        result = await execute(config, executor=executor)
    assert len(executor.pids) == 2 and comparable(result) == local_rows


async def test_a_budget_actor_that_dies_stops_the_run_in_one_line_and_resume_finishes_it_as_a_local_run(
    ray_cluster, tmp_path
):
    import ray

    from mcp_resili.integrations.ray import RayRunError
    from mcp_resili.store import Store

    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."openai:fake"]\ninput = 1.0\noutput = 1.0\n')
    fake = FakeModelServer(oracle_policy())
    async with serve(fake.app) as url:
        options = {"suite": "tiny", "models": ("openai:fake",), "faults": ("none",), "trials": 1, "limit": 6}
        options.update(concurrency=4, base_url=f"{url}/v1", prices=prices, max_cost=100.0)
        local = await execute(RunConfig(db=tmp_path / "l.db", **options))
        config = RunConfig(db=tmp_path / "r.db", **options)
        executor = RayExecutor(workers=2)

        def kill_the_keeper_on_the_first_batch(index, pid, episodes):
            if executor._keeper is not None:
                ray.kill(executor._keeper)  # what a lost node does to it

        executor.on_dispatch = kill_the_keeper_on_the_first_batch
        # Not an ActorDiedError traceback: the CLI prints this one line (a UserError), exit 2.
        with anyio.fail_after(120), pytest.raises(RayRunError, match=r"^the run's budget actor died"):
            await execute(config, executor=executor)
        store = Store(config.db)
        (run_id,) = store.run_ids()
        kept = store.episodes(run_id)
        store.close()
        assert all(row.label is not None for row in kept)  # nothing cut short was stored

        with anyio.fail_after(120):
            resumed = await execute(config, resume=run_id, executor=RayExecutor(workers=2))
    # The result's rows are the run's stored rows: those kept and those the resume played.
    assert resumed.resumed == len(kept) and resumed.episodes == len(resumed.rows) == len(local.rows)
    assert comparable(resumed) == comparable(local)


class _FailsToArrive:
    """Pickles fine here, but unpickling it (in a Ray worker, building its actor) raises."""

    def __reduce__(self):
        import operator

        return (operator.truediv, (1, 0))


async def test_a_worker_that_dies_three_times_before_it_starts_stops_the_run_in_one_line(
    ray_cluster, tmp_path
):

    from mcp_resili.client.executor import RunJob, WorkItem
    from mcp_resili.client.limits import LimitSpec
    from mcp_resili.client.plan import RunPlan
    from mcp_resili.errors import UserError
    from mcp_resili.integrations.ray import RayRunError
    from mcp_resili.registry.loader import get_suite

    config = RunConfig(db=tmp_path / "r.db", **CONFIG)
    plan = RunPlan.resolve(config, get_suite(config.suite))
    items = [WorkItem((planned,)) for planned in plan.episodes()]
    # Every actor of the slot dies while Ray builds it, as on a node that cannot load the run.
    job = RunJob(replace(plan, config=replace(plan.config, prices=_FailsToArrive())), "run-x", LimitSpec())
    delivered = []
    executor = RayExecutor(workers=1)
    with pytest.raises(RayRunError, match=r"^Ray worker 0 died 3 times before it started \(\w+\); stopping$"):
        await executor.run(job, items, delivered.append)
    assert isinstance(RayRunError("x"), UserError)  # the CLI prints it as one line, exit 2
    # Three actors died: the first and two replacements; none ever told its pid or played anything.
    assert delivered == [] and executor.replaced == 2 and executor.pids == [None]


def test_ray_imported_before_the_run_settles_its_env_still_starts_with_token_auth(tmp_path):
    # Ray reads its auth mode once, at import: imported before the executor settled the token, it
    # stayed off in this process while the instance it started required one (locked out of it).
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_TMPDIR"] = str(tmp_path)  # no `ray start` instance recorded: the run would start one
    script = (
        "import ray\n"
        "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
        "from mcp_resili.integrations.ray.executor import prepare_local_env\n"
        "before = get_authentication_mode()\n"
        "prepare_local_env(None)\n"
        "print(before == AuthenticationMode.TOKEN, get_authentication_mode() == AuthenticationMode.TOKEN)\n"
    )
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_the_ray_executor_without_ray_installed_is_one_line_naming_the_extra(monkeypatch, tmp_path, capsys):
    for key, value in RAY_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets without the extra
    db = tmp_path / "r.db"
    assert (
        main(
            ["run", "--suite", "tiny", "--executor", "ray", "--limit", "1", "--trials", "1", "--db", str(db)]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'mcp-resili[ray]'" in err
    assert not db.exists()


def test_the_cluster_examples_parse_and_pin_the_ray_version_the_extra_installs():
    import tomllib
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    (pin,) = extra  # ray>=2.60,<2.61
    low, high = (tuple(int(x) for x in part.split(".")) for part in pin.removeprefix("ray>=").split(",<"))
    kuberay = yaml.safe_load((root / "examples/ray/kuberay.yaml").read_text())
    version = tuple(int(x) for x in kuberay["spec"]["rayVersion"].split("."))
    assert kuberay["kind"] == "RayCluster" and low <= version < high
    launcher = yaml.safe_load((root / "examples/ray/ray-cluster.yaml").read_text())
    assert any("mcp-resili[ray]" in command for command in launcher["setup_commands"])
    head = kuberay["spec"]["headGroupSpec"]["rayStartParams"]
    assert head["num-cpus"] == "0"  # the driver's node plans and stores; workers play


async def test_an_agent_program_on_a_ray_worker_stores_what_it_stores_locally(ray_cluster, tmp_path):
    from harness_support import first_tasks, stdlib_agent

    from mcp_resili.client.runner import local_executor
    from mcp_resili.harness import session_factory

    config = RunConfig(
        agent_cmd=stdlib_agent("--retries", "2"),
        models=("scripted:oracle",),
        faults=("resilibench",),
        llm_faults="llm:heavy",
        tasks=first_tasks(2),
        trials=1,
        seed=5,
        time_scale=0.0,
    )
    local = await execute(
        replace(config, db=tmp_path / "l.db"), executor=local_executor(session_factory=session_factory)
    )
    executor = RayExecutor(workers=1)
    remote = await execute(replace(config, db=tmp_path / "r.db"), executor=executor)
    assert remote.executor == "ray" and os.getpid() not in executor.pids
    assert len(remote.rows) == 2 and comparable(remote) == comparable(local)
